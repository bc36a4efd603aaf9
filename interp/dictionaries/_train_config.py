"""The options of :func:`interp.dictionaries.train_transcoders`, declared once (:class:`TrainConfig`), and a run's
plan: the options checked against the model, the defaults they leave resolved, and the cache key they name.

The cache key (``_Plan.config``) is the resolved options that change the trained weights or the scores — the model
and a fingerprint of its weights, the layers, width, k, tokens, seq_len, batch_size, lr, aux_k, aux_alpha,
dead_after, eval_tokens, seed, the corpus's id, passes, cross_layer and skip — with the format of the training
maths; ``<cache>/transcoders/<model>/<its hash>/`` holds the run.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from interp._validate import check_bool, check_finite_float, check_positive_float, is_int
from interp.dictionaries._corpus import (
    CORPUS_LICENCE,
    CORPUS_NAME,
    CORPUS_SOURCE,
    MODERN_LICENCE,
    MODERN_SOURCE,
    english_corpus,
    modern_corpus,
    modern_corpus_name,
)
from interp.dictionaries._train_state import default_lr, default_passes
from interp.errors import ArgumentError, UnsupportedArchitectureError
from interp.models import Model, default_cache_dir
from interp.stream.internal import require_model

__all__ = ["TrainConfig"]

_FORMAT = 4  # bump when the training maths changes: old caches are not reused (3: zero decoders, centred
# encoder; 4: a CLT's AuxK through its own layer's decoders)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The options of one training run (:func:`interp.dictionaries.train_transcoders`; the training maths and its
    defaults: ``_train_state``). ``train_transcoders(model, config)``, ``train_transcoders(model, **options)`` and
    ``train_transcoders(model, config, **options)`` (the options replacing the config's fields) are the same call.
    Every field but ``cache_dir``, ``checkpoint_every``, ``progress`` and ``train`` is part of the cache key."""

    #: the layers to train: "all", one layer index or a list of them
    layers: Union[str, int, Sequence[int]]
    #: features per layer
    width: int
    #: features active per token (TopK)
    k: int
    #: training tokens, read in whole steps of batch_size · seq_len
    tokens: int
    #: tokens per training sequence (position 0, the attention sink, is neither trained on nor scored)
    seq_len: int = 128
    #: sequences per step
    batch_size: int = 8
    #: Adam's peak learning rate after a linear warm-up over the first 5 % of the updates; None: :func:`default_lr`
    #: for the width and the number of updates
    lr: Optional[float] = None
    #: dead features that reconstruct the residual (AuxK); None: d_model / 2
    aux_k: Optional[int] = None
    #: the AuxK loss's weight
    aux_alpha: float = 0.03125
    #: a feature is dead after this many training tokens without firing; None: tokens / 4
    dead_after: Optional[int] = None
    #: held-out tokens of the corpus to score on (and as many of news articles); 0 scores nothing
    eval_tokens: int = 4096
    #: the seed of the initialisation and of the order the training sequences are read in
    seed: int = 0
    #: None or "modern": the bundled modern English corpus; "kjv": the King James Bible; or a list of documents
    #: (every tenth, and at least the last, held out)
    corpus: Union[None, str, Sequence[str]] = None
    #: where runs are cached (None: $INTERP_CACHE or ~/.cache/interp)
    cache_dir: Optional[Union[str, os.PathLike]] = None
    #: steps between resumable checkpoints
    checkpoint_every: int = 25
    #: a tqdm bar with the batch FVU and the dead fraction (None: when training)
    progress: Optional[bool] = None
    #: Adam updates per batch read; None: :func:`default_passes` (4 for a short run, 1 from 64 batches)
    passes: Optional[int] = None
    #: one cross-layer transcoder over the layers instead of one transcoder per layer
    cross_layer: bool = False
    #: a trained affine skip x W_skipᵀ per layer (skip transcoders; per-layer only)
    skip: bool = False
    #: False: only read the cache (a configuration not trained yet is an ArgumentError naming the nearest one)
    train: bool = True


def _int(name: str, v: Any, lo: int, hi: Optional[int] = None, why: str = "") -> int:
    if not is_int(v) or v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ArgumentError(f"{name}={v!r} must be an int {rng}{why}")
    return int(v)


def _check_layers(model: Model, layers: Any) -> list[int]:
    L = model.arch.n_layers
    if layers == "all":
        return list(range(L))
    if is_int(layers):
        layers = [int(layers)]
    if not isinstance(layers, (list, tuple, range)) or len(layers) == 0:
        raise ArgumentError(
            f"layers={layers!r} must be 'all', a layer index or a non-empty list of layer indices in [0, {L - 1}]"
        )
    out = []
    for l in layers:
        if not is_int(l) or not 0 <= l < L:
            raise ArgumentError(f"layers contains {l!r}; layer indices of model {model.name!r} are in [0, {L - 1}]")
        out.append(int(l))
    if len(set(out)) != len(out):
        raise ArgumentError(f"layers={list(layers)!r} repeats a layer")
    return sorted(out)


