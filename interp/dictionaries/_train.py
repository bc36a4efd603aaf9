"""Training TopK transcoders — per-layer, or one cross-layer transcoder — on a model's own activations, streamed
from an English corpus, and scoring them as the field scores dictionaries.

For each chosen layer l the transcoder learns the MLP's map x ↦ y, where x is what the MLP reads (the block's
MLP read: through its read norm, or the stream raw; ``_transcoder.mlp_input``) and y the MLP's write as it
joins the stream (after the MLP's output norm where the block has one), both read from
:class:`interp.engine.internal.Engine`'s forward (cut after the last chosen layer)::

    f = TopK(relu(x W_encᵀ + b_enc))     ŷ = f W_dec + b_dec (+ x W_skipᵀ with skip=True: a skip transcoder)

With ``cross_layer=True`` one :class:`CrossLayerTranscoder` is trained instead: layer l's features also write to
every later chosen layer's MLP output, ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l'] + b_dec[l'], and the loss is the joint
one over all output layers. Both are one code path (the maths, the initialisation and the budget:
``_train_state``): encoder l's decoder is [F, m_l, d], writing to the m_l layers from l on (m_l = 1 per-layer,
L − l cross-layer), decoded sparsely (the k active features' rows, never a dense [F, m, d] product).

The corpus (default: modern English — Wikipedia articles and the Python reference, ``_corpus.modern_corpus``;
``corpus="kjv"`` the King James Bible; or a list of documents) is cut into sequences of ``seq_len`` tokens;
position 0 of each sequence (the attention sink, whose activations are outliers) is neither trained on nor scored.
Activations are computed batch by batch (``batch_size`` sequences) and never all kept. Every ``checkpoint_every``
steps the whole state is written atomically (``_train_cache``); a run with the same configuration resumes from it
and ends with the same weights as an uninterrupted run.

The finished dictionaries are scored by :func:`interp.features.evaluate_dictionary` — FVU, L0, the fraction of
features never active, the spliced-in loss recovered and KL per layer (a CLT's every layer spliced at once too) —
on held-out text of the training corpus and on text of another source (news articles, ``_corpus.held_out_corpus``),
so a dictionary that only fits its corpus shows. Dictionaries and scores are cached and returned without training
next time; ``train=False`` only reads the cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from interp.engine.internal import Engine
from interp.errors import ArgumentError, UnsupportedOperationError, warn_user
from interp.dictionaries._corpus import (
    HELD_OUT_SOURCE,
    english_corpus,
    held_out_corpus,
    token_rows,
)
from interp.dictionaries._evaluate import DictionaryEvaluation, evaluate_dictionary
from interp.dictionaries._train_cache import load_final, resume, save_checkpoint, save_final
from interp.dictionaries._train_config import _Corpus  # noqa: F401  (read as _train._Corpus)
from interp.dictionaries._train_config import TrainConfig, _not_cached, _plan, _Plan
from interp.dictionaries._train_state import (
    TrainState,
    dead_fraction,
    default_lr,
    default_passes,
    flush_moments,
    init_state,
    lr_at,
)
from interp.dictionaries._train_state import train_step as _step
from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder, mlp_input
from interp.dictionaries._warnings import DictionaryQualityWarning
from interp.models import Model

__all__ = [
    "TrainConfig",
    "TrainedCrossLayerTranscoder",
    "TrainedTranscoders",
    "default_lr",
    "default_passes",
    "english_corpus",
    "train_transcoders",
]

#: Adam's moments are flushed of subnormal values every this many updates (``_train_state``)
_FLUSH_EVERY = 32


@dataclass(kw_only=True)
class _Trained:
    """What a training run reports, per-layer or cross-layer, scored by :func:`interp.features.evaluate_dictionary`
    on ``eval_tokens`` held-out tokens of the training corpus: ``fvu[i]`` = Σ‖y − ŷ‖² / Σ‖y − ȳ‖² of the MLP output
    of layer ``layers[i]`` (predicting the mean scores 1), ``l0[i]`` the mean number of its features active per
    token, ``dead[i]`` the fraction of them never active there, ``loss_recovered[i]`` the spliced-in loss recovered
    1 − (CE_spliced − CE_clean) / (CE_zero − CE_clean) and ``kl[i]`` KL(clean ‖ spliced) next-token distributions.
    ``evaluation`` is that whole :class:`DictionaryEvaluation` (its row ``all``: every layer spliced at once),
    ``transfer`` the same scores on text of another source (news articles; None where not scored). ``tokens`` counts
    training tokens (sequence positions, position 0 included). ``tokens_per_second`` is the training loop's
    throughput (activations + optimisation) and ``train_seconds`` its wall time; ``score_seconds`` the two scorings'
    and ``call_seconds`` the whole call's up to saving (checks, data, initialisation, loop, scoring) — all of the run
    that trained, None when it was resumed. With ``eval_tokens=0`` nothing is scored: ``evaluation`` is None and the
    per-layer scores are NaN. ``from_cache`` is whether this call trained nothing, ``path`` the cache directory.
    """

    model_name: str
    layers: list[int]
    fvu: list[float]
    l0: list[float]
    dead: list[float]
    tokens: int
    eval_tokens: int
    config: dict[str, Any]
    path: Path
    loss_recovered: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    evaluation: Optional[DictionaryEvaluation] = None
    transfer: Optional[DictionaryEvaluation] = None
    tokens_per_second: Optional[float] = None
    train_seconds: Optional[float] = None
    score_seconds: Optional[float] = None
    call_seconds: Optional[float] = None
    from_cache: bool = False
    corpus: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def _widths(self) -> tuple[list[int], list[Optional[int]]]:
        raise NotImplementedError

    def to_dataframe(self) -> Any:
        """One row per layer: layer, fvu, l0, dead, loss_recovered, kl, n_features, k (held-out text of the training
        corpus), and fvu_transfer, dead_transfer, loss_recovered_transfer on the other source's text."""
        import pandas as pd

        n, k = self._widths()
        df = pd.DataFrame(
            {"layer": self.layers, "fvu": self.fvu, "l0": self.l0, "dead": self.dead}
            | {"loss_recovered": self.loss_recovered, "kl": self.kl, "n_features": n, "k": k}
        )
        if self.transfer is not None:
            rows = _per_layer(self.transfer, self.layers)
            for name in ("fvu", "dead", "loss_recovered"):
                df[f"{name}_transfer"] = rows[name]
        return df

    def __repr__(self) -> str:
        def mean(v: list[float]) -> float:
            return sum(v) / len(v) if v else float("nan")

        return (
            f"{type(self).__name__}({self.model_name!r}: {len(self.layers)} layers, width "
            f"{self.config['width']}, k={self.config['k']}, {self.tokens} tokens; held-out FVU mean "
            f"{mean(self.fvu):.3f}, loss recovered mean {mean(self.loss_recovered):.3f}, L0 mean "
            f"{mean(self.l0):.1f}, never active mean {mean(self.dead):.1%})"
        )


