"""Peak memory of a residual-stream trace vs a plain forward pass and transformer-lens's cache.

Measures, on smollm2-135m at batch 8 x 128 random token ids (issue 3, "Memory"), the peak RSS
increase of:

  forward      a plain forward pass through the bridge (the baseline)
  trace_full   interp.trace + decompose('unembed') with every term in full: [n_terms, batch, pos, d_model]
  trace_proj   interp.trace(project_onto=2 unembedding columns) + decompose('unembed'): [n_terms, batch, pos, 2]
  trace_project  projection mode, interp.trace(project={'unembed': the same 2 columns}) +
               decompose('unembed'): each write projected during the pass, no activation kept
  tl_cache     transformer-lens run_with_cache on the same bridge (every hook cached)
  tl_heads     run_with_cache + cache.stack_head_results() (TL's per-head split of the stream)

Each measurement runs in a fresh subprocess (so peaks are independent): load the model, one tiny
warm-up forward, gc, then record the resident set size (psutil), reset the kernel's peak counter
(/proc/self/clear_refs; a 1 ms psutil sampler thread where that is unavailable), run the
operation keeping its results alive, and read the peak. Delta = peak - RSS before the operation.

Usage: python benchmarks/bench_trace_memory.py [--model smollm2-135m] [--batch 8] [--pos 128]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import threading
import time

MODES = ("forward", "trace_full", "trace_proj", "trace_project", "tl_cache", "tl_heads")
GOAL = 1.3  # projection mode's peak increase, at most this many times a plain forward's
MB = 2**20


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class _Sampler(threading.Thread):
    """Polls the process RSS every ``dt`` seconds and keeps the maximum."""

    def __init__(self, proc, dt: float = 0.001):
        super().__init__(daemon=True)
        self.proc, self.dt, self.peak, self._done = proc, dt, proc.memory_info().rss, threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.dt)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, self.proc.memory_info().rss)


def child(mode: str, model_name: str, batch: int, pos: int) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import psutil
    import torch

    import interp
    from interp.stream import trace

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = interp.load_model(model_name)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.arch.d_vocab, (batch, pos), generator=g)
    with torch.inference_mode():
        model.bridge(tokens[:1, :8])  # warm-up: lazy buffers, kernels
    U = None
    if mode in ("trace_proj", "trace_project"):
        U = model.weights.W_U[:, [int(tokens[0, 1]), int(tokens[0, 2])]].T.contiguous()  # [2, d_model]
    gc.collect()
    proc = psutil.Process()
    before = proc.memory_info().rss
    exact = _reset_peak()
    sampler = _Sampler(proc)
    sampler.start()
    t0 = time.perf_counter()
    keep: list = []
    info: dict = {}
    if mode == "forward":
        with torch.inference_mode():
            keep.append(model.bridge(tokens))
    elif mode == "trace_full":
        tr = trace(model, tokens)
        d = tr.decompose("unembed")
        keep += [tr, d]
        info = {"n_terms": len(d.labels), "shape": list(d.contributions.shape), "relative_error": d.relative_error}
    elif mode == "trace_proj":
        tr = trace(model, tokens, project_onto=U)
        d = tr.decompose("unembed")
        keep += [tr, d]
        info = {"n_terms": len(d.labels), "shape": list(d.contributions.shape), "relative_error": d.relative_error}
    elif mode == "trace_project":
        tr = trace(model, tokens, project={"unembed": U})
        d = tr.decompose("unembed")
        keep += [tr, d]
        info = {"n_terms": len(d.labels), "shape": list(d.contributions.shape), "relative_error": d.relative_error}
    elif mode in ("tl_cache", "tl_heads"):
        with torch.no_grad():
            logits, cache = model.bridge.run_with_cache(tokens)
            keep += [logits, cache]
            if mode == "tl_heads":
                heads = cache.stack_head_results(layer=-1)
                keep.append(heads)
                info = {"shape": list(heads.shape)}
    else:
        raise SystemExit(f"unknown mode {mode!r}; one of {MODES}")
    seconds = time.perf_counter() - t0
    peak = sampler.stop()
    hwm = _vm_hwm() if exact else None
    if hwm is not None:
        peak = max(peak, hwm)
    return {
        "mode": mode,
        "before_mb": before / MB,
        "peak_mb": peak / MB,
        "delta_mb": (peak - before) / MB,
        "seconds": seconds,
        "exact_peak": hwm is not None,
        **info,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--pos", type=int, default=128)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.model, args.batch, args.pos)), flush=True)
        return

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    results = {}
    for mode in args.modes.split(","):
        cmd = [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--model",
            args.model,
            "--batch",
            str(args.batch),
            "--pos",
            str(args.pos),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            print(f"{mode}: failed (exit {out.returncode})\n{out.stderr[-2000:]}", file=sys.stderr)
            sys.exit(1)
        results[mode] = json.loads(line[0][len("RESULT ") :])

    base = results.get("forward", {}).get("delta_mb")
    print(
        f"peak RSS increase, {args.model}, batch {args.batch} x {args.pos} random ids "
        f"(fresh process each; {'kernel VmHWM' if all(r['exact_peak'] for r in results.values()) else 'sampled'} peaks)"
    )
    print(f"{'mode':<12} {'delta MB':>10} {'x forward':>10} {'seconds':>8}  notes")
    for mode, r in results.items():
        ratio = f"{r['delta_mb'] / base:10.2f}" if base else f"{'-':>10}"
        notes = ""
        if "shape" in r:
            notes = f"shape {r['shape']}"
        if "relative_error" in r:
            notes += f", closure {r['relative_error']:.1e}"
        print(f"{mode:<12} {r['delta_mb']:10.1f} {ratio} {r['seconds']:8.2f}  {notes}")
    if "trace_full" in results and "trace_proj" in results:
        print(f"projection / full trace: {results['trace_proj']['delta_mb'] / results['trace_full']['delta_mb']:.2f}")
    if "trace_project" in results and base:
        ratio = results["trace_project"]["delta_mb"] / base
        print(
            f"projection mode / plain forward (same run): {results['trace_project']['delta_mb']:.1f} MB / "
            f"{base:.1f} MB = {ratio:.2f}x (goal <= {GOAL}x: {'met' if ratio <= GOAL else 'NOT met'})"
        )
    if "trace_proj" in results and "trace_project" in results:
        print(
            f"projection mode / trace + project_onto: "
            f"{results['trace_project']['delta_mb'] / results['trace_proj']['delta_mb']:.2f}"
        )
    if "tl_heads" in results and "trace_full" in results:
        print(f"trace_full / tl_heads:   {results['trace_full']['delta_mb'] / results['tl_heads']['delta_mb']:.2f}")


if __name__ == "__main__":
    main()
