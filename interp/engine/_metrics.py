"""The metric layer every analysis that re-runs the model reads through: a metric bound to a batch of prompts
(:class:`BoundMetric`) and the reader of final residual rows (:class:`MetricReader`).

A metric M maps the model's output at its *metric position* (each prompt's last real token, or several positions
for a teacher-forced continuation, or the mean over real tokens) to one number per prompt. Its input is the
readout (:func:`interp.engine.readout`) of the final residual x at those positions only — logits
N_f(x) W_U + b_U (soft-capped where the model caps them), or the hidden state N_f(x) — never the full-vocabulary
unembedding at every position. The metrics themselves (``LogitDiff``, ``KL``, …) are :mod:`interp.causal`'s; each
binds to a batch as a :class:`BoundMetric`::

    bound = metric.bind(model, batch)          # tokens resolved, positions fixed, per prompt
    x = bound.select(resid_final, prompt)      # [rows, d_model]: the metric position
    out = bound.read(model, x)                 # logits [rows, d_vocab] or hidden [rows, d_model]
    m = bound(out, prompt=prompt, clean=clean_out)   # [rows]; clean_out only for KL

Every function here is differentiable torch, so gradients (attribution patching, edge attribution) flow through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.engine._forward import RunCache
from interp.engine._readout import final_norm, readout, unembed
from interp.errors import ArgumentError, ShapeError
from interp.models import Batch, Model

__all__ = ["BoundMetric", "MetricReader", "clean_output", "metric_of"]


@dataclass(frozen=True, eq=False)
class BoundMetric:
    """A metric resolved for one batch of prompts (see the module docstring)."""

    name: str
    space: str  # "logits" | "hidden"
    n_prompts: int
    positions: Optional[Int[Tensor, " batch"]]  # absolute metric position per prompt; None = mean pool
    mask: Int[Tensor, "batch pos"]
    needs_clean: bool
    fn: Callable[[Tensor, Tensor, Optional[Tensor]], Tensor] = field(repr=False)
    span: int = 1  # positions read per prompt: p … p + span − 1 (a teacher-forced continuation, or pos="all")
    append: Optional[Int[Tensor, "batch k"]] = field(default=None, repr=False)  # teacher-forced tokens

    @property
    def last_positions(self) -> Optional[Tensor]:
        """The last position each prompt's metric reads [batch] (None: mean-pooled)."""
        return None if self.positions is None else self.positions + (self.span - 1)

    def extend(self, batch: Optional[Batch], *, name: str = "inputs") -> Optional[Batch]:
        """``batch`` with the teacher-forced continuation inserted after each row's last real token (padding
        after it moves right); ``batch`` itself when the metric appends nothing."""
        if batch is None or self.append is None or self.append.shape[1] == 0:
            return batch
        app = self.append.to(batch.tokens.device)
        B, T = batch.tokens.shape
        if B != app.shape[0]:
            if not bool((app == app[0]).all()):
                raise ArgumentError(
                    f"{name} has {B} prompts but the metric's per-prompt continuations are for "
                    f"{app.shape[0]}; give {name} one prompt per clean prompt, or one continuation "
                    "shared by every prompt"
                )
            app = app[:1].expand(B, -1)
        k = app.shape[1]
        tokens = torch.zeros(B, T + k, dtype=batch.tokens.dtype, device=batch.tokens.device)
        mask = torch.zeros(B, T + k, dtype=batch.attention_mask.dtype, device=batch.tokens.device)
        idx = torch.arange(T, device=batch.tokens.device)
        last = torch.where(batch.attention_mask.bool(), idx, -1).max(1).values  # each row's last real token
        for b in range(B):
            e = int(last[b]) + 1
            tokens[b, :e], mask[b, :e] = batch.tokens[b, :e], batch.attention_mask[b, :e]
            tokens[b, e : e + k], mask[b, e : e + k] = app[b], 1
            tokens[b, e + k :], mask[b, e + k :] = batch.tokens[b, e:], batch.attention_mask[b, e:]
        return Batch(tokens=tokens, attention_mask=mask)

    def at(self, x: Float[Tensor, "rows pos d"], prompt: Tensor, t0: int = 0) -> Tensor:
        """Rows of ``x`` (holding positions t0…) at each row's metric position(s): [rows, d], or [rows, span, d]
        for a metric that reads several positions."""
        if self.positions is None:
            raise ShapeError("a mean-pooled metric has no metric position; use select()")
        rows = torch.arange(x.shape[0], device=x.device)
        start = self.positions.to(x.device)[prompt.to(x.device)] - t0
        if self.span == 1:
            return x[rows, start]
        return x[rows[:, None], start[:, None] + torch.arange(self.span, device=x.device)]

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
        return self.at(hidden, p)

    def read(self, model: Model, x: Float[Tensor, "rows d_model"], scale: Optional[Tensor] = None) -> Tensor:
        """Logits (logit metrics) or the final hidden state (direction metrics) of final residuals ``x``."""
        return readout(model, x, self.space, scale)

    def __call__(
        self, out: Tensor, *, prompt: Optional[Tensor] = None, clean: Optional[Tensor] = None, check: bool = True
    ) -> Tensor:
        """The metric [rows] of ``out`` (what :meth:`read` returns), checked for shape and (``check``) finiteness:
        a sweep reads its chunks unchecked and checks the whole result once (:meth:`check_finite`, one host read)."""
        p = self._prompt(prompt, out.shape[0], out.device)
        if self.needs_clean and clean is None:
            raise ArgumentError(f"metric {self.name} compares with the clean run: pass clean= (its output per prompt)")
        c = clean[p] if clean is not None else None
        v = self.fn(out, p, c)
        if not isinstance(v, Tensor) or v.shape != (out.shape[0],):
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise ShapeError(
                f"metric {self.name} returned {shape}; a metric must return one number per prompt, "
                f"a tensor of shape [{out.shape[0]}]"
            )
        if check:
            self.check_finite(v)
        return v

    def check_finite(self, v: Tensor) -> None:
        """:class:`ArgumentError` unless every value of the metric ``v`` is finite."""
        if not bool(torch.isfinite(v).all()):
            bad = v[~torch.isfinite(v)]
            raise ArgumentError(
                f"metric {self.name} returned a non-finite value ({bad.tolist()[:4]}…); "
                "a metric must be finite on every prompt"
            )