class _Corpus:
    """The training corpus: its training and held-out documents, id (part of the cache key), source and licence."""

    licence: Optional[str]

    def __init__(self, corpus: Any):
        if corpus is None or corpus == "modern":
            (self.train, self.held), self.id = modern_corpus(), modern_corpus_name()
            self.source, self.licence = MODERN_SOURCE, MODERN_LICENCE
        elif corpus == "kjv":
            (self.train, self.held), self.id = english_corpus(), CORPUS_NAME
            self.source, self.licence = CORPUS_SOURCE, CORPUS_LICENCE
        elif (
            isinstance(corpus, (list, tuple))
            and len(corpus) >= 2
            and all(isinstance(d, str) and d.strip() for d in corpus)
        ):
            docs = list(corpus)
            held = [i for i in range(len(docs)) if i % 10 == 9] or [len(docs) - 1]
            self.train, self.held = [d for i, d in enumerate(docs) if i not in held], [docs[i] for i in held]
            self.id = "custom-" + hashlib.sha256("\x00".join(docs).encode()).hexdigest()[:16]
            self.source, self.licence = f"{len(docs)} documents given as corpus=", None
        else:
            raise ArgumentError(
                f"corpus={corpus!r:.80} must be None or 'modern' (the bundled modern English corpus), 'kjv' (the King "
                "James Bible) or a list of at least 2 non-empty strings (documents; every tenth, and at least the "
                "last, is held out)"
            )


