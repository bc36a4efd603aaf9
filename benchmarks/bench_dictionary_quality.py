"""Dictionary quality per layer and training throughput: every layer of a model, one stated budget, one run.

    .venv/bin/python benchmarks/bench_dictionary_quality.py [--model smollm2-135m] [--width 1024 --k 16
        --tokens 32768] [--cross-layer] [--eval-tokens 2048] [--threads 1]

Trains transcoders for every layer of ``--model`` with :func:`interp.features.train_transcoders` at its defaults
(the modern corpus, Adam at ``default_lr``, batch 8 rows of 128 tokens) — one per layer, or one cross-layer
transcoder with ``--cross-layer`` — in a fresh cache, and prints one markdown table: per layer the held-out FVU, L0,
the fraction of features never active, the spliced-in loss recovered and KL (held-out text of the training corpus),
and FVU / never active / loss recovered on news articles (another source); then the means, the run's tokens per
wall and per CPU second (the training process's own), the rate over the first and the last quarter of the run (a
steady run keeps it), and the peak RSS (the model, the training and the scoring).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--eval-tokens", type=int, default=2048)
    ap.add_argument("--cross-layer", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    import interp
    import interp.dictionaries._train as T

    stamps: list[float] = []  # CPU time at each batch's read: the rate over the run
    activations = T._activations

    def timed(*args, **kw):
        stamps.append(time.process_time())
        return activations(*args, **kw)

    T._activations = timed
    model = interp.load_model(a.model)
    t0, c0 = time.perf_counter(), time.process_time()
    r = T.train_transcoders(
        model,
        layers="all",
        width=a.width,
        k=a.k,
        tokens=a.tokens,
        eval_tokens=a.eval_tokens,
        cross_layer=a.cross_layer,
        cache_dir=tempfile.mkdtemp(prefix="bench_dict_"),
        progress=False,
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = r.details.get("steps") or (len(stamps) - 1)
    per_batch = [b - s for s, b in zip(stamps[1 : steps + 1], stamps[2 : steps + 2])]  # stamps[0]: the init batch
    step_tok = r.tokens // steps
    q = max(1, len(per_batch) // 4)
    first, last = step_tok / (sum(per_batch[:q]) / q), step_tok / (sum(per_batch[-q:]) / q)
    df = r.to_dataframe()
    kind = "cross-layer" if a.cross_layer else "per-layer"
    print(
        f"\n{a.model}, {kind}, width {a.width}, k {a.k}, {r.tokens} training tokens ({r.corpus}), lr "
        f"{r.config['lr']:.2e}, {r.config['passes']} updates per batch; scored on {r.eval_tokens} held-out tokens\n"
    )
    cols = ["fvu", "l0", "dead", "loss_recovered", "kl", "fvu_transfer", "dead_transfer", "loss_recovered_transfer"]
    print("| layer | FVU | L0 | never active | loss recovered | KL | news: FVU | never active | loss recovered |")
    print("|---|---|---|---|---|---|---|---|---|")

    def fmt(c: str, v: float) -> str:
        return f"{v:.1%}" if c.startswith("dead") else f"{v:.3f}" if c != "l0" else f"{v:.1f}"

    for _, row in df.iterrows():
        print(f"| {int(row['layer'])} | " + " | ".join(fmt(c, float(row[c])) for c in cols if c in df) + " |")
    print("| mean | " + " | ".join(fmt(c, float(df[c].mean())) for c in cols if c in df) + " |")
    ev = r.evaluation
    if ev is not None and "all" in ev.row_labels:
        i = ev.row_labels.index("all")
        lr_all, kl_all = float(ev.loss_recovered[i]), float(ev.kl_spliced[i])
        print(f"\nevery layer spliced at once: loss recovered {lr_all:.3f}, KL {kl_all:.3f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    cpu_rate = step_tok * len(per_batch) / sum(per_batch)
    print(
        f"\ntraining: {r.tokens_per_second:.0f} tok/s wall, {cpu_rate:.0f} tok/CPU-s (first quarter {first:.0f}, "
        f"last quarter {last:.0f}); whole run {wall:.0f} s wall, {cpu:.0f} CPU-s; peak RSS {rss:.1f} GB; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print("CPU seconds per batch:", " ".join(f"{v:.1f}" for v in per_batch))


if __name__ == "__main__":
    main()
