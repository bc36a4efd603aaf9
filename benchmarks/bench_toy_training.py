"""Training time of the shipped toy recipes against the 5-minute budget, and bitwise reproduction.

    .venv/bin/python benchmarks/bench_toy_training.py [--layers 1 2]

For each toy: trains it with ``interp.toy.train``'s shipped recipe (single thread), prints wall
and CPU seconds and their ratio to the 300 s budget (issue 7), the probe numbers, and whether
the weights are bitwise equal to the ones shipped in interp/toy/weights/. On a loaded machine
the wall time grows with the load; the CPU time is the machine-independent figure.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from interp.models.internal import native_state_dict
from interp.toy.train import shipped_recipe, train_toy  # noqa: E402

BUDGET_S = 300.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    for n in args.layers:
        config, recipe = shipped_recipe(n)
        model, log = train_toy(config, recipe, name=f"toy-attn-only-{n}l")
        shipped = load_file(
            os.path.join(here, "..", "interp", "toy", "weights", f"attn-only-{n}l", "model.safetensors")
        )
        trained = native_state_dict(model.bridge)
        same = all(torch.equal(trained[k], v) for k, v in shipped.items())
        f = log.final
        print(
            f"attn-only-{n}l: {recipe.steps} steps, wall {log.wall_seconds:.0f} s "
            f"({log.wall_seconds / BUDGET_S:.2f}× budget), "
            f"cpu {log.cpu_seconds:.0f} s ({log.cpu_seconds / BUDGET_S:.2f}× budget), "
            f"load avg {os.getloadavg()[0]:.1f}; "
            f"probe loss first/second half {f['loss_first_half']:.3f}/{f['loss_second_half']:.3f}; "
            f"max prev-token {max(f['prev_token_score'][0]):.3f}, "
            f"max induction {max(max(r) for r in f['induction_score']):.3f}; "
            f"bitwise equal to shipped weights: {same}"
        )


if __name__ == "__main__":
    main()
