"""What importing interp costs: ``import interp`` (lazy: only :mod:`interp.errors`), then the first use of a public
name (its subpackage, torch, transformer-lens ...), each in a fresh interpreter, against ``import torch`` alone.

    python benchmarks/bench_import.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CASES = {
    "import torch": "import torch",
    "import interp": "import interp",
    "import interp; interp.load_model (engine, models, transformer-lens)": "import interp; interp.load_model",
    "import interp; every public name": "import interp; [getattr(interp, n) for n in interp.__all__]",
}

_TIMED = "import time; _t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    la = os.getloadavg()
    print(f"fresh interpreter per run, best of {args.repeat}; load average {la[0]:.1f} on {os.cpu_count()} cores")
    for label, code in CASES.items():
        times = []
        for _ in range(args.repeat):
            out = subprocess.run(
                [sys.executable, "-c", _TIMED.format(code=code)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONPATH": os.getcwd()},
            )
            times.append(float(out.stdout.strip().splitlines()[-1]))
        print(f"  {label:70s} {min(times):6.2f} s")


if __name__ == "__main__":
    main()