@dataclass(kw_only=True, repr=False)
class TrainedTranscoders(_Trained):
    """Trained per-layer transcoders and their held-out metrics (:class:`_Trained`): ``transcoders[i]`` belongs to
    layer ``layers[i]``."""

    transcoders: list[Transcoder]

    def __getitem__(self, layer: int) -> Transcoder:
        """The transcoder of ``layer`` (a model layer index, not a position in ``layers``)."""
        if layer not in self.layers:
            raise ArgumentError(f"layer={layer!r} was not trained; trained layers: {self.layers}")
        return self.transcoders[self.layers.index(layer)]

    def _widths(self) -> tuple[list[int], list[Optional[int]]]:
        return [t.n_features for t in self.transcoders], [t.k for t in self.transcoders]


@dataclass(kw_only=True, repr=False)
class TrainedCrossLayerTranscoder(_Trained):
    """A trained cross-layer transcoder (``clt``, its encoders at ``layers``) and its held-out metrics per layer
    (:class:`_Trained`; ``fvu[i]`` of the joint reconstruction of layer ``layers[i]``'s MLP output, ``l0[i]`` of
    its encoder's features). ``transcoders`` is ``clt`` too, so that the analyses read the same for both kinds:
    ``attribution_graph(model, prompt, trained.transcoders)``."""

    clt: CrossLayerTranscoder

    @property
    def transcoders(self) -> CrossLayerTranscoder:
        return self.clt

    def _widths(self) -> tuple[list[int], list[Optional[int]]]:
        n = len(self.layers)
        return [self.clt.n_features] * n, [self.clt.k] * n


