"""Exact activation patching on smollm2-135m: interp vs transformer-lens, timed side by side in one run.

Workloads (IOI: "When John and Mary went to the shops, John gave the bag to" → " Mary" vs " John";
corrupt: the same sentence with two other names, same token length):

1. all heads, all positions, the IOI pair: interp.patch vs transformer-lens's
   ``patching.get_act_patch_attn_head_out_all_pos`` (one forward per head) — same values (≤ 1e-4),
   the time ratio (target ≥ 10×), and interp's achieved GFLOP/s beside the machine's matmul rate;
2. the same on a 16-prompt IOI batch (per-prompt answer tokens; transformer-lens's metric is the
   batch mean of the same logit differences);
3. per-position head patching of the IOI prompt (270 heads × every position; target ≤ 60 s);
4. interp.effects for all 300 components (target ≤ 3× the exact head sweep of workload 1);
5. peak RSS of each workload against a plain forward's (target ≤ 3×), sampled from /proc.

The machine is shared: ratios measured in this run matter, not absolute times. When other processes
hold the cores, torch's intra-op threads stall on each other at every small op (measured on a busy 2-core
machine: a 3 MB elementwise op took 12 ms with 2 threads and 0.4 ms with 1; a plain forward 4.8 s vs
0.3 s), which inflates transformer-lens's many small forwards far more than interp's large batches;
``--threads 1`` gives both sides the same, stable footing.

    python benchmarks/bench_patching.py [--skip-tl-batch] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformer_lens import patching  # noqa: E402

import interp  # noqa: E402
from interp.causal import LogitDiff, effects, patch  # noqa: E402
from interp.causal._patch import shared_prefix  # noqa: E402

CLEAN = "When John and Mary went to the shops, John gave the bag to"
CORRUPT = "When Alice and Bob went to the shops, Alice gave the bag to"
NAMES = [
    "John",
    "Mary",
    "Alice",
    "Bob",
    "Tom",
    "James",
    "Anna",
    "David",
    "Sarah",
    "Mike",
    "Lisa",
    "Paul",
    "Emma",
    "Mark",
    "Kate",
    "Peter",
]
PLACES = ["shops", "park", "store", "school"]
OBJECTS = ["bag", "book", "ball", "drink"]


class PeakRSS:
    """Peak resident set size (bytes) of this process while the block runs, sampled every 5 ms."""

    def __enter__(self):
        self.peak, self._stop = _rss(), False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop:
            self.peak = max(self.peak, _rss())
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop = True
        self._t.join()
        self.peak = max(self.peak, _rss())


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timed(fn, *args, **kwargs):
    with PeakRSS() as mem:
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        dt = time.perf_counter() - t
    return out, dt, mem.peak


def matmul_rate(repeats: int = 20) -> float:
    """GFLOP/s of a float32 [4096, 576] × [576, 1536] product (the MLP's shape), best of ``repeats``."""
    a, b = torch.randn(4096, 576), torch.randn(576, 1536)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * 4096 * 576 * 1536 / best / 1e9


def sweep_flops(m, n_tokens: int, share: int, n_prompts: int) -> float:
    """Flop of interp's all-heads sweep: Σ_l H·P·(L − l) layer passes over the n − share carried positions,
    plus the readout (final norm + full unembedding) of one row per variant and the two base runs."""
    a = m.arch
    d, H, Hkv, dh, f, L = a.d_model, a.n_heads, a.n_kv_heads, a.d_head, a.d_mlp, a.n_layers
    T = n_tokens - share
    per_tok = 2 * d * (H + 2 * Hkv) * dh + 2 * H * dh * d + 2 * 3 * d * f + 4 * H * n_tokens * dh
    passes = sum(H * n_prompts * (L - l) for l in range(L))
    readout = H * L * n_prompts * 2 * d * a.d_vocab
    base = 2 * n_prompts * n_tokens * (L * per_tok) + 2 * n_prompts * 2 * d * a.d_vocab
    return passes * T * per_tok + readout + base


def ioi_batch(m, n: int = 16):
    clean, corrupt, ans, wrong = [], [], [], []
    for i in range(n):
        a, b = NAMES[(2 * i) % 16], NAMES[(2 * i + 1) % 16]
        c, d = NAMES[(2 * i + 5) % 16], NAMES[(2 * i + 10) % 16]
        place, obj = PLACES[i % 4], OBJECTS[(i // 4) % 4]
        clean.append(f"When {a} and {b} went to the {place}, {a} gave the {obj} to")
        corrupt.append(f"When {c} and {d} went to the {place}, {c} gave the {obj} to")
        ans.append(" " + b)
        wrong.append(" " + a)
    ids_c, ids_k = m.to_tokens(clean), m.to_tokens(corrupt)
    assert ids_c.shape == ids_k.shape and (ids_c != m.tokenizer.pad_token_id).all(), "IOI batch must be unpadded"
    return ids_c, ids_k, ans, wrong


def tl_sweep(m, ids_c, ids_k, ans, wrong):
    a = torch.tensor([m.tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in ans])
    w = torch.tensor([m.tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in wrong])
    rows = torch.arange(ids_c.shape[0])

    def metric(logits):
        return (logits[rows, -1, a] - logits[rows, -1, w]).mean()

    with torch.no_grad():
        _, cache = m.bridge.run_with_cache(ids_c)
        return patching.get_act_patch_attn_head_out_all_pos(m.bridge, ids_k, cache, metric)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-tl-batch", action="store_true", help="skip transformer-lens on the 16-prompt batch")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    m = interp.load_model("smollm2-135m")
    ids_c, ids_k = m.to_tokens(CLEAN), m.to_tokens(CORRUPT)
    assert ids_c.shape == ids_k.shape
    met = LogitDiff(" Mary", " John")
    rate = matmul_rate()
    with torch.inference_mode():
        for _ in range(2):
            m.bridge(ids_c)
        fwd = []
        for _ in range(5):
            _, dt, rss_fwd = timed(m.bridge, ids_c)
            fwd.append(dt)
    t_fwd = sorted(fwd)[2]
    print(f"smollm2-135m, {torch.get_num_threads()} threads; IOI prompt {ids_c.shape[1]} tokens")
    print(f"machine float32 matmul [4096x576]x[576x1536]: {rate:.1f} GFLOP/s")
    print(f"plain forward (bridge, 1 prompt): {t_fwd * 1e3:.0f} ms, peak RSS {rss_fwd / 2**30:.2f} GiB")

    # 1. all heads, all positions, the IOI pair
    tl, t_tl, rss_tl = timed(tl_sweep, m, ids_c, ids_k, [" Mary"], [" John"])
    r, t_i, rss_i = timed(patch, m, ids_c, ids_k, metric=met, progress=False)
    diff = float((r.head_matrix() - tl.double()).abs().max())
    share = shared_prefix(interp.causal._common.make_pair(m, ids_c, ids_k, met, need_corrupt=True))
    fl = sweep_flops(m, ids_c.shape[1], share, 1)
    print("\n1. all heads x all positions, IOI pair (270 patches)")
    print(
        f"   transformer-lens get_act_patch_attn_head_out_all_pos: {t_tl:7.2f} s  ({t_tl / t_fwd:.0f} plain forwards)"
    )
    print(
        f"   interp.patch (prefix sharing, one growing batch):       {t_i:7.2f} s  ({t_i / t_fwd:.1f} plain forwards)"
    )
    print(f"   speed-up {t_tl / t_i:.1f}x (target >= 10x); max |interp - TL| = {diff:.2e} (target <= 1e-4)")
    print(
        f"   interp: {fl / 1e9:.0f} GFLOP in {t_i:.2f} s = {fl / t_i / 1e9:.1f} GFLOP/s "
        f"(matmul rate {rate:.1f} GFLOP/s: {fl / t_i / 1e9 / rate:.0%}); shared prefix {share} tokens"
    )

    # 2. the 16-prompt batch
    bc, bk, ans, wrong = ioi_batch(m)
    bmet = LogitDiff(ans, wrong)
    rb, t_ib, rss_ib = timed(patch, m, bc, bk, metric=bmet, progress=False)
    flb = sweep_flops(
        m, bc.shape[1], shared_prefix(interp.causal._common.make_pair(m, bc, bk, bmet, need_corrupt=True)), 16
    )
    print(f"\n2. all heads x all positions, 16-prompt IOI batch ({bc.shape[1]} tokens each)")
    print(
        f"   interp.patch: {t_ib:7.2f} s, {flb / t_ib / 1e9:.1f} GFLOP/s ({flb / t_ib / 1e9 / rate:.0%} of matmul), "
        f"clean {rb.clean:.3f}, corrupt {rb.corrupt:.3f}"
    )
    if not args.skip_tl_batch:
        tlb, t_tlb, _ = timed(tl_sweep, m, bc, bk, ans, wrong)
        print(
            f"   transformer-lens:  {t_tlb:7.2f} s; speed-up {t_tlb / t_ib:.1f}x; "
            f"max |interp - TL| = {float((rb.head_matrix() - tlb.double()).abs().max()):.2e}"
        )

    # 3. per position
    re_, t_each, rss_each = timed(patch, m, ids_c, ids_k, metric=met, positions="each", progress=False)
    print(
        "\n3. all heads x each position, IOI pair "
        f"({270 * (ids_c.shape[1] - share)} patches that can change the metric)"
    )
    print(
        f"   interp.patch(positions='each'): {t_each:6.2f} s "
        f"(target <= 60 s; {t_each / t_i:.1f}x the all-position sweep)"
    )

    # 4. effects
    e, t_eff, rss_eff = timed(effects, m, ids_c, ids_k, metric=met, progress=False)
    print(
        f"\n4. interp.effects, all {len(e.labels)} components: {t_eff:6.2f} s = "
        f"{t_eff / t_i:.2f}x the head sweep (target <= 3x)"
    )
    top = e.top(3)
    for _, row in top.iterrows():
        print(
            f"   {row['node']:>8}: total {row['total']:+.3f}  direct {row['direct']:+.3f}  "
            f"indirect {row['indirect']:+.3f}"
        )

    # 5. memory
    print("\n5. peak RSS (whole process, model included) / plain forward's (target <= 3x)")
    for name, rss in (
        ("heads sweep, IOI pair", rss_i),
        ("heads sweep, 16 prompts", rss_ib),
        ("each position", rss_each),
        ("effects", rss_eff),
        ("transformer-lens sweep", rss_tl),
    ):
        print(f"   {name:<24} {rss / 2**30:5.2f} GiB = {rss / rss_fwd:.2f}x")


if __name__ == "__main__":
    main()
