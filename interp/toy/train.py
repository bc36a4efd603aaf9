"""The training recipe of interp's toy attention-only transformers (reproduces the shipped weights).

    python -m interp.toy.train --layers 2 --out interp/toy/weights/attn-only-2l
    python -m interp.toy.train --layers 1 --out interp/toy/weights/attn-only-1l

What the recipe optimises: next-token cross-entropy on :func:`~interp.toy.span_copy_batch`
sequences (a random span copied to a random later offset), as

    loss = mean_{all positions} CE + mean_{predictable positions} CE

The second term up-weights the tokens only induction can predict; the first keeps the model
calibrated (ln n_words) on unpredictable tokens. Why it gets over the induction plateau
quickly (Olsson et al. 2022 describe the plateau and the phase change; both were seen while
building this recipe — benchmarks/bench_toy_training.py measures it):

* random offsets — a fixed offset is solved by positional attention instead of induction;
* learned positions and a short context (32) — the previous-token head is a positional head,
  easy to learn from a small W_pos table;
* a large vocabulary relative to the context (256 words, 32 positions) — a chance repeat of a
  single token is rare, so "seen before ⇒ copy what followed" is reliable and the induction
  head's attention gets sharp (with 64 words it hedges onto <bos>);
* a high constant learning rate (3e-3, Adam β₂ = 0.98) and small width (d_model 64).

Everything is seeded (initialisation by ``ToyConfig.seed`` through transformer-lens's native
init, data by ``Recipe.data_seed``); two runs with the same settings and thread count give
bitwise-identical weights.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from interp._validate import check_positive_int
from interp.errors import ArgumentError
from interp.models import Model, ToyConfig, build_toy, save_toy
from interp.toy._data import span_copy_batch
from interp.toy._probes import probe_report

__all__ = ["Recipe", "TrainingLog", "train_toy", "shipped_recipe", "main"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """Optimiser, data and schedule settings of one training run."""

    steps: int = 6000
    batch_size: int = 64
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    warmup: int = 0  # linear warm-up steps, then constant lr
    predictable_weight: float = 1.0  # weight of the mean loss on induction-predictable tokens
    n_spans: int = 1
    min_span: int = 2
    max_span: Optional[int] = None  # None: (n_ctx - 1) // 2
    data_seed: int = 1
    eval_every: int = 500
    threads: int = 1  # torch threads while training (tiny matmuls: more threads only add spin-waits)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "threads"):
            check_positive_int(name, getattr(self, name))
        if not self.lr > 0:
            raise ArgumentError(f"lr={self.lr!r} must be > 0")


@dataclass(frozen=True)
class TrainingLog:
    """What happened during training: loss curve, probe reports, times."""

    config: ToyConfig
    recipe: Recipe
    steps: tuple[int, ...]
    loss: tuple[float, ...]  # training loss (all-position mean CE), every eval_every steps
    probes: tuple[dict[str, Any], ...]  # probe_report at each eval step
    wall_seconds: float
    cpu_seconds: float
    threads: int
    final: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "recipe": asdict(self.recipe),
            "curve": [
                {
                    "step": s,
                    "loss": l,
                    "loss_second_half": p["loss_second_half"],
                    "max_induction": max(max(r) for r in p["induction_score"]),
                    "max_prev_token": max(p["prev_token_score"][0]),
                }
                for s, l, p in zip(self.steps, self.loss, self.probes)
            ],
            "wall_seconds": round(self.wall_seconds, 1),
            "cpu_seconds": round(self.cpu_seconds, 1),
            "threads": self.threads,
            "final": self.final,
        }


def shipped_recipe(n_layers: int) -> tuple[ToyConfig, Recipe]:
    """The configuration and recipe of the shipped ``attn-only-{n_layers}l`` weights."""
    if n_layers not in (1, 2):
        raise ArgumentError(f"n_layers={n_layers!r}; the shipped toys have 1 or 2 layers")
    config = ToyConfig(
        n_layers=n_layers,
        n_heads=4,
        d_model=64,
        d_head=16,
        d_vocab=258,
        n_ctx=32,
        norm="none",
        positional="learned",
        seed=0,
    )
    return config, Recipe()


def _native_model(config: ToyConfig) -> torch.nn.Module:
    """The bare TL-native module, initialised exactly as ``boot_native`` would."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge.sources.native.init import initialize_native_model
    from transformer_lens.model_bridge.sources.native.model import NativeModel

    cfg = TransformerBridgeConfig.from_dict(config.bridge_config())
    with torch.random.fork_rng(devices=[]):  # do not disturb the caller's RNG
        m = NativeModel(cfg)
        initialize_native_model(m, cfg)
    if config.positional == "none" and m.pos is not None:
        with torch.no_grad():
            m.pos.weight.zero_()
        m.pos.weight.requires_grad_(False)
    return m