# ---------------------------------------------------------------------------------------------- inputs


def _sequences(model: Model, docs: list[str], seq_len: int, n_seq: int) -> Tensor:
    """The first ``n_seq`` sequences [n_seq, seq_len] of the documents' concatenated token ids (fewer if the
    documents run out; none if they hold less than one): :func:`interp.dictionaries._corpus.token_rows`."""
    if model.tokenizer is None:
        raise UnsupportedOperationError(f"model {model.name!r} has no tokenizer; training reads text")
    try:
        return token_rows(model, docs, seq_len, n_seq)
    except ArgumentError:  # less than one row
        return torch.zeros(0, seq_len, dtype=torch.long, device="cpu")


# ---------------------------------------------------------------------------------------------- activations


def _activations(e: Engine, ids: Tensor, layers: list[int]) -> tuple[Tensor, Tensor]:
    """MLP inputs and outputs [n_layers, batch·(seq_len − 1), d_model] of ``layers`` for sequences ``ids``
    (position 0 dropped), from the engine's forward up to the last chosen layer."""
    a = e.arch
    B, T = ids.shape
    mask = torch.ones_like(ids)
    prompt = torch.arange(B, device=ids.device)
    xs, ys = [], []
    with torch.inference_mode():
        x = e.embed(e.embed_parts(ids))
        for l in range(max(layers) + 1):
            store: dict[str, Tensor] = {}
            resid = x
            x = e.layer(l, x, prompt=prompt, mask=mask, capture={"resid_mid", "mlp_out"}, store=store)
            if l in layers:
                h2 = mlp_input(e, resid, store.get("resid_mid"), l)  # the MLP's input, as the graph reads it
                xs.append(h2[:, 1:].reshape(-1, a.d_model).float())
                ys.append(store["mlp_out"][:, 1:].reshape(-1, a.d_model).float())
    return torch.stack(xs), torch.stack(ys)


#: a layer warns when its held-out FVU is at least this (predicting the mean scores 1) ...
FVU_WARN = 1.0
#: ... or when more than this fraction of its features never fired on the held-out tokens
DEAD_WARN = 0.5


