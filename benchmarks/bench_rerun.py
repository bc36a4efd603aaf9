"""The reruns of interventions and generation on smollm2-135m with random transcoders on every layer: seconds per
call of ``intervene`` in its four regimes and of ``generate`` (live and frozen attention), the fastest of
``--reps`` after a warm-up. Run it on two trees in one session to compare them (the same machine state):

    PYTHONPATH=<tree> python benchmarks/bench_rerun.py [--reps 3] [--features 1024] [--tokens 32] [--steps 8]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--features", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    import interp
    from interp.features import Intervention, Transcoder, generate, intervene

    warnings.simplefilter("ignore")  # regime and quality warnings on random transcoders are expected
    torch.set_num_threads(args.threads)
    model = interp.load_model(args.model, progress=False)
    d, F = model.arch.d_model, args.features
    g = torch.Generator().manual_seed(0)
    tcs = [
        Transcoder(
            torch.randn(F, d, generator=g) / d**0.5,
            torch.randn(F, generator=g) * 0.1,
            torch.randn(F, d, generator=g) / F**0.5,
            torch.zeros(d),
            layer=l,
        )
        for l in range(model.arch.n_layers)
    ]
    tokens = torch.randint(100, model.arch.d_vocab, (1, args.tokens), generator=g)
    ivs = [Intervention.scale(f"L3.F5@{args.tokens - 2}", -2.0), Intervention.clamp("L10.F7@*", 2.0)]
    runs = {
        f"intervene(frozen_attention={fa}, freeze_features={ff})": (
            lambda fa=fa, ff=ff: intervene(model, tokens, tcs, ivs, frozen_attention=fa, freeze_features=ff)
        )
        for fa in (False, True)
        for ff in (False, True)
    }
    for fa in (False, True):
        runs[f"generate(frozen_attention={fa}, {args.steps} tokens)"] = lambda fa=fa: generate(
            model, tokens, tcs, ivs, max_new_tokens=args.steps, frozen_attention=fa
        )
    for name, run in runs.items():
        run()  # warm-up
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        print(f"{name:<55} {min(times):8.3f} s")


if __name__ == "__main__":
    main()