class MetricReader:
    """The metric of final residual rows, the one reader of every analysis that re-runs the model:
    ``read(x [R, T, d], prompt [R], t0=0) -> M [R]`` for rows carrying positions t0… of prompts ``prompt``
    (positions before t0, where the metric needs them, are the ``base`` run's).

    In two steps for the gradient passes, so a gradient can be taken at the final norm's output:
    ``norm(x)`` = N_f(x) (σ recomputed; the identity for post-norm encoders) and ``head(y, prompt)`` = M of
    whole normed rows (the metric position(s), or the mean over real tokens after the per-position readout;
    logits y W_U + b_U, soft-capped where the model caps them). ``head`` refuses, under autograd, a metric
    whose value carries no gradient (``name``: the argument named in that error)."""

    def __init__(
        self,
        model: Model,
        bound: BoundMetric,
        clean_out: Optional[Tensor] = None,
        base: Optional[RunCache] = None,
        *,
        name: str = "metric",
    ):
        self.model, self.bound, self.clean_out, self.base, self.name = model, bound, clean_out, base, name

    def __call__(self, x: Tensor, prompt: Tensor, t0: int = 0, *, check: bool = True) -> Tensor:
        b, model = self.bound, self.model
        if t0 > 0 and (b.positions is None or b.span > 1):  # positions before t0 needed: the base run's there
            if self.base is None:
                raise RuntimeError("a metric of rows starting after position 0 needs the base run")
            x, t0 = torch.cat([self.base.final[prompt, :t0], x], dim=1), 0
        if b.positions is None:  # pooled after the per-position readout
            out = b.select(b.read(model, x), prompt)
        else:
            out = b.read(model, b.at(x, prompt, t0))
        return b(out, prompt=prompt, clean=self.clean_out, check=check)

    def check_finite(self, v: Tensor) -> None:
        """:meth:`BoundMetric.check_finite` of metric values ``v`` read unchecked (``check=False``)."""
        self.bound.check_finite(v)

    def norm(self, x: Tensor) -> Tensor:
        """N_f(x), the final norm with σ recomputed (x itself where the model has none)."""
        return final_norm(self.model, x)[0]

    def head(self, y: Tensor, prompt: Tensor) -> Tensor:
        """M [R] of whole normed final rows y [R, T, d] (what :meth:`norm` gives)."""
        b, w = self.bound, self.model.weights
        h = y if b.positions is None else b.at(y, prompt)
        out = h if b.space == "hidden" else unembed(h, w.need("W_U"), w.b_U, self.model.arch.final_softcap)
        if b.positions is None:
            out = b.select(out, prompt)
        M = b(out, prompt=prompt, clean=self.clean_out)
        if torch.is_grad_enabled() and (not M.is_floating_point() or not M.requires_grad):
            raise ArgumentError(
                f"{self.name}={b.name!r} returned {M.dtype} values without a gradient; a gradient "
                "method differentiates the metric — use a float function of the logits "
                "(e.g. interp.LogitDiff), not argmax or integer outputs"
            )
        return M


def metric_of(model: Model, bound: BoundMetric, run: RunCache, clean_out: Optional[Tensor]) -> Tensor:
    """The metric [n_prompts] of a whole run."""
    P = run.final.shape[0]
    return MetricReader(model, bound, clean_out, run)(run.final, torch.arange(P, device=run.final.device))


def clean_output(model: Model, bound: BoundMetric, clean_run: RunCache) -> Optional[Tensor]:
    """The clean run's metric input per prompt (only metrics that compare with it, e.g. KL, need it)."""
    if not bound.needs_clean:
        return None
    if bound.positions is None:
        return bound.select(bound.read(model, clean_run.final))
    return bound.read(model, bound.select(clean_run.final))
