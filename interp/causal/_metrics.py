"""Metrics for causal analyses: one number per prompt read off the model's output at one position.

A metric M maps the model's output at its *metric position* (by default each prompt's last real
token) to a number per prompt:

    LogitDiff(a, w):  M = logit[a] − logit[w]           Logit(t):  M = logit[t]
    LogProb(t):       M = log softmax(logits)[t]         Prob(t):   M = softmax(logits)[t]
    KL():             M = Σ_v p_clean[v] (log p_clean[v] − log p[v])   (KL(clean ‖ patched))
    Direction(u):     M = h · u   (h: the final hidden state at the position, or mean-pooled)

Logit metrics read ``logits = N_f(x) W_U + b_U`` of the final residual x at that position only
(never the full-vocabulary unembedding at every position). Models without logits (encoders such
as MiniLM) are analysed through their final hidden state: there only :class:`Direction` (or a
callable on the hidden state) applies, and a logit metric raises an error naming ``metric``.

The shared interface, used by every causal and edge analysis (a metric binds to an
:class:`interp.engine.internal.BoundMetric`; its input is :func:`interp.engine.readout`, the one logit readout)::

    bound = metric.bind(model, batch)          # tokens resolved, positions fixed, per prompt
    x = bound.select(resid_final, prompt)      # [rows, d_model]: the metric position
    out = bound.read(model, x)                 # logits [rows, d_vocab] or hidden [rows, d_model]
    m = bound(out, prompt=prompt, clean=clean_out)   # [rows]; clean_out only for KL

(For a mean-pooled metric, ``bound.positions`` is None: read every position, then pool —
``bound.select(bound.read(model, resid_final), prompt)`` — so a decoder's final norm applies per token.)

Metrics that read several positions: ``bound.span`` > 1 positions p … p + span − 1 per prompt, and
``bound.at(x, prompt)`` / ``bound.select`` return [rows, span, d] (so ``out`` is [rows, span, d_vocab]).
A multi-token continuation c = (c_1 … c_n) (``LogProb(" Paris, France", multi_token=True)``, also
``Logit``, ``Prob``, ``LogitDiff``) is read teacher-forced: c_1 … c_{n−1} are appended after every
prompt's last real token (``bound.extend(batch)``, applied to clean, corrupt and reference prompts
alike, before any run) and, with p the prompt's last real token,

    LogProb:  Σ_i log softmax(logits_{p+i−1})[c_i]      Logit:  Σ_i logit_{p+i−1}[c_i]
    Prob:     Π_i softmax(logits_{p+i−1})[c_i]          LogitDiff(a, w): Σ_i logit_{p+i−1}[a_i] − logit_{p+i−1}[w_i]

(LogitDiff: both continuations the same length n; the context is the answer's, a_1 … a_{i−1}).
``CustomMetric(f, pos="all")`` gives ``f`` the logits at every position, [rows, pos, d_vocab].

``prompt`` [rows] says which prompt each row belongs to (a batch of variants repeats prompts);
``clean`` is the clean run's ``out`` per prompt [n_prompts, d_out]. Every function here is
differentiable torch, so gradients (attribution patching) flow through it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._validate import check_bool
from interp.attribution.internal import TokenSpec, check_distinct, resolve_candidate, resolve_tokens, warn_unspaced
from interp.engine.internal import BoundMetric, final_norm
from interp.engine import readout
from interp.errors import ArgumentError, ShapeError, UnsupportedOperationError
from interp.models import Batch
from interp.models import Model
from interp.models.internal import text_ids
from interp.stream.internal import resolve_positions

__all__ = [
    "Metric",
    "BoundMetric",
    "LogitDiff",
    "Logit",
    "LogProb",
    "Prob",
    "KL",
    "Direction",
    "CustomMetric",
    "as_metric",
    "final_norm",  # BoundMetric, final_norm and readout are the engine's, re-exported
    "readout",
]

PosSpec = Union[int, Sequence[int], str]


class Metric:
    """Base of the metrics: :meth:`bind` resolves it for a model and a batch of prompts."""

    space: ClassVar[str] = "logits"
    needs_clean: ClassVar[bool] = False
    pos: PosSpec = -1

    def describe(self, model: Model) -> str:
        return type(self).__name__

    def _fn(self, model: Model, n: int) -> Callable[[Tensor, Tensor, Optional[Tensor]], Tensor]:
        raise NotImplementedError

    def _token_specs(self) -> list[tuple[str, Any]]:
        """(argument name, token spec) of the tokens this metric reads (checked for a missing leading space)."""
        return []

    def _continuation(self, model: Model, n: int) -> Optional[Tensor]:
        """Token ids [n, span] of a multi-token continuation read teacher-forced (None: one position)."""
        return None

    def check(self, model: Model) -> None:
        """An error naming ``metric`` if this metric cannot read this model's output."""
        if self.space == "logits" and not model.arch.has_logits:
            raise UnsupportedOperationError(
                f"metric={self!r}: model {model.name!r} has no logits (an encoder analysed through its final "
                f"hidden state); use interp.Direction(direction) or a callable on the hidden state"
            )

    def bind(self, model: Model, batch: Batch) -> BoundMetric:
        """This metric for ``batch``'s prompts: tokens resolved per prompt, metric positions fixed."""
        self.check(model)
        mask = batch.attention_mask
        n = mask.shape[0]
        pos = self.pos
        span, append = 1, None
        cont = self._continuation(model, n)
        if isinstance(pos, str):
            if pos == "all" and isinstance(self, CustomMetric):
                positions: Optional[Tensor] = torch.zeros(n, dtype=torch.long, device=mask.device)
                span = int(mask.shape[1])
            elif pos != "mean":
                allowed = "'mean', 'all' (a callable's CustomMetric only)" if pos == "all" else "'mean'"
                raise ArgumentError(f"pos={pos!r} must be {allowed}, an int or a per-prompt list of ints")
            else:
                positions = None
        else:
            if isinstance(pos, (list, tuple)) and len(pos) != n:
                raise ArgumentError(f"pos has {len(pos)} entries but there are {n} prompts")
            positions = resolve_positions(pos, mask.cpu()).to(mask.device)
        if cont is not None:
            if pos != -1:
                raise ArgumentError(
                    f"{type(self).__name__}(..., multi_token=True, pos={pos!r}): a multi-token "
                    "continuation is read after each prompt's last token; leave pos=-1"
                )
            if not model.arch.causal:
                raise UnsupportedOperationError(
                    f"metric={self!r}: a multi-token continuation is teacher-forced, "
                    f"which needs a causal model; {model.name!r} is not"
                )
            span, append = int(cont.shape[1]), cont[:, :-1].to(mask.device)
        fn = self._fn(model, n)
        for arg, spec in self._token_specs():
            warn_unspaced(model, spec, arg, batch.tokens, positions, owner=type(self).__name__)
        bound = BoundMetric(
            name=self.describe(model),
            space=self.space,
            n_prompts=n,
            positions=positions,
            mask=mask,
            needs_clean=self.needs_clean,
            fn=fn,
            span=span,
            append=append,
        )
        if append is not None and append.shape[1] > 0:  # the mask of the prompts as they are run
            ext = bound.extend(batch)
            bound = replace(bound, mask=ext.attention_mask if ext is not None else mask)
        return bound


