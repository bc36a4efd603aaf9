"""One forward under every analysis: attribute_logits and trace before/after, in one interleaved run.

On smollm2-135m at batch 8×128 random token ids, one thread, each measurement in a fresh subprocess (so peaks
are independent), alternating the trees given (``--trees OLD NEW``, each put first on PYTHONPATH) round by round;
times are the process's CPU seconds (one thread: steadier than wall time on a shared machine). Measured: (a) a
plain forward of the model's own (its bridge, inference mode), (b) the engine's plain forward, (c)
``attribute_logits(unit="head")``, (d) a ``trace`` (time, and its peak-RSS growth with the trace kept). Prints
the best CPU time of each, the ratios c/a and c/b, and trace's time and peak against the first tree's.
Target: c/a ≤ 0.7.

    python benchmarks/bench_one_forward.py --trees /path/to/old /path/to/new [--rounds 2] [--iters 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import gc, json, sys, threading, time, psutil, torch
torch.set_num_threads(1)
import interp
from interp.attribution import attribute_logits
from interp.engine import Engine
mode, B, T, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model = interp.load_model("smollm2-135m")
g = torch.Generator().manual_seed(0)
tokens = torch.randint(100, model.arch.d_vocab, (B, T), generator=g)
mask = torch.ones_like(tokens)
answer = torch.randint(100, model.arch.d_vocab, (B,), generator=g)
wrong = torch.randint(100, model.arch.d_vocab, (B,), generator=g)
proc = psutil.Process()
def run():
    if mode == "forward":
        with torch.inference_mode():
            return model.bridge(tokens, attention_mask=mask)
    if mode == "engine":
        return Engine.of(model).run(tokens, mask)
    if mode == "attribute":
        return attribute_logits(model, tokens, answer=answer, wrong=wrong, unit="head", progress=False)
    return interp.trace(model, tokens, attention_mask=mask)
kept = run()  # warm-up (allocator, kernels, the engine's fused weights)
del kept
gc.collect()
times, peaks = [], []
for _ in range(iters):
    gc.collect()
    base = proc.memory_info().rss
    peak, stop = [base], [False]
    def watch():
        while not stop[0]:
            peak[0] = max(peak[0], proc.memory_info().rss); time.sleep(0.002)
    th = threading.Thread(target=watch, daemon=True); th.start()
    t0 = time.process_time(); kept = run(); times.append(time.process_time() - t0)
    stop[0] = True; th.join()
    peaks.append((peak[0] - base) / 2**20)
    del kept
print(json.dumps({"s": min(times), "peak_mb": min(peaks)}))
"""


def measure(tree: str, mode: str, args) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(args.batch), str(args.seq), str(args.iters)],
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        raise SystemExit(f"{tree} {mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", nargs="+", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    modes = ("forward", "engine", "attribute", "trace")
    best: dict = {t: {m: {"s": float("inf"), "peak_mb": float("inf")} for m in modes} for t in args.trees}
    for r in range(args.rounds):
        for m in modes:
            for t in args.trees if r % 2 == 0 else args.trees[::-1]:  # interleaved, the order alternating
                res = measure(t, m, args)
                b = best[t][m]
                b["s"], b["peak_mb"] = min(b["s"], res["s"]), min(b["peak_mb"], res["peak_mb"])
                print(f"round {r} {m:9s} {t}: {res['s']:.3f} s CPU, peak +{res['peak_mb']:.0f} MB", flush=True)
    print(f"smollm2-135m, batch {args.batch}×{args.seq}, one thread, best of {args.rounds}×{args.iters}")
    first = best[args.trees[0]]
    for t in args.trees:
        v = best[t]
        print(
            f"{t}: forward {v['forward']['s']:.3f} s · engine {v['engine']['s']:.3f} s · attribute_logits "
            f"{v['attribute']['s']:.3f} s = ×{v['attribute']['s'] / v['forward']['s']:.2f} the model's forward, "
            f"×{v['attribute']['s'] / v['engine']['s']:.2f} the engine's · trace {v['trace']['s']:.3f} s "
            f"(×{v['trace']['s'] / first['trace']['s']:.2f}), peak +{v['trace']['peak_mb']:.0f} MB "
            f"(×{v['trace']['peak_mb'] / first['trace']['peak_mb']:.2f})"
        )


if __name__ == "__main__":
    main()