def _fingerprint(model: Model) -> str:
    w = model.weights
    vals = [float(w.W_E.double().sum()), float(w.W_out.double().sum()), float(w.W_in.double().abs().sum())]
    return hashlib.sha256(repr(vals).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Plan:
    """One training run: its options checked (``options``; read through as ``plan.width`` …) and the defaults they
    leave resolved (``layers``, ``passes``, ``lr``, ``aux_k``, ``dead_after``), what names its cache (``config``,
    whose hash names the directory ``root``) and what the result reports of its corpus (``corpus``: source and
    licence)."""

    options: TrainConfig
    model_name: str
    fingerprint: str
    layers: list[int]
    passes: int
    lr: float
    aux_k: int
    dead_after: int
    corpus: _Corpus
    cache: Path

    def __getattr__(self, name: str) -> Any:  # the options as given and checked: width, k, seq_len, …
        if name == "options":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.options, name)

    @property
    def passes_given(self) -> bool:
        return self.options.passes is not None

    @property
    def lr_given(self) -> bool:
        return self.options.lr is not None

    @property
    def step_tokens(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def n_steps(self) -> int:
        return self.options.tokens // self.step_tokens

    @property
    def tokens(self) -> int:
        """The training tokens: whole steps of batch_size · seq_len."""
        return self.n_steps * self.step_tokens

    @property
    def config(self) -> dict[str, Any]:
        """What the cache is keyed by."""
        return dict(
            format=_FORMAT,
            model=self.model_name,
            fingerprint=self.fingerprint,
            layers=self.layers,
            width=self.width,
            k=self.k,
            tokens=self.tokens,
            seq_len=self.seq_len,
            batch_size=self.batch_size,
            lr=self.lr,
            aux_k=self.aux_k,
            aux_alpha=self.aux_alpha,
            dead_after=self.dead_after,
            eval_tokens=self.eval_tokens,
            seed=self.seed,
            corpus=self.corpus.id,
            passes=self.passes,
            schedule="warmup",
            cross_layer=self.cross_layer,
            skip=self.skip,
        )

    @property
    def runs(self) -> Path:
        """``<cache>/transcoders/<model>``: every cached run of this model."""
        return self.cache / "transcoders" / "".join(c if c.isalnum() or c in "-_." else "_" for c in self.model_name)

    @property
    def root(self) -> Path:
        """``<cache>/transcoders/<model>/<hash of config>``."""
        return self.runs / hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint.pt"


def _plan(model: Model, config: Optional["TrainConfig"] = None, **options: Any) -> _Plan:
    """Step 1 of :func:`train_transcoders`: the model and every option checked (typed errors naming the argument),
    the defaults filled in. ``config`` with ``options`` replacing its fields, or the options alone."""
    require_model(model)
    c = _config(config, options)
    a = model.arch
    if not model.has_mlp:
        raise UnsupportedArchitectureError(f"model {model.name!r} has no MLP sublayers to train transcoders for")
    if model.block.normed_stream:
        raise UnsupportedArchitectureError(
            f"model {model.name!r} is post-norm (its stream is normed after each join); "
            "transcoders are trained for pre-norm decoders (the models attribution "
            "graphs support)"
        )
    width = _int("width", c.width, 1)
    seq_len = _int("seq_len", c.seq_len, 2, a.n_ctx, f" (the model's context is {a.n_ctx})")
    batch_size = _int("batch_size", c.batch_size, 1)
    step_tokens = batch_size * seq_len
    tokens = _int("tokens", c.tokens, step_tokens, why=f" (at least one batch: batch_size·seq_len = {step_tokens})")
    if c.lr is not None:
        check_positive_float("lr", c.lr)
    if check_finite_float("aux_alpha", c.aux_alpha) < 0:
        raise ArgumentError(f"aux_alpha={c.aux_alpha!r} must be a finite number >= 0")
    check_bool("progress", c.progress, none="automatic")
    for flag in ("cross_layer", "skip", "train"):
        check_bool(flag, getattr(c, flag))
    if c.skip and c.cross_layer:
        raise ArgumentError(
            "skip=True with cross_layer=True: circuit-tracer's cross-layer format (the CLT cache) holds no skip "
            "weights; train a skip transcoder per layer (cross_layer=False)"
        )
    n_steps = tokens // step_tokens
    passes = default_passes(n_steps) if c.passes is None else _int("passes", c.passes, 1)
    checked = replace(
        c,
        width=width,
        k=_int("k", c.k, 1, width, f" (at most width={width})"),
        tokens=tokens,
        seq_len=seq_len,
        batch_size=batch_size,
        aux_alpha=float(c.aux_alpha),
        eval_tokens=_eval_tokens(c.eval_tokens, seq_len),
        seed=_int("seed", c.seed, 0),
        checkpoint_every=_int("checkpoint_every", c.checkpoint_every, 1),
    )
    return _Plan(
        options=checked,
        model_name=model.name,
        fingerprint=_fingerprint(model),
        layers=_check_layers(model, c.layers),
        passes=passes,
        lr=float(default_lr(width, n_steps * passes) if c.lr is None else c.lr),
        aux_k=a.d_model // 2 if c.aux_k is None else _int("aux_k", c.aux_k, 1),
        dead_after=max(1, tokens // 4) if c.dead_after is None else _int("dead_after", c.dead_after, 1),
        corpus=_Corpus(c.corpus),
        cache=Path(c.cache_dir) if c.cache_dir is not None else default_cache_dir(),
    )


def _config(config: Any, options: dict[str, Any]) -> "TrainConfig":
    """``config`` (a :class:`TrainConfig`) with ``options`` replacing its fields, or a TrainConfig of ``options``;
    an unknown option or a missing required one is an :class:`ArgumentError` naming it."""
    if config is not None and not isinstance(config, TrainConfig):
        raise ArgumentError(f"config={config!r:.80} must be an interp.dictionaries.TrainConfig or None (keywords only)")
    names = [f.name for f in fields(TrainConfig)]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ArgumentError(f"train_transcoders got unknown option(s) {unknown}; the options are {names}")
    if config is not None:
        return replace(config, **options)
    missing = [n for n in ("layers", "width", "k", "tokens") if n not in options]
    if missing:
        raise ArgumentError(f"train_transcoders needs {missing} (keywords, or a TrainConfig holding them)")
    return TrainConfig(**options)


def _eval_tokens(v: Any, seq_len: int) -> int:
    """eval_tokens: 0 (score nothing) or at least one sequence of ``seq_len``."""
    if not is_int(v) or not (v == 0 or v >= seq_len):
        raise ArgumentError(
            f"eval_tokens={v!r} must be 0 (score nothing) or an int >= seq_len={seq_len} (at least one sequence)"
        )
    return int(v)


def _not_cached(plan: _Plan) -> str:
    """train=False without a cached run: the message names the nearest cached configuration and what differs."""
    want = plan.config
    best: Optional[tuple[int, Path, dict[str, Any]]] = None
    for f in sorted(plan.runs.glob("*/metrics.json")) if plan.runs.is_dir() else []:
        try:
            have = json.loads(f.read_text())["config"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        diff = {key: have.get(key) for key in set(want) | set(have) if have.get(key) != want.get(key)}
        if best is None or len(diff) < best[0]:
            best = (len(diff), f.parent, diff)
    where = f"no cached run of this configuration in {str(plan.runs)!r}"
    if best is None:
        return f"train=False: {where}, and none of model {plan.model_name!r} at all; pass train=True to train it"
    fields = ", ".join(f"{key}={v!r} (asked {want.get(key)!r})" for key, v in sorted(best[2].items()))
    return (
        f"train=False: {where}; the nearest is {best[1].name!r}, which differs in {fields}; pass those values to read "
        "it, or train=True to train this one"
    )
