"""Load time of smollm2-135m: first load (dequantizes the GGUF) vs cached load, in one run.

1. In this process, import interp (timed apart), then ``load_model("smollm2-135m")`` into an
   empty temporary cache: the GGUF is dequantized and the safetensors entry written.
2. In fresh processes (what a user gets when starting a new session), time the cached
   ``load_model`` call ``--repeats`` times, with its steps timed apart: hashing the GGUF (the
   cache key), verifying the entry against its manifest (size, header hash, sampled-block
   hash; see interp/models/_gguf.py), reading the HF model, copying the weights into TL
   layout, booting the transformer-lens bridge.
3. Print both, the ratio, and whether the cached load meets the target (≤ 5 s on the project's
   2-core machines). Exit status 1 if it does not.

    .venv/bin/python benchmarks/bench_load.py [--repeats 3] [--target 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = "smollm2-135m"

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import interp
from interp.models import _gguf, _load, _weights
import transformer_lens.model_bridge  # imported lazily by load_model; count it as import time
t_import = time.perf_counter() - t0
steps = {}
def timed(mod, name, label):
    fn = getattr(mod, name)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            steps[label] = steps.get(label, 0.0) + time.perf_counter() - t
    setattr(mod, name, wrapper)
sha = _gguf.file_sha256
def timed_sha(path):
    t = time.perf_counter()
    try:
        return sha(path)
    finally:
        label = "sha256 of GGUF (cache key)" if str(path).endswith(".gguf") else "  (whole-file sha256 of weights)"
        steps[label] = steps.get(label, 0.0) + time.perf_counter() - t
_gguf.file_sha256 = timed_sha
timed(_gguf, "_read_gguf", "dequantize GGUF (must not run)")
timed(_gguf, "verify_entry", "verify entry (size, header, samples)")
timed(_gguf, "_load_entry", "HF from_pretrained")
timed(_load, "weights_from_hf", "weights -> TL layout")
from transformer_lens.model_bridge import TransformerBridge
boot = TransformerBridge.boot_transformers
def timed_boot(*a, **k):
    t = time.perf_counter()
    try:
        return boot(*a, **k)
    finally:
        steps["bridge boot"] = time.perf_counter() - t
TransformerBridge.boot_transformers = timed_boot
t, c = time.perf_counter(), time.process_time()
interp.load_model(sys.argv[1], cache_dir=sys.argv[2])
print(json.dumps({"import": t_import, "load": time.perf_counter() - t, "cpu": time.process_time() - c, "steps": steps}))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _cached_load(cache: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, MODEL, str(cache)],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"cached load failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="cached loads to time (fresh process each)")
    parser.add_argument("--target", type=float, default=5.0, help="cached-load target in seconds")
    args = parser.parse_args()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    sys.path.insert(0, str(ROOT))

    load_before = os.getloadavg()[0]
    t = time.perf_counter()
    import interp
    import transformer_lens.model_bridge  # noqa: F401

    t_import = time.perf_counter() - t
    cache = Path(tempfile.mkdtemp(prefix="interp-bench-load-"))
    try:
        t, c = time.perf_counter(), time.process_time()
        interp.load_model(MODEL, cache_dir=cache)
        t_first, c_first = time.perf_counter() - t, time.process_time() - c
        runs = [_cached_load(cache) for _ in range(args.repeats)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    loads = [r["load"] for r in runs]
    t_cached = statistics.median(loads)
    load_after = os.getloadavg()[0]
    print(
        f"{MODEL} load time (cpu, {os.cpu_count()} cores; 1-min load average {load_before:.1f} before, "
        f"{load_after:.1f} after: above ~{os.cpu_count()} other processes compete for the cores)"
    )
    print(f"  import interp + transformer-lens : {t_import:6.2f} s (not part of either load)")
    print(f"  first load (dequantize + cache)  : {t_first:6.2f} s  (CPU time {c_first:.2f} s)")
    print(
        f"  cached load, fresh process       : {t_cached:6.2f} s median of {len(loads)} "
        f"(min {min(loads):.2f} s, max {max(loads):.2f} s)"
    )
    cpus = [r["cpu"] for r in runs]
    print(
        f"  cached load, CPU time            : {statistics.median(cpus):6.2f} s median (all threads; what a "
        f"quiet machine's wall time approaches)"
    )
    print(f"  ratio cached / first             : {t_cached / t_first:6.3f}  ({t_first / t_cached:.1f}x faster)")
    best = runs[loads.index(min(loads))]
    print("  cached-load steps (fastest run):")
    for label, seconds in sorted(best["steps"].items(), key=lambda kv: -kv[1]):
        print(f"    {label:40s} {seconds:6.2f} s")
    other = best["load"] - sum(v for k, v in best["steps"].items() if not k.startswith(" "))
    print(f"    {'other':40s} {other:6.2f} s")
    ok = t_cached <= args.target
    print(f"  target cached load <= {args.target:.1f} s: {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
