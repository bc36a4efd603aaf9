"""The first load of a catalog model into an empty cache, step by step (the steps ``load_model`` logs at INFO:
assemble / hash the GGUF, dequantize its weights, convert its tokenizer, write and hash the cache entry, load the
Hugging Face model, read the weights, boot the bridge, self-check), then a cached load of the same entry.

    python benchmarks/bench_first_load.py [--model gemma3-270m]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def timed_load(name: str, cache: str) -> None:
    import interp

    steps: list[tuple[str, float]] = []

    class Steps(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if hasattr(record, "step"):
                steps.append((record.step, record.seconds))  # type: ignore[attr-defined]

    log = logging.getLogger("interp.models")
    log.addHandler(Steps())
    log.setLevel(logging.INFO)
    t = time.perf_counter()
    interp.load_model(name, cache_dir=cache, progress=False)
    total = time.perf_counter() - t
    for step, sec in steps:
        print(f"   {step:55s} {sec:7.1f} s")
    print(f"   {'total (imports included)':55s} {total:7.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gemma3-270m")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        for what in ("first load (empty cache)", "cached load"):
            la = os.getloadavg()
            print(f"{args.model}: {what}; load average {la[0]:.1f} on {os.cpu_count()} cores")
            import subprocess
            import sys

            subprocess.run([sys.executable, __file__, "--child", args.model, cache], check=True)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        timed_load(sys.argv[2], sys.argv[3])
    else:
        main()