def _warn_quality(name: str, plan: "_Plan", fvu: list[float], dead: list[float]) -> None:
    """A :class:`DictionaryQualityWarning` naming the layers with held-out FVU ≥ :data:`FVU_WARN` or a dead
    fraction > :data:`DEAD_WARN`, and what to change."""
    bad_fvu = [f"layer {l} (FVU {f:.2f})" for l, f in zip(plan.layers, fvu) if not f < FVU_WARN]
    bad_dead = [f"layer {l} ({d:.0%} dead)" for l, d in zip(plan.layers, dead) if d > DEAD_WARN]
    if not bad_fvu and not bad_dead:
        return
    what = []
    if bad_fvu:
        what.append(
            f"held-out FVU ≥ {FVU_WARN:g} at {', '.join(bad_fvu)}: no better than predicting the mean, so an "
            "attribution graph over these layers is mostly error nodes"
        )
    if bad_dead:
        what.append(
            f"most features never fire on held-out text at {', '.join(bad_dead)}: the dictionary uses a "
            "fraction of its width"
        )
    given = [f"{n}={v:.3g}" for n, v, g in (("lr", plan.lr, plan.lr_given), ("passes", plan.passes, plan.passes_given))]
    if plan.lr_given or plan.passes_given:
        used = f"{' and '.join(given)} were used (leave lr and passes None for the defaults scaled to the budget)"
    else:
        used = f"the defaults scaled to this budget were used ({', '.join(given)})"
    warn_user(
        f"train_transcoders({name!r}): {'; '.join(what)}. Train on more tokens (tokens={plan.tokens} now) or with "
        f"a smaller width (width={plan.width}); {used}",
        DictionaryQualityWarning,
    )