def _sequences(model: Model, spec: Any, n: int, arg: str, owner: str, multi: bool) -> Tensor:
    """Token ids [n, k] of a token spec: k = 1 unless ``multi`` (then every prompt's continuation must have
    the same length k). Without ``multi`` a string of several tokens is an ArgumentError naming the fix."""
    items = [spec] * n if isinstance(spec, (str, int)) or (multi and isinstance(spec, tuple)) else spec
    if multi and isinstance(spec, Tensor) and spec.ndim == 2:
        items = [tuple(int(v) for v in row) for row in spec]
    if not multi or not isinstance(items, (list, tuple)):
        if not multi and model.tokenizer is not None:
            for i, v in enumerate(items if isinstance(items, (list, tuple)) else [items]):
                if isinstance(v, str):
                    where = arg if isinstance(spec, str) else f"{arg}[{i}]"
                    ids = text_ids(model, v, f"{owner}: {where}")
                    if len(ids) > 1:
                        pieces = [model.tokenizer.decode([t]) for t in ids]
                        raise ArgumentError(
                            f"{owner}: {where}={v!r} must be a single token, but it tokenises to {len(ids)} tokens "
                            f"{pieces}; pass "
                            f"{owner}(..., multi_token=True) to read the whole continuation teacher-forced (appended "
                            "to every prompt, summed over its tokens), or give a single token"
                        )
        return resolve_tokens(model, spec, n, arg)[:, None]
    if len(items) != n:
        raise ArgumentError(
            f"{arg} has {len(items)} entries but there are {n} prompts; give one per prompt or one continuation"
        )
    rows = [
        list(resolve_candidate(model, v, f"{arg}[{i}]" if len(items) > 1 else arg, True)) for i, v in enumerate(items)
    ]
    if len({len(r) for r in rows}) > 1:
        raise ArgumentError(
            f"{owner}({arg}=...): the per-prompt continuations have {sorted({len(r) for r in rows})} "
            "tokens; with multi_token=True every prompt's continuation must have the same length"
        )
    return torch.tensor(rows, dtype=torch.long, device=model.device)


