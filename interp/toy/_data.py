"""Synthetic token sequences that reward induction and copying.

Training data (:func:`span_copy_batch`): ``<bos>`` then uniform random words, in which
``n_spans`` spans of random length ``m ∈ [min_span, max_span]`` are copied from a random
source start ``s`` to a random later start ``t ≥ s + m``::

    x[t + i] = x[s + i]        for i in 0 … m-1

Random offsets matter (found while building the recipe): with the repeat always at the
same offset a two-layer model solves it with *positional* attention. With random offsets the
only way to predict ``x[t+i+1]`` is the induction algorithm of Olsson et al. 2022 ("In-context
Learning and Induction Heads", section 2): find the earlier occurrence of the current token
and copy the token that followed it; a one-layer model can only learn that "words seen before
come again" — copying skip-trigrams (Elhage et al. 2021, "One-Layer Attention-Only
Transformers"). Every other token is unpredictable (loss ln n_words at best).

Evaluation data: :func:`repeated_tokens` (``<bos>`` + n distinct random words + the same n
words again — the standard induction probe) and :func:`random_tokens` (no repeats forced).
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from interp._validate import check_int_min
from interp.errors import ArgumentError
from interp.models.internal import TOY_BOS_ID as BOS_ID
from interp.models.internal import TOY_FIRST_WORD_ID as FIRST_WORD_ID

__all__ = ["span_copy_batch", "repeated_tokens", "random_tokens"]


def _check(name: str, value: int, lo: int) -> None:
    check_int_min(name, value, lo)


def span_copy_batch(
    batch: int,
    n_ctx: int,
    d_vocab: int,
    *,
    generator: torch.Generator,
    n_spans: int = 1,
    min_span: int = 2,
    max_span: int | None = None,
) -> tuple[Int[Tensor, "batch pos"], Bool[Tensor, "batch pos"]]:
    """Sequences with copied spans at random offsets, and the mask of predictable positions.

    ``predictable[b, p]`` is True where token p is a copy whose predecessor is also a copy of
    the span (p ∈ (t, t+m)): the positions induction can predict from position p-1.
    Spans are placed one after another; a later span may overwrite an earlier copy.
    """
    _check("batch", batch, 1)
    _check("n_ctx", n_ctx, 5)
    _check("n_spans", n_spans, 0)
    _check("min_span", min_span, 1)
    max_span = (n_ctx - 1) // 2 if max_span is None else max_span
    if not min_span <= max_span <= (n_ctx - 1) // 2:
        raise ArgumentError(f"max_span={max_span} must be in [min_span={min_span}, (n_ctx-1)//2={(n_ctx - 1) // 2}]")
    x = torch.randint(FIRST_WORD_ID, d_vocab, (batch, n_ctx), generator=generator, device=generator.device)
    x[:, 0] = BOS_ID
    pos = torch.arange(n_ctx)
    predictable = torch.zeros(batch, n_ctx, dtype=torch.bool)
    for _ in range(n_spans):
        m = torch.randint(min_span, max_span + 1, (batch,), generator=generator)
        # source start s ∈ [1, n_ctx - 2m]; destination start t ∈ [s + m, n_ctx - m]
        s = 1 + (torch.rand(batch, generator=generator) * (n_ctx - 2 * m)).long()
        t = s + m + (torch.rand(batch, generator=generator) * (n_ctx - m - (s + m) + 1)).long()
        in_copy = (pos >= t[:, None]) & (pos < (t + m)[:, None])  # [batch, pos]
        src = torch.where(in_copy, pos - t[:, None] + s[:, None], pos)
        x = x.gather(1, src)
        predictable = (predictable & ~in_copy) | (in_copy & (pos > t[:, None]))
    return x, predictable


def repeated_tokens(batch: int, n: int, d_vocab: int, *, generator: torch.Generator) -> Int[Tensor, "batch pos"]:
    """``<bos>`` + n distinct random words + the same n words: shape [batch, 2n + 1].

    At query position q ∈ [n+1, 2n] an induction head attends to key q - n + 1 (the token after
    the previous occurrence of x[q]); a previous-token head attends to q - 1.
    """
    _check("batch", batch, 1)
    _check("n", n, 1)
    n_words = d_vocab - FIRST_WORD_ID
    if n > n_words:
        raise ArgumentError(f"n={n} distinct words requested but the vocabulary has {n_words}")
    dev = generator.device
    first = (
        torch.stack([torch.randperm(n_words, generator=generator, device=dev)[:n] for _ in range(batch)])
        + FIRST_WORD_ID
    )
    bos = torch.full((batch, 1), BOS_ID, dtype=torch.long, device=dev)
    return torch.cat([bos, first, first], dim=1)


def random_tokens(batch: int, n_ctx: int, d_vocab: int, *, generator: torch.Generator) -> Int[Tensor, "batch pos"]:
    """``<bos>`` + uniform random words: shape [batch, n_ctx]."""
    _check("batch", batch, 1)
    _check("n_ctx", n_ctx, 2)
    x = torch.randint(FIRST_WORD_ID, d_vocab, (batch, n_ctx), generator=generator, device=generator.device)
    x[:, 0] = BOS_ID
    return x