def _warn_budget(plan: "_Plan") -> None:
    """A :class:`DictionaryQualityWarning` before training when the budget cannot use the width: fewer than
    :data:`MIN_FIRINGS` expected firings per feature in training (tokens · k / width), or held-out text too short
    for every feature to fire once (eval_tokens · k < width: the fraction never active is then at least
    1 − eval_tokens · k / width, whatever the training)."""
    per = plan.tokens * plan.k / plan.width
    if per < MIN_FIRINGS:
        warn_user(
            f"train_transcoders: tokens · k / width = {plan.tokens} · {plan.k} / {plan.width} = {per:.1f} firings per "
            f"feature on average (fewer than {MIN_FIRINGS}): most features cannot learn; train on at least "
            f"{MIN_FIRINGS * plan.width // plan.k} tokens or use a width of at most "
            f"{max(1, plan.tokens * plan.k // MIN_FIRINGS)}",
            DictionaryQualityWarning,
        )
    n_eval = (plan.eval_tokens // plan.seq_len) * (plan.seq_len - 1)
    if plan.eval_tokens and n_eval * plan.k < plan.width:
        warn_user(
            f"train_transcoders: the held-out text scores {n_eval} tokens (eval_tokens={plan.eval_tokens}) · k={plan.k}"
            f" = {n_eval * plan.k} activations for width={plan.width} features: at least "
            f"{1 - n_eval * plan.k / plan.width:.0%} of them will read as never active; raise eval_tokens to at least "
            f"{-(-plan.width // plan.k) // (plan.seq_len - 1) * plan.seq_len + plan.seq_len}",
            DictionaryQualityWarning,
        )


# ---------------------------------------------------------------------------------------------- the function


def train_transcoders(
    model: Model, config: Optional[TrainConfig] = None, /, **options: Any
) -> Union[TrainedTranscoders, TrainedCrossLayerTranscoder]:
    """Train TopK transcoders (MLP input → MLP output) for ``layers`` of ``model`` (module docstring), and score them.
    The options are :class:`TrainConfig`'s fields: ``config``, or keywords that build one, or both (the keywords
    replacing the config's fields); an unknown one is an :class:`~interp.errors.ArgumentError`.

    ``width`` features per layer, ``k`` active per token, ``tokens`` training tokens from ``corpus`` (None or
    "modern": the bundled modern English corpus; "kjv": the King James Bible; or a list of documents, every tenth
    held out), read as sequences of ``seq_len`` tokens, ``batch_size`` sequences a step. Adam at ``lr``, reached after
    a linear warm-up over the first 5% of the updates; by default scaled to the width and budget,
    :func:`default_lr` (2e-3 · √(1024 / width) up to 500 updates, falling as 1/√updates to sparsify's Adam setting
    2e-4 / √(width / 2¹⁴)); ``passes`` updates on each batch read (its tokens counted once; default
    :func:`default_passes`: 4 for a short run, 1 from 64 batches — where the model's forward costs more than an
    update, as on a CPU, a short run learns more per token read). The decoders start at zero and the encoder's
    pre-activations centred (``_train_state``: how that keeps the features alive). ``aux_k`` (default d_model / 2)
    dead features reconstruct the residual with weight ``aux_alpha`` (AuxK); a feature is dead after ``dead_after``
    tokens without firing (default tokens / 4). ``skip=True`` adds a trained affine skip x W_skipᵀ (skip
    transcoders; per-layer only). ``progress`` shows a tqdm bar with the batch FVU and the fraction of features dead
    (None: when training).

    Scores (:func:`interp.features.evaluate_dictionary`) on ``eval_tokens`` held-out tokens of the corpus and as
    many of news articles (another source); ``eval_tokens=0`` scores nothing (the scores are NaN). The result
    reports the training loop's seconds and the whole call's (``train_seconds``, ``score_seconds``,
    ``call_seconds``). Cached under ``cache_dir`` (default ``$INTERP_CACHE`` or
    ``~/.cache/interp``) ``/transcoders/<model>/<hash of the configuration>/``, with a resumable checkpoint every
    ``checkpoint_every`` steps. ``train=False`` only reads that cache: a configuration not trained yet is an
    :class:`~interp.errors.ArgumentError` naming the nearest cached one and the fields that differ.

    A budget that cannot use the width (tokens · k / width below :data:`MIN_FIRINGS`, or held-out text too short
    for every feature to fire) warns before training, and a layer whose held-out FVU is ≥ 1 or most of whose
    features never fire warns after it (:class:`DictionaryQualityWarning`, with the numbers and the fix).

    ``cross_layer=True`` trains one :class:`CrossLayerTranscoder` over ``layers`` instead (each encoder's features
    write to its layer's and every later chosen layer's MLP output; the joint loss Σ_l' FVU_l'; ``width`` and ``k``
    per layer) and returns a :class:`TrainedCrossLayerTranscoder` (per-layer held-out scores of the joint
    reconstruction, L0 per encoder); its cache is circuit-tracer's CLT layout, readable by :func:`load_transcoders`.
    """
    # 1. the inputs checked, the configuration and its cache directory
    t_call = time.perf_counter()
    plan = _plan(model, config, **options)
    # 2. a finished run is read from its cache (train=False: only that)
    if (plan.root / "metrics.json").is_file():
        return _result(model, plan, *load_final(plan.root), True)
    if not plan.train:
        raise ArgumentError(_not_cached(plan))
    _warn_budget(plan)
    with torch.inference_mode(False), torch.enable_grad():  # a caller's inference_mode / no_grad: train anyway
        # 3. the data: the first n_steps·batch_size training sequences in a seeded order; the held-out sequences
        train_ids, held = _data(model, plan)
        gen = torch.Generator().manual_seed(plan.seed)
        order = torch.randperm(train_ids.shape[0], generator=gen, device="cpu")
        # 4. the state: resumed from the checkpoint, or initialised (scales, biases) from the first batch
        e = Engine.of(model)
        s, opt, start = _start(e, model, plan, train_ids, order, gen)
        # 5. the Adam updates from there on, checkpointed
        seconds = _optimise(e, model, plan, s, opt, train_ids, order, start)
        trained = (
            s.clt(plan.k, plan.layers, plan.seq_len)
            if plan.cross_layer
            else s.transcoders(plan.k, plan.layers, plan.seq_len)
        )
    # 6. the trained dictionaries scored on held-out text of the corpus and of another source, cached, returned
    t_score = time.perf_counter()
    evals = _score(model, plan, trained, held)
    t_scored = time.perf_counter()
    fresh = start == 0
    m = dict(
        layers=plan.layers,
        config=plan.config,
        train_seconds=seconds if fresh else None,
        tokens_per_second=(plan.tokens / seconds) if fresh and seconds > 0 else None,
        score_seconds=t_scored - t_score if fresh else None,
        call_seconds=t_scored - t_call if fresh else None,
    )
    save_final(plan.root, plan.layers, trained, evals, m)
    plan.checkpoint.unlink(missing_ok=True)
    return _result(model, plan, trained, evals, m, False)


#: a budget of fewer expected firings per feature in training (tokens · k / width) warns
MIN_FIRINGS = 64


def _per_layer(ev: DictionaryEvaluation, layers: list[int]) -> dict[str, list[float]]:
    """Each layer's row of an evaluation: fvu, l0, dead, loss_recovered, kl, in the order of ``layers``."""
    index = {(l, site): i for i, (l, site) in enumerate(zip(ev.layers, ev.sites))}
    rows = [index[(l, "mlp_out")] for l in layers]
    cols = dict(fvu=ev.fvu, l0=ev.l0, dead=ev.dead_fraction, loss_recovered=ev.loss_recovered, kl=ev.kl_spliced)
    return {name: [float(v[i]) for i in rows] for name, v in cols.items()}


def _result(
    model: Model,
    plan: _Plan,
    trained: Union[list[Transcoder], CrossLayerTranscoder],
    evals: dict[str, Optional[DictionaryEvaluation]],
    m: dict[str, Any],
    cached: bool,
) -> Union[TrainedTranscoders, TrainedCrossLayerTranscoder]:
    """The result of a run (trained now, or read from the cache) with its scores; warns on its quality."""
    ev = evals.get("evaluation")
    if ev is None and plan.eval_tokens:
        raise ArgumentError(f"the cached run {str(plan.root)!r} has no evaluation; delete it to retrain")
    if ev is None:  # eval_tokens=0: nothing scored
        nan = [float("nan")] * len(plan.layers)
        rows = {name: list(nan) for name in ("fvu", "l0", "dead", "loss_recovered", "kl")}
    else:
        rows = _per_layer(ev, plan.layers)
        _warn_quality(model.name, plan, rows["fvu"], rows["dead"])
    kw: dict[str, Any] = dict(
        model_name=model.name,
        layers=plan.layers,
        **rows,
        tokens=plan.tokens,
        eval_tokens=0 if ev is None else ev.n_tokens,
        config=plan.config,
        path=plan.root,
        evaluation=ev,
        transfer=evals.get("transfer"),
        tokens_per_second=m.get("tokens_per_second"),
        train_seconds=m.get("train_seconds"),
        score_seconds=m.get("score_seconds"),
        call_seconds=m.get("call_seconds"),
        from_cache=cached,
        corpus=plan.corpus.source,
        details={"licence": plan.corpus.licence, "steps": plan.n_steps, "transfer_source": HELD_OUT_SOURCE},
    )
    if isinstance(trained, CrossLayerTranscoder):
        return TrainedCrossLayerTranscoder(clt=trained, **kw)
    return TrainedTranscoders(transcoders=trained, **kw)


def _data(model: Model, plan: _Plan) -> tuple[Tensor, Tensor]:
    """Step 3: the first n_steps · batch_size training sequences and the held-out sequences [n, seq_len]."""
    train = _sequences(model, plan.corpus.train, plan.seq_len, plan.n_steps * plan.batch_size)
    if train.shape[0] < plan.n_steps * plan.batch_size:
        raise ArgumentError(
            f"tokens={plan.options.tokens} is more than the corpus holds for training "
            f"({train.shape[0] * plan.seq_len} tokens in sequences of {plan.seq_len})"
        )
    held = _sequences(model, plan.corpus.held, plan.seq_len, plan.eval_tokens // plan.seq_len)
    if held.shape[0] == 0 and plan.eval_tokens:
        raise ArgumentError(
            "the held-out documents are shorter than one sequence of seq_len tokens; give a larger corpus"
        )
    return train, held


def _start(
    e: Engine, model: Model, plan: _Plan, train: Tensor, order: Tensor, gen: torch.Generator
) -> tuple[TrainState, torch.optim.Optimizer, int]:
    """Step 4: the parameters and Adam, and the step to start from — the checkpoint's, or 0 with the scales and
    biases from the first batch (``_train_state.init_state``)."""
    s = TrainState(len(plan.layers), e.arch.d_model, plan.width, gen, plan.cross_layer, plan.skip)
    opt = torch.optim.Adam(s.params(), lr=plan.lr, fused=True)  # one kernel per tensor: a third of the time
    if plan.checkpoint.is_file():
        return s, opt, resume(plan.checkpoint, s, opt)
    x0, y0 = _activations(e, train[order[: plan.batch_size]].to(model.device), plan.layers)
    init_state(s, x0.cpu(), y0.cpu())
    return s, opt, 0


def _optimise(
    e: Engine,
    model: Model,
    plan: _Plan,
    s: TrainState,
    opt: torch.optim.Optimizer,
    train: Tensor,
    order: Tensor,
    start: int,
) -> float:
    """Step 5: steps ``start`` .. n_steps − 1, each on one batch read (``passes`` Adam updates on it at the scheduled
    learning rate; Adam's subnormal moments flushed every :data:`_FLUSH_EVERY` updates), a checkpoint every
    ``checkpoint_every`` steps but the last; returns the seconds taken. The bar shows the batch's FVU and the fraction
    of features that have not fired in the last dead_after tokens (or since the start)."""
    from tqdm.auto import tqdm

    n_steps, step_tokens, bs, P = plan.n_steps, plan.step_tokens, plan.batch_size, plan.passes
    show = plan.progress if plan.progress is not None else n_steps > start
    bar = tqdm(
        total=n_steps * step_tokens,
        initial=start * step_tokens,
        desc=f"transcoders {model.name}",
        unit="tok",
        unit_scale=True,
        disable=not show,
    )
    t0 = time.perf_counter()
    try:
        for step in range(start, n_steps):
            x, y = _activations(e, train[order[step * bs : (step + 1) * bs]].to(model.device), plan.layers)
            x, y = x.cpu() / s.sx, y.cpu() / s.sy
            for r in range(P):
                for g in opt.param_groups:
                    g["lr"] = lr_at(plan.lr, step * P + r, n_steps * P)
                fvu = _step(s, opt, x, y, plan.k, plan.aux_k, plan.aux_alpha, plan.dead_after, new_tokens=r == 0)
                if (step * P + r + 1) % _FLUSH_EVERY == 0:
                    flush_moments(opt)
            bar.update(step_tokens)
            if show:
                dead = dead_fraction(s, (step + 1) * x.shape[1], plan.dead_after)
                bar.set_postfix(fvu=f"{float(fvu.mean()):.3f}", dead=f"{dead:.1%}")
            if (step + 1) % plan.checkpoint_every == 0 and step + 1 < n_steps:
                save_checkpoint(plan.checkpoint, s, opt, step + 1)
    finally:
        bar.close()
    return time.perf_counter() - t0


def _score(
    model: Model, plan: _Plan, trained: Union[list[Transcoder], CrossLayerTranscoder], held: Tensor
) -> dict[str, Optional[DictionaryEvaluation]]:
    """Step 6: :func:`evaluate_dictionary` on the corpus's held-out rows and on as many rows of news articles (the
    other source; None when its text gives less than one row); nothing with eval_tokens=0."""
    if not plan.eval_tokens:
        return {"evaluation": None, "transfer": None}
    bs = max(1, min(plan.batch_size, 8))
    ev = evaluate_dictionary(model, trained, tokens=held, batch_size=bs)
    other = _sequences(model, held_out_corpus(), plan.seq_len, held.shape[0])
    return {
        "evaluation": ev,
        "transfer": evaluate_dictionary(model, trained, tokens=other, batch_size=bs) if other.shape[0] else None,
    }
