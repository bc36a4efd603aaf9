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

The shared interface, used by every causal and edge analysis::

    bound = metric.bind(model, batch)          # tokens resolved, positions fixed, per prompt
    x = bound.select(resid_final, prompt)      # [rows, d_model]: the metric position
    out = bound.read(model, x)                 # logits [rows, d_vocab] or hidden [rows, d_model]
    m = bound(out, prompt=prompt, clean=clean_out)   # [rows]; clean_out only for KL

(For a mean-pooled metric, ``bound.positions`` is None: read every position, then pool —
``bound.select(bound.read(model, resid_final), prompt)`` — so a decoder's final norm applies per token.)

``prompt`` [rows] says which prompt each row belongs to (a batch of variants repeats prompts);
``clean`` is the clean run's ``out`` per prompt [n_prompts, d_out]. Every function here is
differentiable torch, so gradients (attribution patching) flow through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Sequence, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._norms import norm_scale
from interp.attribution._answers import TokenSpec, resolve_positions, resolve_tokens, warn_unspaced
from interp.errors import ArgumentError, ShapeError, UnsupportedOperationError
from interp.models import Batch
from interp.models import Model

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
    "final_norm",
    "readout",
]

PosSpec = Union[int, Sequence[int], str]


def final_norm(model: Model, x: Float[Tensor, "... d_model"], scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """(N_f(x), σ): the decoder's final norm applied to ``x``, with σ recomputed or frozen at ``scale``.

    Post-norm encoders have no final norm (their last block ends in one): N_f is the identity.
    """
    arch, w = model.arch, model.weights
    if arch.norm_placement == "post" or arch.norm == "none" or w.lnf_w is None:
        return x, torch.ones_like(x[..., :1])
    sigma = norm_scale(x, arch.norm, arch.norm_eps).to(x.dtype) if scale is None else scale.to(x.dtype)
    y = x - x.mean(dim=-1, keepdim=True) if arch.norm == "layernorm" else x
    y = y / sigma * w.lnf_w
    if arch.norm == "layernorm" and w.lnf_b is not None:
        y = y + w.lnf_b
    return y, sigma


def readout(model: Model, x: Float[Tensor, "... d_model"], space: str, scale: Optional[Tensor] = None) -> Tensor:
    """The metric's input from the final residual ``x``: logits N_f(x) W_U + b_U, or the hidden N_f(x)."""
    y, _ = final_norm(model, x, scale)
    if space == "hidden":
        return y
    w = model.weights
    out = y @ w.need("W_U")
    return out + w.b_U if w.b_U is not None else out


@dataclass(frozen=True, eq=False)
class BoundMetric:
    """A metric resolved for one batch of prompts (see the module docstring)."""

    name: str
    space: str  # "logits" | "hidden"
    n_prompts: int
    positions: Optional[Int[Tensor, "batch"]]  # absolute metric position per prompt; None = mean pool
    mask: Int[Tensor, "batch pos"]
    needs_clean: bool
    fn: Callable[[Tensor, Tensor, Optional[Tensor]], Tensor] = field(repr=False)

    def _prompt(self, prompt: Optional[Tensor], rows: int, device: Any) -> Tensor:
        if prompt is None:
            if rows != self.n_prompts:
                raise ShapeError(f"{rows} rows but {self.n_prompts} prompts: pass prompt= (the prompt of each row)")
            return torch.arange(rows, device=device)
        return prompt.to(device)

    def select(self, hidden: Float[Tensor, "rows pos d"], prompt: Optional[Tensor] = None) -> Float[Tensor, "rows d"]:
        """Each row's metric position (or its mean over the prompt's real tokens)."""
        p = self._prompt(prompt, hidden.shape[0], hidden.device)
        if self.positions is None:
            m = self.mask.to(hidden.device, hidden.dtype)[p]  # [rows, pos]
            return (hidden * m[..., None]).sum(1) / m.sum(1, keepdim=True)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return hidden[rows, self.positions.to(hidden.device)[p]]

    def read(self, model: Model, x: Float[Tensor, "rows d_model"], scale: Optional[Tensor] = None) -> Tensor:
        """Logits (logit metrics) or the final hidden state (direction metrics) of final residuals ``x``."""
        return readout(model, x, self.space, scale)

    def __call__(self, out: Tensor, *, prompt: Optional[Tensor] = None, clean: Optional[Tensor] = None) -> Tensor:
        """The metric [rows] of ``out`` (what :meth:`read` returns), checked for shape and finiteness."""
        p = self._prompt(prompt, out.shape[0], out.device)
        if self.needs_clean and clean is None:
            raise ArgumentError(f"metric {self.name} compares with the clean run: pass clean= (its output per prompt)")
        c = clean[p] if clean is not None else None
        v = self.fn(out, p, c)
        if not isinstance(v, Tensor) or v.shape != (out.shape[0],):
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise ShapeError(f"metric {self.name} returned {shape}; a metric must return one number per prompt, "
                             f"a tensor of shape [{out.shape[0]}]")
        if not bool(torch.isfinite(v).all()):
            raise ArgumentError(f"metric {self.name} returned a non-finite value ({v.tolist()[:4]}…); "
                                "a metric must be finite on every prompt")
        return v


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
        if isinstance(pos, str):
            if pos != "mean":
                raise ArgumentError(f"pos={pos!r} must be 'mean', an int or a per-prompt list of ints")
            positions = None
        else:
            if isinstance(pos, (list, tuple)) and len(pos) != n:
                raise ArgumentError(f"pos has {len(pos)} entries but there are {n} prompts")
            positions = resolve_positions(pos, mask.cpu()).to(mask.device)
        fn = self._fn(model, n)
        for arg, spec in self._token_specs():
            warn_unspaced(model, spec, arg, batch.tokens, positions, owner=type(self).__name__)
        return BoundMetric(name=self.describe(model), space=self.space, n_prompts=n, positions=positions,
                           mask=mask, needs_clean=self.needs_clean, fn=fn)


def _tok_name(model: Model, t: Tensor) -> str:
    tok = model.tokenizer
    return repr(tok.decode([int(t[0])])) if tok is not None else f"#{int(t[0])}"


def _per_prompt(ids: Tensor) -> str:
    return " (per-prompt tokens)" if ids.numel() > 1 and bool((ids != ids[0]).any()) else ""


@dataclass(frozen=True)
class LogitDiff(Metric):
    """logit[answer] − logit[wrong] at ``pos`` (tokens: one string/id, or one per prompt)."""

    answer: TokenSpec
    wrong: TokenSpec
    pos: PosSpec = -1

    def __post_init__(self) -> None:
        if self.answer is None or self.wrong is None:
            raise ArgumentError(f"LogitDiff(answer={self.answer!r}, wrong={self.wrong!r}) needs both tokens; "
                                "use interp.Logit(token) for a single logit")

    def _token_specs(self) -> list[tuple[str, Any]]:
        return [("answer", self.answer), ("wrong", self.wrong)]

    def describe(self, model: Model) -> str:
        n = 1 if isinstance(self.answer, (str, int)) else len(self.answer)
        a, w = resolve_tokens(model, self.answer, n, "answer"), resolve_tokens(model, self.wrong, n, "wrong")
        per = _per_prompt(a) or _per_prompt(w)
        return f"logit[{_tok_name(model, a)}] − logit[{_tok_name(model, w)}]" + per

    def _fn(self, model: Model, n: int) -> Callable:
        a = resolve_tokens(model, self.answer, n, "answer").to(model.device)
        w = resolve_tokens(model, self.wrong, n, "wrong").to(model.device)

        def fn(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            r = torch.arange(out.shape[0], device=out.device)
            return out[r, a[p]] - out[r, w[p]]

        return fn


@dataclass(frozen=True)
class _OneToken(Metric):
    token: TokenSpec
    pos: PosSpec = -1
    _what: ClassVar[str] = "logit"

    def describe(self, model: Model) -> str:
        n = 1 if isinstance(self.token, (str, int)) else len(self.token)
        t = resolve_tokens(model, self.token, n, "token")
        return f"{self._what}[{_tok_name(model, t)}]" + _per_prompt(t)

    def _transform(self, out: Tensor) -> Tensor:
        return out

    def _token_specs(self) -> list[tuple[str, Any]]:
        return [("token", self.token)]

    def _fn(self, model: Model, n: int) -> Callable:
        t = resolve_tokens(model, self.token, n, "token").to(model.device)

        def fn(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            r = torch.arange(out.shape[0], device=out.device)
            return self._transform(out)[r, t[p]]

        return fn


@dataclass(frozen=True)
class Logit(_OneToken):
    """logit[token] at ``pos``."""

    _what: ClassVar[str] = "logit"


@dataclass(frozen=True)
class LogProb(_OneToken):
    """log softmax(logits)[token] at ``pos``."""

    _what: ClassVar[str] = "log p"

    def _transform(self, out: Tensor) -> Tensor:
        return torch.log_softmax(out, dim=-1)


@dataclass(frozen=True)
class Prob(_OneToken):
    """softmax(logits)[token] at ``pos``."""

    _what: ClassVar[str] = "p"

    def _transform(self, out: Tensor) -> Tensor:
        return torch.softmax(out, dim=-1)


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
            raise ShapeError(f"direction must be a float tensor [d_model={d}] or [batch, {d}], got {type(u).__name__}"
                             + (f" of dtype {u.dtype}" if isinstance(u, Tensor) else ""))
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
    (models without logits; mean-pooled unless ``pos`` is given) at the metric position."""

    fn_: Callable[[Tensor], Tensor]
    pos: PosSpec = -1
    space: str = "logits"  # type: ignore[misc]

    def describe(self, model: Model) -> str:
        return getattr(self.fn_, "__name__", type(self.fn_).__name__)

    def check(self, model: Model) -> None:
        return None

    def _fn(self, model: Model, n: int) -> Callable:
        f = self.fn_

        def fn(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            return f(out)

        return fn


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