def _check_multi(owner: str, multi: Any) -> None:
    check_bool(f"{owner}.multi_token", multi)


def _tok_name(model: Model, t: Tensor) -> str:
    tok = model.tokenizer
    return repr(tok.decode([int(t[0])])) if tok is not None else f"#{int(t[0])}"


def _per_prompt(ids: Tensor) -> str:
    return " (per-prompt tokens)" if ids.numel() > 1 and bool((ids != ids[0]).any()) else ""


@dataclass(frozen=True)
class LogitDiff(Metric):
    """logit[answer] − logit[wrong] at ``pos`` (tokens: one string/id, or one per prompt). ``multi_token=True``:
    two continuations of the same length n, Σ_i logit[answer_i] − logit[wrong_i] teacher-forced on the answer
    (its first n − 1 tokens appended to every prompt)."""

    answer: TokenSpec
    wrong: TokenSpec
    pos: PosSpec = -1
    multi_token: bool = False

    def __post_init__(self) -> None:
        if self.answer is None or self.wrong is None:
            raise ArgumentError(
                f"LogitDiff(answer={self.answer!r}, wrong={self.wrong!r}) needs both tokens; "
                "use interp.Logit(token) for a single logit"
            )
        _check_multi("LogitDiff", self.multi_token)
        if isinstance(self.answer, (str, int)) and type(self.answer) is type(self.wrong) and self.answer == self.wrong:
            raise ArgumentError(
                f"LogitDiff(answer={self.answer!r}, wrong={self.wrong!r}): the answer and the wrong token "
                "are the same, so the metric is 0 on every run; give a different wrong token (use "
                "interp.Logit(answer) for one logit)"
            )

    def _ids(self, model: Model, n: int) -> tuple[Tensor, Tensor]:
        a = _sequences(model, self.answer, n, "answer", "LogitDiff", self.multi_token)
        w = _sequences(model, self.wrong, n, "wrong", "LogitDiff", self.multi_token)
        check_distinct(
            model,
            a,
            w,
            f"LogitDiff(answer={self.answer!r:.60}, wrong={self.wrong!r:.60})",
            "use interp.Logit(answer) for one logit",
        )
        if a.shape[1] != w.shape[1]:
            raise ArgumentError(
                f"LogitDiff(answer={self.answer!r}, wrong={self.wrong!r}, multi_token=True): the "
                f"answer has {a.shape[1]} tokens and wrong {w.shape[1]}; a logit difference is read "
                "per position, so both continuations must have the same number of tokens (compare "
                "unequal continuations with two interp.LogProb(..., multi_token=True) metrics)"
            )
        return a, w

    def _continuation(self, model: Model, n: int) -> Optional[Tensor]:
        a, _ = self._ids(model, n)
        return a if self.multi_token else None

    def _token_specs(self) -> list[tuple[str, Any]]:
        return [("answer", self.answer), ("wrong", self.wrong)]

    def describe(self, model: Model) -> str:
        n = (
            1
            if isinstance(self.answer, (str, int)) or (self.multi_token and isinstance(self.answer, tuple))
            else len(self.answer)
        )
        a, w = self._ids(model, n)
        per = _per_prompt(a) or _per_prompt(w)
        return (
            f"logit[{_tok_name(model, a[:, 0] if a.shape[1] == 1 else a[0])}] − "
            f"logit[{_tok_name(model, w[:, 0] if w.shape[1] == 1 else w[0])}]" + per
        )

    def _fn(self, model: Model, n: int) -> Callable:
        a, w = (t.to(model.device) for t in self._ids(model, n))
        if a.shape[1] == 1:
            a, w = a[:, 0], w[:, 0]

        def fn(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            if out.ndim == 3:  # [rows, span, d_vocab]: one token per position, summed
                return (out.gather(-1, a[p][..., None]) - out.gather(-1, w[p][..., None]))[..., 0].sum(-1)
            r = torch.arange(out.shape[0], device=out.device)
            return out[r, a[p]] - out[r, w[p]]

        return fn


@dataclass(frozen=True)
class _OneToken(Metric):
    token: TokenSpec
    pos: PosSpec = -1
    multi_token: bool = False
    _what: ClassVar[str] = "logit"

    def __post_init__(self) -> None:
        _check_multi(type(self).__name__, self.multi_token)

    def _ids(self, model: Model, n: int) -> Tensor:
        return _sequences(model, self.token, n, "token", type(self).__name__, self.multi_token)

    def _continuation(self, model: Model, n: int) -> Optional[Tensor]:
        return self._ids(model, n) if self.multi_token else None

    def describe(self, model: Model) -> str:
        n = (
            1
            if isinstance(self.token, (str, int)) or (self.multi_token and isinstance(self.token, tuple))
            else len(self.token)
        )
        t = self._ids(model, n)
        if t.shape[1] > 1:
            tok = model.tokenizer
            text = repr(tok.decode(t[0].tolist())) if tok is not None else str(t[0].tolist())
            return f"{self._what}[{text}] (teacher-forced, {t.shape[1]} tokens)" + _per_prompt(t[:, 0])
        return f"{self._what}[{_tok_name(model, t[:, 0])}]" + _per_prompt(t[:, 0])

    def _transform(self, out: Tensor) -> Tensor:
        return out

    def _combine(self, vals: Tensor) -> Tensor:
        """One number from the per-token values [rows, span] of a multi-token continuation."""
        return vals.sum(-1)

    def _token_specs(self) -> list[tuple[str, Any]]:
        return [("token", self.token)]

    def _fn(self, model: Model, n: int) -> Callable:
        t = self._ids(model, n).to(model.device)
        if t.shape[1] == 1:
            t = t[:, 0]

        def fn(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            if out.ndim == 3:  # [rows, span, d_vocab]: token i of the continuation at position i
                return self._combine(self._transform(out).gather(-1, t[p][..., None])[..., 0])
            r = torch.arange(out.shape[0], device=out.device)
            return self._transform(out)[r, t[p]]

        return fn


@dataclass(frozen=True)
class Logit(_OneToken):
    """logit[token] at ``pos``; ``multi_token=True``: Σ_i logit[token_i], teacher-forced."""

    _what: ClassVar[str] = "logit"


@dataclass(frozen=True)
class LogProb(_OneToken):
    """log softmax(logits)[token] at ``pos``; ``multi_token=True``: the continuation's log-probability, teacher-forced
    (Σ_i log p(token_i | prompt, token_<i))."""

    _what: ClassVar[str] = "log p"

    def _transform(self, out: Tensor) -> Tensor:
        return torch.log_softmax(out, dim=-1)


@dataclass(frozen=True)
class Prob(_OneToken):
    """softmax(logits)[token] at ``pos``; ``multi_token=True``: the continuation's probability, teacher-forced
    (Π_i p(token_i | prompt, token_<i))."""

    _what: ClassVar[str] = "p"

    def _transform(self, out: Tensor) -> Tensor:
        return torch.softmax(out, dim=-1) if out.ndim == 2 else torch.log_softmax(out, dim=-1)

    def _combine(self, vals: Tensor) -> Tensor:
        return vals.sum(-1).exp()  # vals are log-probabilities here


@dataclass(frozen=True)
class KL(Metric):
    """KL(p_clean ‖ p) = Σ_v p_clean (log p_clean − log p) at ``pos``: 0 on the clean run, ≥ 0 elsewhere."""

    pos: PosSpec = -1
    needs_clean: ClassVar[bool] = True

    def describe(self, model: Model) -> str:
        return "KL(clean ‖ patched)"

    def _fn(self, model: Model, n: int) -> Callable:
        def fn(out: Tensor, p: Tensor, clean: Optional[Tensor]) -> Tensor:
            lc = torch.log_softmax(clean, dim=-1)  # type: ignore[arg-type]
            lp = torch.log_softmax(out, dim=-1)
            return (lc.exp() * (lc - lp)).sum(-1)

        return fn


@dataclass(frozen=True, eq=False)
class Direction(Metric):
    """h · u: the final hidden state (an encoder's last block output; a decoder's final-norm output) at
    ``pos`` — or mean-pooled over real tokens (``pos="mean"``, as sentence-transformers pools MiniLM) —
    projected on ``direction`` [d_model] (or one per prompt, [batch, d_model])."""

    direction: Tensor
    pos: PosSpec = "mean"
    space: ClassVar[str] = "hidden"

    def describe(self, model: Model) -> str:
        where = "mean-pooled" if self.pos == "mean" else f"at pos {self.pos}"
        return f"final hidden state · direction ({where})"

    def _fn(self, model: Model, n: int) -> Callable:
        d = model.arch.d_model
        u = self.direction
        if not isinstance(u, Tensor) or u.is_complex() or not u.is_floating_point():
            raise ShapeError(
                f"direction must be a float tensor [d_model={d}] or [batch, {d}], got {type(u).__name__}"
                + (f" of dtype {u.dtype}" if isinstance(u, Tensor) else "")
            )
        if u.ndim not in (1, 2) or u.shape[-1] != d or (u.ndim == 2 and u.shape[0] not in (1, n)):
            raise ShapeError(f"direction has shape {tuple(u.shape)}; expected [d_model={d}] or [{n}, {d}]")
        if not bool(torch.isfinite(u).all()):
            raise ArgumentError("direction contains NaN or inf; pass a finite vector")
        U = u.to(model.device, model.dtype).reshape(-1, d)  # [1 | n, d_model]

        def fn(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            rows = U[p] if U.shape[0] == n and n > 1 else U[0].expand(out.shape[0], d)
            return (out * rows.to(out.dtype)).sum(-1)

        return fn


@dataclass(frozen=True, eq=False)
class CustomMetric(Metric):
    """A user's callable ``f(out) -> [rows]`` on the logits (decoders) or the final hidden state
    (models without logits; mean-pooled unless ``pos`` is given) at the metric position: ``out`` is
    [rows, d_vocab]; with ``pos="all"`` it is every position's, [rows, pos, d_vocab]."""

    fn_: Callable[[Tensor], Tensor]
    pos: PosSpec = -1
    space: str = "logits"  # type: ignore[misc]

    def describe(self, model: Model) -> str:
        return getattr(self.fn_, "__name__", type(self.fn_).__name__)

    def check(self, model: Model) -> None:
        return None

    def _fn(self, model: Model, n: int) -> Callable:
        f = self.fn_
        name = self.describe(model)

        def fn(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            try:
                v = f(out)
            except IndexError as e:  # a lambda indexing an axis that is not there (the other shape)
                raise ShapeError(f"metric {name} raised {type(e).__name__}: {e} — {_shape_hint(out, self.pos)}") from e
            if isinstance(v, Tensor) and v.shape != (out.shape[0],):
                raise ShapeError(
                    f"metric {name} returned {tuple(v.shape)}; a metric must return one number per "
                    f"prompt, a tensor of shape [{out.shape[0]}] — {_shape_hint(out, self.pos)}"
                )
            return v

        return fn


def _shape_hint(out: Tensor, pos: Any) -> str:
    what = "the logits" if out.ndim else "its input"
    if out.ndim == 3:
        return (
            f"it receives {what} at every position, shape [batch, pos, d_vocab] = {list(out.shape)} "
            "(pos='all'); for the metric position only, [batch, d_vocab], leave pos at its default (-1)"
        )
    return (
        f"it receives {what} at the metric position only, shape [batch, d_vocab] = {list(out.shape)}; for "
        "every position, [batch, pos, d_vocab], use interp.causal.CustomMetric(fn, pos='all')"
    )


def as_metric(metric: Any, model: Model, *, name: str = "metric") -> Metric:
    """``metric`` as a :class:`Metric` for ``model`` (a callable becomes a :class:`CustomMetric`)."""
    if isinstance(metric, Metric):
        metric.check(model)
        return metric
    if callable(metric):
        if model.arch.has_logits:
            return CustomMetric(metric)
        return CustomMetric(metric, pos="mean", space="hidden")
    raise ArgumentError(
        f"{name}={metric!r:.80} must be an interp metric (interp.LogitDiff(answer, wrong), interp.Logit(t), "
        "interp.LogProb(t), interp.Prob(t), interp.KL(), interp.Direction(u)) or a callable out -> [batch]"
    )