def train_toy(
    config: ToyConfig,
    recipe: Recipe = Recipe(),
    *,
    name: str = "toy",
    progress: Optional[Callable[[int, float, dict[str, Any]], None]] = None,
) -> tuple[Model, TrainingLog]:
    """Train a toy with ``recipe``; returns the trained :class:`Model` and its :class:`TrainingLog`.

    Trains the bare native module (no hooks: faster), then wraps the result in a bridge.
    ``progress(step, loss, probe)`` is called at every evaluation. torch's thread count is
    set to ``recipe.threads`` for the run and restored afterwards.
    """
    if not isinstance(config, ToyConfig):
        raise ArgumentError(f"config must be a ToyConfig, got {type(config).__name__}")
    if not isinstance(recipe, Recipe):
        raise ArgumentError(f"recipe must be a Recipe, got {type(recipe).__name__}")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        return _train(config, recipe, name, progress)
    finally:
        torch.set_num_threads(previous_threads)


def _train(
    config: ToyConfig, recipe: Recipe, name: str, progress: Optional[Callable[[int, float, dict[str, Any]], None]]
) -> tuple[Model, TrainingLog]:
    net = _native_model(config).train()
    gen = torch.Generator().manual_seed(recipe.data_seed)
    opt = torch.optim.AdamW(
        [p for p in net.parameters() if p.requires_grad],
        lr=recipe.lr,
        betas=recipe.betas,
        weight_decay=recipe.weight_decay,
    )
    steps, losses, probes = [], [], []
    t0, c0 = time.perf_counter(), time.process_time()
    for step in range(1, recipe.steps + 1):
        lr = recipe.lr * min(1.0, step / recipe.warmup) if recipe.warmup else recipe.lr
        for group in opt.param_groups:
            group["lr"] = lr
        loss, total = _batch_loss(net, config, recipe, gen)
        if not math.isfinite(total.item()):
            raise ArgumentError(f"training diverged at step {step} (loss {float(total)}); lower recipe.lr={recipe.lr}")
        opt.zero_grad(set_to_none=True)
        total.backward()
        opt.step()
        if step % recipe.eval_every == 0 or step == recipe.steps:  # probe a copy of the weights as they are now
            value = loss.item()
            snapshot = {k: v.detach() for k, v in net.state_dict().items()}
            rep = probe_report(
                build_toy(config, name=name, device="cpu", dtype=torch.float32, state_dict=snapshot, source="training"),
                batch=100,
            )
            steps.append(step)
            losses.append(round(value, 4))
            probes.append(rep)
            log.info("step %d loss %.3f probe second-half loss %.3f", step, value, rep["loss_second_half"])
            if progress is not None:
                progress(step, value, rep)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    net.eval()
    model = build_toy(
        config,
        name=name,
        device="cpu",
        dtype=torch.float32,
        state_dict=dict(net.state_dict()),
        source="trained by interp.toy.train",
    )
    final = probe_report(model)
    return model, TrainingLog(
        config=config,
        recipe=recipe,
        steps=tuple(steps),
        loss=tuple(losses),
        probes=tuple(probes),
        wall_seconds=wall,
        cpu_seconds=cpu,
        threads=recipe.threads,
        final=final,
    )


def _batch_loss(net: Any, config: ToyConfig, recipe: Recipe, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(next-token loss, loss to train on) of one span-copy batch: the mean cross-entropy over every position,
    plus ``recipe.predictable_weight`` × the mean over the predictable (copied) positions."""
    V = config.d_vocab
    tokens, predictable = span_copy_batch(
        recipe.batch_size,
        config.n_ctx,
        V,
        generator=gen,
        n_spans=recipe.n_spans,
        min_span=recipe.min_span,
        max_span=recipe.max_span,
    )
    logits = net(tokens)[:, :-1]  # predict token p+1 at position p
    ce = F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1), reduction="none").view(tokens.shape[0], -1)
    loss = ce.mean()
    total = loss
    if recipe.predictable_weight:
        mask = predictable[:, 1:]
        total = loss + recipe.predictable_weight * (ce * mask).sum() / mask.sum().clamp(min=1)
    return loss, total


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m interp.toy.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, required=True, choices=(1, 2), help="1 or 2 attention layers")
    p.add_argument("--out", type=Path, required=True, help="folder to write config.json + model.safetensors")
    p.add_argument("--steps", type=int, default=None, help="override the recipe's step count")
    p.add_argument("--seed", type=int, default=None, help="override the init seed (data seed = seed + 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads while training (default 1: fastest here)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config, recipe = shipped_recipe(args.layers)
    recipe = Recipe(**{**asdict(recipe), "threads": args.threads})
    if args.steps is not None:
        recipe = Recipe(**{**asdict(recipe), "steps": args.steps})
    if args.seed is not None:
        config = ToyConfig(**{**config.to_dict(), "seed": args.seed})
        recipe = Recipe(**{**asdict(recipe), "data_seed": args.seed + 1})
    name = f"toy-attn-only-{args.layers}l"
    model, tlog = train_toy(config, recipe, name=name)
    save_toy(model, args.out, config=config, training=tlog.to_dict())
    f = tlog.final
    logging.info(
        "trained %s in %.0f s wall / %.0f s cpu (%d threads); probe loss first half %.3f, second half %.3f; wrote %s",
        name,
        tlog.wall_seconds,
        tlog.cpu_seconds,
        tlog.threads,
        f["loss_first_half"],
        f["loss_second_half"],
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
