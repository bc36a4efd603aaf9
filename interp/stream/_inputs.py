"""Turning user inputs (text, list of texts, token ids) into a checked token batch + mask.

Tokenisation itself (:func:`interp.models.tokenize`) belongs to the models layer."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._validate import check_int, is_int
from interp.errors import ArgumentError, ShapeError
from interp.models import Batch, Model, tokenize
from interp.models.internal import check_token_ids

__all__ = [
    "Batch",
    "tokenize",
    "as_batch",
    "require_model",
    "check_tensor_data",
    "resolve_positions",
]  # Batch, tokenize: from models

Inputs = Union[str, Sequence[str], Tensor]


def require_model(model: Any, *, name: str = "model") -> None:
    """ArgumentError unless ``model`` is an interp Model (not a bridge, an HF module or a name)."""
    if not isinstance(model, Model):
        raise ArgumentError(
            f"{name}={model!r:.80} is a {type(model).__name__}, not an interp Model; "
            "load one with interp.load_model(name_or_path) (or interp.engine.model_from_hf)"
        )


def check_tensor_data(t: Tensor, name: str) -> None:
    """ShapeError for a tensor without data (the 'meta' device): nothing can be read from it."""
    if t.device.type == "meta":
        raise ShapeError(
            f"{name} is on the 'meta' device (a tensor without data); pass a tensor on a real device such as 'cpu'"
        )


def as_batch(model: Model, inputs: Inputs, attention_mask: Optional[Tensor] = None) -> Batch:
    """Validate ``inputs`` (text or int tensor [batch, pos]) against the model; return a Batch."""
    require_model(model)
    arch = model.arch
    is_text = isinstance(inputs, str) or (
        isinstance(inputs, (list, tuple)) and len(inputs) > 0 and all(isinstance(x, str) for x in inputs)
    )
    if attention_mask is not None and is_text:
        raise ArgumentError(
            "attention_mask is only for token-id inputs (an int tensor [batch, pos]); text inputs are "
            "tokenised and padded for you, with their own mask"
        )
    if isinstance(inputs, Tensor):
        t = _token_ids(model, inputs).to(device=model.device, dtype=torch.long).contiguous()
        mask = torch.ones_like(t) if attention_mask is None else _mask(attention_mask, t).to(model.device, torch.long)
        batch = Batch(t, mask)
    elif isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and all(isinstance(x, str) for x in inputs)):
        if isinstance(inputs, (list, tuple)) and len(inputs) == 0:
            raise ArgumentError("inputs is an empty list; give at least one prompt")
        if attention_mask is not None:
            raise ArgumentError(
                "attention_mask is only for token-id inputs; text inputs are tokenised and padded for you"
            )
        batch = tokenize(model, inputs)
        check_token_ids(model, batch.tokens)  # a tokenizer larger than the model
    elif isinstance(inputs, (list, tuple)) and inputs and all(isinstance(x, (list, tuple)) for x in inputs):
        return as_batch(model, _id_rows(inputs), attention_mask)
    else:
        raise ArgumentError(
            f"inputs must be a string, a list of strings or an int tensor [batch, pos]; got {type(inputs).__name__}"
        )
    n = batch.tokens.shape[1]
    if n > arch.n_ctx:
        raise ArgumentError(f"inputs has {n} positions; the model's context is n_ctx={arch.n_ctx}")
    if bool((batch.attention_mask.sum(dim=1) == 0).any()):
        raise ArgumentError("attention_mask has a row with no real tokens")
    return batch


def resolve_positions(pos: Union[int, Sequence[int], Tensor], mask: Tensor, offset: int = 0) -> Tensor:
    """Absolute positions [batch] from ``pos`` (negative counts back from each row's last real token).

    ``offset`` indexes into a per-prompt ``pos`` list when prompts are processed in batches.
    """
    b, n = mask.shape
    # the mask read once (not twice per prompt: each read of a device value waits for the device)
    real = mask.bool().tolist()
    lengths = [sum(r) for r in real]
    if isinstance(pos, Tensor):
        check_tensor_data(pos, "pos")
        if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
            raise ArgumentError(f"pos must hold integer positions, got a tensor of dtype {pos.dtype}")
        pos = pos.flatten().tolist() if pos.ndim else int(pos)
    if not (is_int(pos) or isinstance(pos, (list, tuple))):
        raise ArgumentError(f"pos={pos!r} must be an int or a per-prompt list of ints")
    per = list(pos)[offset : offset + b] if isinstance(pos, (list, tuple)) else [pos] * b
    out = []
    for i, p in enumerate(per):
        p = check_int(f"pos[{offset + i}]", p)
        L = lengths[i]
        q = L + p if p < 0 else p
        if not 0 <= q < n:
            raise ArgumentError(f"pos={p} is out of range for prompt {offset + i}, which has {L} tokens")
        if not real[i][q]:
            raise ArgumentError(f"pos={p} points at padding in prompt {offset + i} (it has {L} real tokens)")
        out.append(q)
    return torch.tensor(out, dtype=torch.long, device=mask.device)


def _token_ids(model: Model, inputs: Tensor) -> Tensor:
    """``inputs`` as token ids [batch, pos] (a 1-D tensor is one prompt), each in [0, d_vocab), else a typed error."""
    t = inputs
    check_tensor_data(t, "inputs")
    if t.ndim == 1:
        t = t[None]
    if t.ndim != 2:
        raise ShapeError(f"inputs must be token ids of shape [batch, pos], got shape {tuple(inputs.shape)}")
    if t.numel() == 0:
        raise ArgumentError(f"inputs is empty (shape {tuple(inputs.shape)}); give at least one token")
    if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
        raise ShapeError(f"inputs must be an integer tensor of token ids, got dtype {t.dtype}")
    check_token_ids(model, t)
    return t


def _mask(attention_mask: Any, t: Tensor) -> Tensor:
    """``attention_mask`` as a tensor shaped like the token ids ``t`` (a 1-D mask is one prompt's), holding
    only 0 (padding) and 1 (real token), else a typed error."""
    if isinstance(attention_mask, Tensor):
        check_tensor_data(attention_mask, "attention_mask")
    try:
        raw = torch.as_tensor(attention_mask)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ShapeError(
            f"attention_mask must be a 0/1 int tensor shaped like inputs {tuple(t.shape)}; "
            f"got {type(attention_mask).__name__} ({e})"
        ) from None
    if raw.ndim == 1:
        raw = raw[None]
    if raw.shape != t.shape:
        raise ShapeError(f"attention_mask has shape {tuple(raw.shape)}; it must match inputs {tuple(t.shape)}")
    if not bool(((raw == 0) | (raw == 1)).all()):
        raise ArgumentError("attention_mask must hold only 0 (padding) and 1 (real token)")
    return raw


def _id_rows(inputs: Sequence[Sequence[Any]]) -> Tensor:
    """Token ids given as equal-length lists of ints, as a long tensor [batch, pos]."""
    lens = {len(x) for x in inputs}
    if len(lens) != 1:
        raise ShapeError(
            f"inputs rows have different lengths {sorted(lens)}; pass strings (padded for you) or a "
            "rectangular id tensor"
        )
    bad = [x for row in inputs for x in row if not is_int(x)]
    if bad:
        raise ShapeError(f"inputs as lists of token ids must hold ints only; got {bad[0]!r} ({type(bad[0]).__name__})")
    return torch.tensor(inputs, dtype=torch.long).reshape(len(inputs), -1)
