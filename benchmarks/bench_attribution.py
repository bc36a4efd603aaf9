"""Head-level logit attribution vs a plain forward pass, on smollm2-135m (or ``--model gemma3-270m``) at batch 8×128.

Prints seconds/iteration and peak-RSS growth of (a) a plain bridge forward pass,
(b) interp.attribute_logits(unit="head"), (c) transformer-lens run_with_cache +
stack_head_results + projection on the unembedding direction, each measured in a fresh
subprocess (so peaks are independent), and the ratios b/a and c/a. Targets: b/a ≤ 1.25
for both time and peak RSS on smollm2; on gemma3-270m (a 262,144-token unembedding: never projected onto
the whole vocabulary where one direction suffices) b/a ≤ 1.0 in time and ≤ 1.2 in peak RSS.

    python benchmarks/bench_attribution.py [--model smollm2-135m] [--batch 8] [--seq 128] [--iters 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time, threading, psutil, torch
import interp
from interp.attribution import attribute_logits
mode, B, T, iters, name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(2)
model = interp.load_model(name)
if mode == "tl":
    model.bridge.enable_compatibility_mode(disable_warnings=True)
g = torch.Generator().manual_seed(0)
tokens = torch.randint(100, model.arch.d_vocab, (B, T), generator=g)
answer = torch.randint(100, model.arch.d_vocab, (B,), generator=g)
wrong = torch.randint(100, model.arch.d_vocab, (B,), generator=g)
proc = psutil.Process()
peak = [proc.memory_info().rss]
stop = False
def watch():
    while not stop:
        peak[0] = max(peak[0], proc.memory_info().rss); time.sleep(0.005)
def run():
    if mode == "forward":
        with torch.inference_mode():
            model.bridge(tokens)
    elif mode == "interp":
        attribute_logits(model, tokens, answer=answer, wrong=wrong, unit="head", progress=False)
    else:
        with torch.inference_mode():
            logits, cache = model.bridge.run_with_cache(tokens)
            stack = cache.stack_head_results(layer=-1, pos_slice=-1)
            u = model.bridge.W_U[:, answer] - model.bridge.W_U[:, wrong]
            cache.apply_ln_to_stack(stack, layer=-1, pos_slice=-1)
            (stack * u.T).sum(-1)
run()  # warm-up (allocator, kernels)
base = proc.memory_info().rss
peak[0] = base
t = threading.Thread(target=watch, daemon=True); t.start()
times = []
for _ in range(iters):
    t0 = time.perf_counter(); run(); times.append(time.perf_counter() - t0)
stop = True; t.join()
print(json.dumps({"mode": mode, "s_per_iter": min(times), "peak_rss_mb": peak[0] / 2**20, "base_rss_mb": base / 2**20}))
"""


def measure(mode: str, args) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(args.batch), str(args.seq), str(args.iters), args.model],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m", choices=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    res = {m: measure(m, args) for m in ("forward", "interp", "tl")}
    f = res["forward"]
    print(f"{args.model}, batch {args.batch}×{args.seq}, best of {args.iters}")
    for m, r in res.items():
        print(
            f"  {m:8s} {r['s_per_iter']:7.3f} s/iter   peak RSS {r['peak_rss_mb']:8.0f} MB "
            f"(steady {r['base_rss_mb']:.0f} MB)   time ×{r['s_per_iter'] / f['s_per_iter']:.2f}   "
            f"peak RSS ×{r['peak_rss_mb'] / f['peak_rss_mb']:.2f}"
        )
    t_max, m_max = (1.0, 1.2) if args.model == "gemma3-270m" else (1.25, 1.25)
    ok = (
        res["interp"]["s_per_iter"] / f["s_per_iter"] <= t_max
        and res["interp"]["peak_rss_mb"] / f["peak_rss_mb"] <= m_max
    )
    print(f"target (interp ≤{t_max}× forward in time, ≤{m_max}× in peak RSS):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
