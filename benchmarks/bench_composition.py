"""All-pairs Q/K/V composition scores on smollm2-135m (270 heads): interp vs transformer-lens, one run.

For each mode, times interp.circuits.composition_scores (packed Gram products of d_head-sized
factors) and transformer-lens's algorithm (``TransformerBridge.all_composition_scores``: the
same stacked weights, KV heads expanded by repeat_interleave, TL's FactoredMatrix SVD collapses,
then every [d_head, d_head] product). TL's own call broadcasts both collapsed factors to
[L, H, L, H, d_head, d_model] and is killed for lack of memory on these 23 GB machines, so the
TL baseline runs its exact maths with the final product chunked by source layer (the SVDs are
computed once, as in the unchunked call; chunking only lowers the memory). Both sides use the
raw (unfolded) weights the bridge exposes. Prints seconds per mode, the ratio TL / interp and
the largest |difference| of the scores. Target: interp ≤ 2 s per mode and ≥ 30× faster.

    python benchmarks/bench_composition.py [--modes Q,K,V] [--repeats 3] [--try-unchunked]

``--try-unchunked`` also runs ``bridge.all_composition_scores(mode)`` itself in a child
process and reports its time or that it died (exit code, e.g. -9 when the kernel kills it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "circuits"))
from circuits_reference import _tl_factors  # noqa: E402  (TL's factors, verbatim; shared with the tests)

import interp  # noqa: E402
from interp.circuits import composition_scores  # noqa: E402


def tl_composition_scores(bridge, mode: str) -> torch.Tensor:
    """TL 4.3's all_composition_scores, final product chunked by source layer (NaN where masked)."""
    left, right = _tl_factors(bridge, mode)
    with torch.no_grad():
        new_left, new_right = left.collapse_l(), right.collapse_r()
        l_norms, r_norms = new_left.norm(dim=[-2, -1]), new_right.norm(dim=[-2, -1])
        rows = []
        for l in range(l_norms.shape[0]):
            comp = (new_left[l][:, None, None] @ new_right[None]).norm(dim=[-2, -1])
            s = comp / r_norms[None] / l_norms[l][:, None, None]
            s[:, : l + 1] = float("nan")
            rows.append(s.float())
    return torch.stack(rows)


CHILD = r"""
import os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch, interp
m = interp.load_model("smollm2-135m")
t = time.perf_counter()
with torch.no_grad():
    m.bridge.all_composition_scores(sys.argv[1])
print(f"{time.perf_counter() - t:.2f}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="Q,K,V")
    ap.add_argument("--repeats", type=int, default=3, help="interp timings per mode (the minimum is reported)")
    ap.add_argument("--try-unchunked", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    model = interp.load_model("smollm2-135m")
    a = model.arch
    print(
        f"{model.name}: {a.n_layers} layers × {a.n_heads} heads ({a.n_kv_heads} KV) = {a.n_layers * a.n_heads} heads, "
        f"d_model {a.d_model}, d_head {a.d_head}"
    )
    composition_scores(model, "K", fold_norms=False)  # warm-up
    print("wall = elapsed seconds, cpu = process CPU seconds (less sensitive to other jobs on a shared machine)")
    print(
        f"{'mode':>4} {'interp wall':>11} {'cpu':>6} {'TL wall':>8} {'cpu':>6} {'TL/interp wall':>14} {'cpu':>6} "
        f"{'max |diff|':>10}  interp(fold_norms=True) wall"
    )
    for mode in args.modes.split(","):
        walls, cpus = [], []
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            ours = composition_scores(model, mode, fold_norms=False)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        t0 = time.perf_counter()
        composition_scores(model, mode)
        t_fold = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        tl = tl_composition_scores(model.bridge, mode)
        t_tl, c_tl = time.perf_counter() - t0, time.process_time() - c0
        mask = ours.mask
        diff = float((ours.scores[mask] - tl[mask]).abs().max())
        t_ours, c_ours = min(walls), min(cpus)
        print(
            f"{mode:>4} {t_ours:11.2f} {c_ours:6.2f} {t_tl:8.1f} {c_tl:6.1f} "
            f"{t_tl / t_ours:13.1f}× {c_tl / c_ours:5.1f}× "
            f"{diff:10.1e}  {t_fold:.2f}",
            flush=True,
        )
        if args.try_unchunked:
            r = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True)
            status = (
                f"{r.stdout.strip().splitlines()[-1]} s" if r.returncode == 0 else f"died (exit code {r.returncode})"
            )
            print(f"     TL bridge.all_composition_scores({mode!r}) unchunked: {status}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f} (timings on a loaded 2-core machine are noisy)")


if __name__ == "__main__":
    main()
