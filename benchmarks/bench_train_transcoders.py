"""Transcoder training on smollm2: tokens per second, and held-out FVU / L0 per layer.

    .venv/bin/python benchmarks/bench_train_transcoders.py [--width 1024 --k 8 --tokens 8192 --lr 1e-2 --passes 4]

Trains TopK transcoders for every layer of smollm2-135m with ``interp.features.train_transcoders`` on the
bundled corpus (defaults: the configuration notebooks/09_feature_circuits.py uses, so its cache entry is
filled), in a fresh cache directory unless ``--cache default``. Prints training tokens/s, wall and CPU
seconds, the machine's load average, and as the baseline measured in the same run the tokens/s of the
engine's forward alone on the same sequences (the activations training needs): the ratio is what the
optimisation costs on top of reading the activations. Then the per-layer table (FVU, L0, dead fraction).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import interp  # noqa: E402
from interp.engine import Engine  # noqa: E402
from interp.features import train_transcoders  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--passes", type=int, default=4)
    p.add_argument("--eval-tokens", type=int, default=2048)
    p.add_argument("--cache", default="fresh", help="'fresh' (a temporary directory) or 'default' (~/.cache/interp)")
    args = p.parse_args()
    model = interp.load_model("smollm2-135m")
    cache = tempfile.mkdtemp(prefix="bench_tc_") if args.cache == "fresh" else None
    load0 = os.getloadavg()[0]
    c0, t0 = time.process_time(), time.perf_counter()
    r = train_transcoders(
        model,
        layers="all",
        width=args.width,
        k=args.k,
        tokens=args.tokens,
        lr=args.lr,
        passes=args.passes,
        eval_tokens=args.eval_tokens,
        cache_dir=cache,
        progress=False,
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if r.from_cache:
        print(
            f"loaded from the cache {r.path} (trained earlier at {r.tokens_per_second} tokens/s); "
            "pass --cache fresh to time it"
        )
    else:
        # baseline, same run: the engine's forward over every layer on the same amount of text
        e = Engine(model)
        ids = torch.randint(100, model.arch.d_vocab, (8, 128), generator=torch.Generator().manual_seed(0))
        f0 = time.perf_counter()
        n_fwd = 3
        with torch.inference_mode():
            for _ in range(n_fwd):
                x = e.embed(e.embed_parts(ids))
                for l in range(model.arch.n_layers):
                    x = e.layer(l, x, prompt=torch.arange(8), mask=torch.ones_like(ids))
        fwd_tps = n_fwd * ids.numel() / (time.perf_counter() - f0)
        tps = r.tokens_per_second or float("nan")
        print(
            f"smollm2-135m, {len(r.layers)} layers, width {args.width}, k {args.k}, lr {args.lr}, "
            f"{args.passes} passes: {r.tokens} training "
            f"tokens in {r.train_seconds:.0f} s = {tps:.1f} tokens/s (whole call: wall {wall:.0f} s, cpu {cpu:.0f} s, "
            f"cpu/wall {cpu / wall:.2f}); forward alone {fwd_tps:.1f} tokens/s -> training = {tps / fwd_tps:.2f}x the "
            f"forward's rate; load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cpus"
        )
    df = r.to_dataframe()
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(
        f"held-out ({r.eval_tokens} tokens): FVU mean {df.fvu.mean():.3f} "
        f"(min {df.fvu.min():.3f}, max {df.fvu.max():.3f}), "
        f"L0 mean {df.l0.mean():.1f} (k={args.k}), dead mean {df.dead.mean():.3f}"
    )


if __name__ == "__main__":
    main()
