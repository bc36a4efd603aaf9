"""Attribution patching on smollm2-135m: its cost against a plain forward, and how well it ranks nodes.

Workloads (the IOI pair and 16-prompt batch of bench_patching.py):

1. cost: ``interp.attribution_patch`` for every component (embedding, 270 heads, 30 MLPs) and every
   position, and for every head input (q per head, k/v per KV head) with the QK fix, against a plain
   forward of the same batch (target ≤ 5×; two forwards and a backward are ~4×), with peak RSS;
2. agreement with exact activation patching (``interp.patch``, same nodes, positions, direction):
   Spearman rank correlation of the estimated and the exact effects, for heads, components and head
   inputs — the latter with and without AtP*'s QK fix — and the share of the exact top-10 nodes (by
   |effect|) found in the estimate's top 10.

The machine is shared: ratios measured in this run matter, not absolute times; each cost is the best of
``--iters`` interleaved rounds, in wall time and in this process's CPU time (the work done, which the
machine's load does not change).

    python benchmarks/bench_atp.py [--threads N] [--skip-each]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

import interp  # noqa: E402
from bench_patching import CLEAN, CORRUPT, PeakRSS, ioi_batch  # noqa: E402
from interp.causal import LogitDiff, attribution_patch, patch  # noqa: E402


def interleaved(fns: dict, n: int) -> dict:
    """{name: (best wall seconds, best CPU seconds, peak RSS bytes)} over ``n`` rounds that run every
    function once each, in turn (a shared machine's load then hits them alike), after a warm-up round.
    CPU time (this process, all threads) is the work done, whatever the machine's load."""
    for fn in fns.values():
        fn()
    best = {k: (float("inf"), float("inf"), 0) for k in fns}
    for _ in range(n):
        for k, fn in fns.items():
            with PeakRSS() as mem:
                t, c = time.perf_counter(), time.process_time()
                fn()
                dt, dc = time.perf_counter() - t, time.process_time() - c
            w, cp, r = best[k]
            best[k] = (min(w, dt), min(cp, dc), max(r, mem.peak))
    return best


def agreement(est, exact) -> tuple[float, float]:
    """(Spearman ρ of the effects, share of the exact top 10 by |effect| in the estimate's top 10)."""
    assert est.labels == exact.labels
    a, b = est.effect.flatten().double(), exact.effect.flatten().double()
    rho = float(spearmanr(a.numpy(), b.numpy()).statistic)
    k = min(10, a.numel())
    top_a, top_b = set(a.abs().topk(k).indices.tolist()), set(b.abs().topk(k).indices.tolist())
    return rho, len(top_a & top_b) / k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--skip-each", action="store_true", help="skip the per-position exact sweeps of workload 2")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    m = interp.load_model("smollm2-135m")
    met = LogitDiff(" Mary", " John")
    ids_c, ids_k = m.to_tokens(CLEAN), m.to_tokens(CORRUPT)
    bc, bk, ans, wrong = ioi_batch(m, 16)
    bmet = LogitDiff(ans, wrong)
    print(f"smollm2-135m, {torch.get_num_threads()} threads; IOI pair {ids_c.shape[1]} tokens, batch {tuple(bc.shape)}")

    def forward(ids):
        with torch.inference_mode():
            return m.bridge(ids)

    print("\n1. cost against a plain forward of the same batch (target <= 5x)")
    kinds = {
        "components x each position": dict(nodes="components", positions="each"),
        "components, all positions": dict(nodes="components"),
        "head inputs x each position, QK fix": dict(nodes="head_inputs", positions="each", qk_fix=True),
    }
    for name, c, k, mt in (("IOI pair", ids_c, ids_k, met), ("16 prompts", bc, bk, bmet)):
        fns = {"forward": lambda c=c: forward(c)}
        fns.update(
            {
                what: (lambda kw=kw, c=c, k=k, mt=mt: attribution_patch(m, c, k, metric=mt, **kw))
                for what, kw in kinds.items()
            }
        )
        res = interleaved(fns, args.iters)
        t_f, c_f, rss_f = res.pop("forward")
        for what, (t_a, c_a, rss_a) in res.items():
            print(
                f"  {name:10s} {what:38s} forward {t_f * 1e3:8.1f} ms   AtP {t_a * 1e3:8.1f} ms   "
                f"ratio {t_a / t_f:4.2f}x (CPU time {c_a / c_f:4.2f}x)   "
                f"peak RSS {rss_a / 2**20:5.0f} MB (forward {rss_f / 2**20:5.0f} MB)"
            )

    print("\n2. agreement with exact patching (interp.patch, same nodes/positions, denoising)")
    cases = [("heads", "all"), ("components", "all"), ("head_inputs", "all")]
    if not args.skip_each:
        cases += [("heads", "each"), ("head_inputs", "each")]  # the IOI pair only
    for label, c, k, mt in (("IOI pair", ids_c, ids_k, met), ("16 prompts", bc, bk, bmet)):
        for nodes, positions in cases:
            if label == "16 prompts" and positions == "each":
                continue
            t = time.perf_counter()
            exact = patch(m, c, k, metric=mt, nodes=nodes, positions=positions, progress=False)
            t_exact = time.perf_counter() - t
            fixes = (False, True) if nodes == "head_inputs" else (False,)
            for fix in fixes:
                t = time.perf_counter()
                est = attribution_patch(m, c, k, metric=mt, nodes=nodes, positions=positions, qk_fix=fix)
                t_est = time.perf_counter() - t
                rho, top = agreement(est, exact)
                print(
                    f"  {label:10s} {nodes:11s} {positions:4s} qk_fix={str(fix):5s}  Spearman {rho:6.3f}   "
                    f"top-10 overlap {top:4.0%}   ({est.effect.numel()} effects; exact {t_exact:6.1f} s, "
                    f"AtP {t_est:5.2f} s)"
                )


if __name__ == "__main__":
    main()
