"""Resolving answer/wrong tokens and attributed positions for a batch of prompts.

:func:`warn_unspaced` is the one check of a token string's leading space against the prompt it follows
(every analysis that reads a token after a prompt calls it once its positions are known).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union, overload

import torch
from torch import Tensor

from interp._validate import is_int
from interp.errors import ArgumentError, TokenSpacingWarning, warn_user
from interp.models import Model
from interp.models.internal import text_ids
from interp.stream.internal import check_tensor_data

__all__ = ["check_distinct", "check_text_ids", "output_width", "resolve_tokens", "warn_unspaced"]

TokenSpec = Union[str, int, Sequence[Union[str, int]], Tensor]


def output_width(model: Model) -> int:
    """The model's output vocabulary: W_U's columns, which are not the input vocabulary when the two differ (a
    tracr program reads {BOS, 1, 2, 3} and outputs a histogram count)."""
    W_U = model.weights.W_U
    return int(W_U.shape[1]) if W_U is not None else model.arch.d_vocab


def check_text_ids(model: Model, text: str, ids: Sequence[int], arg: str) -> None:
    """ArgumentError when the text ``text`` tokenised to an id the model has no logit for (a tokenizer larger than
    the model: torch's IndexError otherwise)."""
    d_vocab = output_width(model)
    bad = [i for i in ids if not 0 <= i < d_vocab]
    if bad:
        raise ArgumentError(
            f"{arg}={text!r} tokenises to id {bad[0]}, but model {model.name!r} has logits for ids 0..{d_vocab - 1} "
            "only: its tokenizer is larger than the model (save the model's own tokenizer beside it)"
        )


def _one_token(model: Model, value: Any, arg: str) -> int:
    """A target token id, checked against the model's *output* width (:func:`output_width`)."""
    d_vocab = output_width(model)
    if isinstance(value, str):
        if model.tokenizer is None:
            raise ArgumentError(f"{arg}={value!r}: model {model.name!r} has no tokenizer; pass a token id")
        ids = text_ids(model, value, arg)
        if len(ids) != 1:
            pieces = [model.tokenizer.decode([i]) for i in ids]
            raise ArgumentError(
                f"{arg}={value!r} must be a single token, but it tokenises to {len(ids)} tokens "
                f"{pieces} (ids {ids}); pick one of those pieces or pass a token id"
            )
        check_text_ids(model, value, ids, arg)
        return int(ids[0])
    if is_int(value):
        if not 0 <= value < d_vocab:
            raise ArgumentError(f"{arg}={value} is not an output token id: ids are in [0, {d_vocab - 1}]")
        return int(value)
    raise ArgumentError(f"{arg}={value!r} must be a string (one token), a token id, or a per-prompt list of them")


@overload
def resolve_tokens(model: Model, spec: TokenSpec, n_prompts: int, arg: str) -> Tensor: ...
@overload
def resolve_tokens(model: Model, spec: None, n_prompts: int, arg: str) -> None: ...
@overload
def resolve_tokens(model: Model, spec: Optional[TokenSpec], n_prompts: int, arg: str) -> Optional[Tensor]: ...


def resolve_tokens(model: Model, spec: Optional[TokenSpec], n_prompts: int, arg: str) -> Optional[Tensor]:
    """Token ids [n_prompts] from a single token or a per-prompt list (None for None)."""
    if spec is None:
        return None
    if isinstance(spec, Tensor):
        check_tensor_data(spec, arg)
        if spec.is_floating_point() or spec.is_complex() or spec.dtype == torch.bool:
            raise ArgumentError(f"{arg} must hold integer token ids, got dtype {spec.dtype}")
        spec = spec.flatten().tolist() if spec.ndim else int(spec)
    if isinstance(spec, str) or is_int(spec):
        return torch.full((n_prompts,), _one_token(model, spec, arg), dtype=torch.long, device=model.device)
    if not isinstance(spec, (list, tuple)):
        raise ArgumentError(f"{arg}={spec!r} must be a single-token string, a token id, or a per-prompt list of them")
    spec = list(spec)
    if len(spec) != n_prompts:
        raise ArgumentError(
            f"{arg} has {len(spec)} entries but there are {n_prompts} prompts; give one per prompt or a single token"
        )
    return torch.tensor(
        [_one_token(model, v, f"{arg}[{i}]") for i, v in enumerate(spec)], dtype=torch.long, device=model.device
    )


def _strings(spec: Any, n: int, arg: str) -> list[tuple[str, str, list[int]]]:
    """(argument name, token string, prompts it is read for) of every string in a token spec."""
    if isinstance(spec, str):
        return [(arg, spec, list(range(n)))]
    if isinstance(spec, (set, frozenset)):
        return [(arg, v, list(range(n))) for v in sorted(x for x in spec if isinstance(x, str))]
    out: list[tuple[str, str, list[int]]] = []
    if isinstance(spec, (list, tuple)) and len(spec) == n:
        for i, v in enumerate(spec):
            items = (
                sorted(x for x in v if isinstance(x, str))
                if isinstance(v, (set, frozenset))
                else (list(v) if isinstance(v, (list, tuple)) else [v])
            )
            out += [(f"{arg}[{i}]", x, [i]) for x in items if isinstance(x, str)]
    return out


def warn_unspaced(
    model: Model, spec: Any, arg: str, tokens: Tensor, positions: Optional[Tensor], *, owner: str = ""
) -> None:
    """A :class:`interp.TokenSpacingWarning` for each token string of ``spec`` (an answer, wrong or metric
    token: a string, a set, or one entry per prompt) that has no leading space, is read after a prompt token
    that does not end in whitespace (``tokens[i, positions[i]]``), and whose space-prefixed form is a single
    other token: ``wrong="Rome"`` after "The capital of Spain is" reads logit['Rome'], not logit[' Rome'].
    Token ids are never checked (they say exactly which token is meant)."""
    tok = model.tokenizer
    if tok is None or positions is None or spec is None or isinstance(spec, (int, Tensor)):
        return
    n = int(tokens.shape[0])
    for name, text, prompts in _strings(spec, n, arg):
        if not text or text[0].isspace():
            continue
        spaced = tok(" " + text, add_special_tokens=False)["input_ids"]
        plain = tok(text, add_special_tokens=False)["input_ids"]
        if len(spaced) != 1 or list(spaced) == list(plain) or spaced[0] == getattr(tok, "unk_token_id", None):
            continue
        for i in prompts:
            before = tok.decode([int(tokens[i, int(positions[i])])])
            if before and not before[-1].isspace():
                where = f" (prompt {i})" if n > 1 else ""
                got = f"{text!r} (id {plain[0]})" if len(plain) == 1 else f"{text!r} (ids {list(plain)})"
                warn_user(
                    f"{owner + ': ' if owner else ''}{name}={text!r} has no leading space "
                    f"and follows {before!r}{where}, which does not end in one: the logit read is {got}, not the "
                    f"space-prefixed word {' ' + text!r} (id {spaced[0]}) that usually comes next. Pass "
                    f"{name}={' ' + text!r} if that is meant; to keep {text!r}, pass its token id or filter "
                    "interp.TokenSpacingWarning",
                    TokenSpacingWarning,
                )
                break


def check_distinct(model: Model, answer: Tensor, wrong: Tensor, owner: str, fix: str) -> None:
    """Refuse an answer and a wrong token that are the same token for some prompt — compared by id, so two strings
    that tokenise to one id are caught — since logit[a] − logit[a] = 0 on every run. ``answer`` / ``wrong``: ids
    [n_prompts] or [n_prompts, k] (a continuation of k tokens; −1 pads shorter ones); ``owner`` names the call in
    the message (e.g. ``"LogitDiff(answer=' a', wrong=' a')"``), ``fix`` says how to ask for one logit instead. The
    one check of this for every metric and graph that reads a logit difference."""
    a, w = answer.reshape(answer.shape[0], -1), wrong.reshape(wrong.shape[0], -1)
    if a.shape != w.shape:
        return
    same = (a == w).all(1)
    if not bool(same.any()):
        return
    i = int(same.nonzero()[0, 0])
    per = a.shape[0] > 1 and bool(((a != a[:1]).any() or (w != w[:1]).any()))
    tok = model.tokenizer
    row = [int(t) for t in a[i] if t >= 0]  # −1 pads a shorter continuation
    name = repr(tok.decode(row)) if tok is not None else "#" + " #".join(map(str, row))
    raise ArgumentError(
        f"{owner}: the answer and the wrong token are the same token{f' for prompt {i}' if per else ''} ({name}), "
        f"so the metric is 0 on every run; give a different wrong token ({fix})"
    )
