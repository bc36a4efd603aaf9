"""Reading one prompt for the replacement model's analyses (the attribution graph, interventions, QK attribution):
its tokens, a position in it, the output tokens and their text."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from interp._validate import is_int
from interp.attribution.internal import TokenSpec, check_distinct, resolve_tokens, warn_unspaced
from interp.errors import ArgumentError
from interp.models import Model
from interp.stream.internal import as_batch

__all__ = ["one_prompt", "output_tokens", "position", "token_text"]


def one_prompt(model: Model, prompt: Any) -> tuple[Tensor, Tensor]:
    """``prompt`` (a string or token ids [1, pos]) as (tokens [1, n], attention mask [1, n]); more than one refused."""
    batch = as_batch(model, prompt)
    if batch.tokens.shape[0] != 1:
        raise ArgumentError(f"prompt must be one prompt (a string or token ids [1, pos]), got {batch.tokens.shape[0]}")
    return batch.tokens, batch.attention_mask


def output_tokens(
    model: Model, tokens: Tensor, pos: int, target: Optional[TokenSpec], wrong: Optional[TokenSpec], owner: str
) -> tuple[Optional[int], Optional[int]]:
    """The ids of ``target`` and ``wrong`` (None where not given) read at position ``pos`` of ``tokens`` [1, n]; a
    token string without its leading space after a word warns (:class:`interp.TokenSpacingWarning`); a ``wrong`` that
    is the target's token (compared by id) is an ArgumentError. The one reader of output tokens of every function of
    this package that takes one."""
    if wrong is not None and target is None:
        raise ArgumentError("wrong= needs target= (the output is the logit difference target − wrong)")
    at = torch.tensor([pos], device="cpu")  # host: read position by position
    ids: list[Optional[int]] = []
    for name, spec in (("target", target), ("wrong", wrong)):
        if spec is None:
            ids.append(None)
            continue
        warn_unspaced(model, spec, name, tokens, at, owner=owner)
        ids.append(int(resolve_tokens(model, spec, 1, name)[0]))
    if ids[0] is not None and ids[1] is not None:
        check_distinct(
            model,
            torch.tensor([ids[0]]),
            torch.tensor([ids[1]]),
            f"{owner}(target={target!r:.60}, wrong={wrong!r:.60})",
            "leave wrong=None for the target's logit alone",
        )
    return ids[0], ids[1]


def position(name: str, value: Any, n: int) -> int:
    """An int in [−n, n − 1] (negative counts back from the end) as its index in [0, n)."""
    if not is_int(value) or not -n <= value < n:
        raise ArgumentError(f"{name}={value!r} must be an int in [{-n}, {n - 1}] for a prompt of {n} tokens")
    return int(value) % n


def token_text(model: Model, i: int) -> str:
    """Token ``i`` as text (its repr, quotes showing its spaces), or its id without a tokenizer."""
    tok = model.tokenizer
    return repr(tok.decode([i])) if tok is not None else str(i)
