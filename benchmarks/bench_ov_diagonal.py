"""Copying scores and OV diagonal statistics on smollm2-135m (d_vocab 49152): time and peak memory.

1. ``copying_scores`` for all 270 heads (d_head × d_head cyclic products; one W_U W_E product),
   with the top heads.
2. ``ov_diagonal_stats`` for the top-3 copying heads and one more: seconds (wall and CPU) and
   peak RSS growth per head (sampled every 5 ms), against the baseline of the bare chunked
   product (the unavoidable d_vocab² · d_head work, no statistics), measured in the same run;
   then one head with ``exact_ranks=True``. The dense [d_vocab, d_vocab] circuit (9 GiB in
   float32) is never formed. Targets: ≤ 10 s and ≤ 1.5 GB per head.

    python benchmarks/bench_ov_diagonal.py [--k 5] [--heads L0.H0,...]
"""

from __future__ import annotations

import argparse
import os
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psutil  # noqa: E402
import torch  # noqa: E402

import interp  # noqa: E402
from interp.circuits import copying_scores, ov_diagonal_stats, ov_circuit  # noqa: E402


class PeakRSS:
    """Peak resident-set growth over a block, sampled every 5 ms."""

    def __enter__(self):
        self.proc = psutil.Process()
        self.base = self.peak = self.proc.memory_info().rss
        self.stop = False
        self.t = threading.Thread(target=self._watch, daemon=True)
        self.t.start()
        return self

    def _watch(self):
        while not self.stop:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.base) / 2**20


def product_only(model, layer: int, head: int, chunk_rows: int) -> None:
    """The baseline: the same chunked [d_vocab, d_vocab] product into one buffer, no statistics."""
    c = ov_circuit(model, layer, head, full=True)
    A, B = c.A, c.B
    V = A.shape[0]
    buf = torch.empty(chunk_rows, V)
    with torch.no_grad():
        for s in range(0, V, chunk_rows):
            torch.matmul(A[s : s + chunk_rows], B, out=buf[: min(V, s + chunk_rows) - s])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--heads", default="", help="comma-separated L.H labels (default: top-3 copying heads + L0.H0)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    model = interp.load_model("smollm2-135m")
    V = model.arch.d_vocab
    t0 = time.perf_counter()
    cs = copying_scores(model)
    print(f"copying_scores: {time.perf_counter() - t0:.2f} s for {cs.scores.numel()} heads (d_vocab {V})")
    print("top copying heads (Σλ/Σ|λ| of W_E W_V W_O W_U, norms folded):")
    print(cs.top(10).to_string(index=False))
    print(
        "most negative:",
        ", ".join(
            f"{r.head} {r.copying_score:.3f}"
            for r in cs.to_dataframe().sort_values("copying_score").head(3).itertuples()
        ),
    )
    if args.heads:
        heads = [tuple(int(x) for x in h[1:].split(".H")) for h in args.heads.split(",")]
    else:
        heads = [(int(r.layer), int(r.head_index)) for r in cs.top(3).itertuples()] + [(0, 0)]
    chunk_rows = (256 << 20) // (4 * V)
    print(
        f"\nov_diagonal_stats (k={args.k}, chunks of {chunk_rows} rows = 256 MiB; dense circuit would be "
        f"{V * V * 4 / 2**30:.1f} GiB)"
    )
    print(
        f"{'head':>7} {'top1':>6} {'top' + str(args.k):>6} {'interp s':>9} {'cpu s':>6} {'peak MB':>8} "
        f"{'product-only s':>14} {'interp/product':>14}"
    )
    for layer, head in heads:
        with PeakRSS() as mem:
            t0, c0 = time.perf_counter(), time.process_time()
            st = ov_diagonal_stats(model, layer, head, k=args.k)
            t_ours, c_ours = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        product_only(model, layer, head, chunk_rows)
        t_base = time.perf_counter() - t0
        print(
            f"L{layer}.H{head:<3} {st.top1:6.3f} {st.topk:6.3f} {t_ours:9.2f} {c_ours:6.2f} {mem.growth_mb:8.0f} "
            f"{t_base:14.2f} {t_ours / t_base:13.2f}×",
            flush=True,
        )
    layer, head = heads[0]
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        ex = ov_diagonal_stats(model, layer, head, k=args.k, exact_ranks=True)
        t_ex = time.perf_counter() - t0
    print(
        f"exact_ranks=True on L{layer}.H{head}: {t_ex:.2f} s, peak {mem.growth_mb:.0f} MB, median self-rank "
        f"{int(ex.ranks.median())} of {V}"
    )
    print(f"load average at the end {os.getloadavg()[0]:.1f} (timings on a loaded 2-core machine are noisy)")


if __name__ == "__main__":
    main()
