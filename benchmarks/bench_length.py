"""Each batched analysis against a plain forward of the same tokens, at growing prompt lengths, on smollm2-135m.

At every length T (``--lengths``, default 128, 512, 1024, 2048) one prompt of T random token ids (batch 1) is run
through:

  forward      a plain forward pass through the bridge (the baseline of every ratio)
  attribute    interp.attribute_logits(unit="head") of a logit difference at the last position
  trace        interp.trace (every write and read point kept, for decompositions at any position)
  eap          interp.edge_attribution(method="eap") on a corrupt copy with one token changed (T/2)
  patch_heads  interp.patch(nodes="heads") on the same pair (prefix sharing: the layers from the patched head's on)
  lens         interp.logit_lens at every position (every resid point x position x d_vocab logits)
  tl_heads     transformer-lens run_with_cache + cache.stack_head_results() (the reference)

All modes of one length run in one fresh process (the ratios come from one run: the same load, the same machine
state), each ``--reps`` times after a warm-up on 16 tokens; the time is the fastest rep. The memory is the peak
resident set above the resident set before the call (the kernel's VmHWM, reset per call: ``bench_trace_memory``'s
helpers), the result kept alive until the peak is read; glibc maps every block over 128 KiB on its own and the free
lists are trimmed between calls, so each peak starts from the live memory.

    python benchmarks/bench_length.py [--lengths 128,512] [--reps 2] [--modes forward,attribute] [--threads 1]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_trace_memory import MB, _reset_peak, _Sampler, _vm_hwm  # noqa: E402

MODES = ("forward", "attribute", "trace", "eap", "patch_heads", "lens", "tl_heads")


def _runner(mode: str, model, tokens, corrupt, answer: int, wrong: int):
    import torch

    import interp

    metric = interp.LogitDiff(answer, wrong)

    def run():
        if mode == "forward":
            with torch.inference_mode():
                return model.bridge(tokens)
        if mode == "attribute":
            return interp.attribute_logits(model, tokens, answer=answer, wrong=wrong, unit="head", progress=False)
        if mode == "trace":
            return interp.trace(model, tokens)
        if mode == "eap":
            return interp.edge_attribution(model, tokens, corrupt, metric=metric, method="eap", progress=False)
        if mode == "patch_heads":
            return interp.patch(model, tokens, corrupt, metric=metric, nodes="heads", progress=False)
        if mode == "lens":
            return interp.logit_lens(model, tokens)
        if mode == "tl_heads":
            with torch.no_grad():
                logits, cache = model.bridge.run_with_cache(tokens)
                return logits, cache, cache.stack_head_results(layer=-1)
        raise SystemExit(f"unknown mode {mode!r}; one of {MODES}")

    return run


def _trim() -> None:
    """Free what the last call left: Python's garbage and glibc's free lists (so the next peak starts from the live
    memory; with ``MALLOC_MMAP_THRESHOLD_`` set below, every large tensor is its own mapping, returned on free)."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def child(model_name: str, T: int, modes: list[str], reps: int, threads: int) -> list[dict]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import warnings

    import psutil
    import torch

    import interp

    warnings.simplefilter("ignore")  # completeness and spacing warnings on random tokens are expected
    torch.set_num_threads(threads)
    model = interp.load_model(model_name, progress=False)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(100, model.arch.d_vocab, (1, T), generator=g)
    corrupt = tokens.clone()
    corrupt[0, T // 2] = (int(tokens[0, T // 2]) + 1) % model.arch.d_vocab
    answer, wrong = (int(x) for x in torch.randint(100, model.arch.d_vocab, (2,), generator=g))
    proc = psutil.Process()
    out = []
    for mode in modes:
        n = min(T, 16)
        _runner(mode, model, tokens[:, :n], corrupt[:, :n], answer, wrong)()  # warm-up: kernels, lazy engine state
        run = _runner(mode, model, tokens, corrupt, answer, wrong)
        _trim()
        times, delta = [], 0
        for _ in range(reps):
            before = proc.memory_info().rss
            exact = _reset_peak()  # the kernel's peak counter; a 1 ms sampler thread only where it is missing
            sampler = None if exact else _Sampler(proc)
            if sampler is not None:
                sampler.start()
            t0 = time.perf_counter()
            kept = run()
            times.append(time.perf_counter() - t0)
            hwm = _vm_hwm() if exact else None
            peak = hwm if hwm is not None else (sampler.stop() if sampler is not None else proc.memory_info().rss)
            delta = max(delta, peak - before)
            del kept
            _trim()
        out.append({"mode": mode, "seconds": min(times), "delta_mb": delta / MB, "exact_peak": exact})
        print(f"  T={T} {mode}: {min(times):.3f} s, +{delta / MB:.0f} MB", file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--lengths", default="128,512,1024,2048")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    modes = args.modes.split(",")
    if "forward" not in modes:
        modes = ["forward", *modes]  # every ratio is to it
    if args.child is not None:
        print("RESULT " + json.dumps(child(args.model, args.child, modes, args.reps, args.threads)), flush=True)
        return

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=str(args.threads))
    env["MALLOC_MMAP_THRESHOLD_"] = "131072"  # a fixed threshold: large blocks mapped and unmapped, RSS = live memory
    table: dict[int, list[dict]] = {}
    for T in (int(x) for x in args.lengths.split(",")):
        cmd = [sys.executable, __file__, "--child", str(T), "--model", args.model, "--modes", ",".join(modes)]
        cmd += ["--reps", str(args.reps), "--threads", str(args.threads)]
        res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
        line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
        if res.returncode != 0 or not line:
            print(f"T={T}: failed (exit {res.returncode})", file=sys.stderr)
            sys.exit(1)
        table[T] = json.loads(line[0][len("RESULT ") :])

    print(f"{args.model}, batch 1, {args.threads} thread(s), fastest of {args.reps} reps; memory: peak RSS above the")
    print("RSS before the call (fresh process per length)")
    print(f"| {'T':>5} | {'analysis':<11} | {'seconds':>8} | {'x forward':>9} | {'+MB':>7} | {'x forward':>9} |")
    print(f"|{'-' * 7}|{'-' * 13}|{'-' * 10}|{'-' * 11}|{'-' * 9}|{'-' * 11}|")
    for T, rows in table.items():
        base = next(r for r in rows if r["mode"] == "forward")
        for r in rows:
            mem = f"{r['delta_mb'] / base['delta_mb']:9.2f}" if base["delta_mb"] > 1 else f"{'-':>9}"
            print(
                f"| {T:>5} | {r['mode']:<11} | {r['seconds']:8.3f} | {r['seconds'] / base['seconds']:9.2f} | "
                f"{r['delta_mb']:7.0f} | {mem} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "reps": args.reps, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
