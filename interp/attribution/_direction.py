"""Attributing a hidden-state direction to heads, exactly, through post-norm blocks.

For an encoder (MiniLM, BERT) the analysis target is the final hidden state h (or the
mean-pooled sentence embedding h̄ = Σ_p m_p h_p / Σ_p m_p). For any direction u,

    h·u = Σ_terms  (term carried through every later post-norm with frozen σ) · u

exactly (docs/math.md §4); pooling is linear, so h̄·u splits the same way. Works for
decoders too (the read is then the final norm's output, ``unembed``).
"""

from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

from interp._validate import is_int
from interp.attribution._logits import _components
from interp.attribution._result import LogitAttribution
from interp.errors import ArgumentError, ShapeError
from interp.models import Model
from interp.stream.internal import as_batch, check_tensor_data, require_model, resolve_positions
from interp.stream import trace

__all__ = ["attribute_direction"]


def attribute_direction(
    model: Model,
    inputs: Union[str, Sequence[str], Tensor],
    direction: Tensor,
    *,
    pos: Union[int, str, Sequence[int]] = "mean",
    unit: str = "head",
) -> LogitAttribution:
    """Split (final hidden state · direction) into every term, per prompt.

    ``direction``: [d_model] (or [batch, d_model], one per prompt), e.g. the difference of two
    sentence embeddings. ``pos``: "mean" (the mean-pooled embedding over real tokens, as
    sentence-transformers pools MiniLM), or an int / per-prompt ints (0 is [CLS]).
    """
    require_model(model)
    arch = model.arch
    if unit not in ("head", "component"):
        raise ArgumentError(f"unit={unit!r} is not allowed here; use 'head' or 'component'")
    u = _check_direction(direction, arch.d_model)
    batch = as_batch(model, inputs)
    b = batch.tokens.shape[0]
    if u.ndim == 2 and u.shape[0] not in (1, b):
        raise ShapeError(f"direction has {u.shape[0]} rows but there are {b} prompts")
    u = u.to(model.device, model.dtype)
    U = u[None, None] if u.ndim == 1 else u[:, None]  # [b|1, 1, d_model]
    read = "unembed" if arch.has_logits else "final"
    dec = trace(model, batch.tokens, attention_mask=batch.attention_mask, project={read: U}).decompose(read)
    values, tot, positions = _read_at(pos, dec.contributions[..., 0], dec.total[..., 0], batch.attention_mask)
    labels = list(dec.labels)
    if unit == "component":
        labels, values = _components(labels, values)
    err = float((values.sum(0) - tot).abs().max())
    scale = float(tot.abs().max())
    target = f"{read} hidden state · direction" + (" (mean-pooled)" if pos == "mean" else f" at pos {pos}")
    return LogitAttribution(
        values=values,
        labels=labels,
        total=tot,
        target=target,
        unit=unit,
        n_layers=arch.n_layers,
        n_heads=arch.n_heads,
        closure_error=err,
        relative_error=err / scale if scale > 0 else err,
        positions=positions.cpu(),
        prompts=[inputs] if isinstance(inputs, str) else (list(inputs) if isinstance(inputs, (list, tuple)) else None),
        str_tokens=dec.str_tokens[0] if dec.str_tokens else None,
        prompt_str_tokens=[row[: int(n)] for row, n in zip(dec.str_tokens, batch.attention_mask.sum(1))]
        if dec.str_tokens
        else None,
        target_kind="direction",
    )


def _check_direction(direction: Tensor, d_model: int) -> Tensor:
    """``direction`` as a finite float tensor [d_model] or [batch, d_model], else a typed error."""
    if isinstance(direction, Tensor):
        check_tensor_data(direction, "direction")
    try:
        u = torch.as_tensor(direction)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ShapeError(
            f"direction must be a float tensor [d_model={d_model}] or [batch, {d_model}]; "
            f"got {type(direction).__name__} ({e})"
        ) from None
    if u.ndim == 0:
        raise ShapeError(f"direction is a scalar; expected [d_model={d_model}] or [batch, {d_model}]")
    if u.is_complex() or not u.is_floating_point():
        raise ShapeError(f"direction must be a float tensor, got dtype {u.dtype}")
    if u.shape[-1] != d_model or u.ndim not in (1, 2):
        raise ShapeError(f"direction has shape {tuple(u.shape)}; expected [d_model={d_model}] or [batch, {d_model}]")
    if not torch.isfinite(u).all():
        raise ArgumentError("direction contains NaN or inf; pass a finite vector")
    return u


def _read_at(
    pos: Union[int, str, Sequence[int]], contrib: Tensor, total: Tensor, attention_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(terms [n_terms, b], total [b], positions [b]) read at ``pos`` from contributions [n_terms, b, pos] and
    the total [b, pos]: the mean over real tokens (``pos="mean"``, positions −1) or one position per prompt."""
    b = contrib.shape[1]
    mask = attention_mask.to(contrib.dtype)
    if isinstance(pos, str):
        if pos != "mean":
            raise ArgumentError(f"pos={pos!r} must be 'mean' or an int / per-prompt ints")
        values = (contrib * mask).sum(-1) / mask.sum(-1)
        tot = (total * mask).sum(-1) / mask.sum(-1)
        return values, tot, torch.full((b,), -1, dtype=torch.long, device=contrib.device)
    if not (is_int(pos) or isinstance(pos, (Tensor, list, tuple))):
        raise ArgumentError(f"pos={pos!r} must be 'mean', an int, or a per-prompt list of ints")
    if isinstance(pos, (list, tuple)) and len(pos) != b:
        raise ArgumentError(f"pos has {len(pos)} entries but there are {b} prompts")
    positions = resolve_positions(pos, attention_mask.cpu()).to(contrib.device)
    rows = torch.arange(b, device=contrib.device)
    return contrib[:, rows, positions], total[rows, positions], positions
