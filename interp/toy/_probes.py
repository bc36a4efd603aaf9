"""Behavioural probes of a toy: previous-token and induction attention, in-context loss.

For the standard probe (``<bos>`` + n distinct random words + the same n words, Olsson et al.
2022, "In-context Learning and Induction Heads", section 2) and query positions q ∈ [n+1, 2n]:

    prev_token_score(h)  = mean_q A^h[q, q-1]          (on random sequences of seq_len tokens, q ≥ 1)
    induction_score(h)   = mean_q A^h[q, q-n+1]        (attention to the token after the
                                                        previous occurrence of x[q])
    loss_first / second  = mean loss of the predictions made at positions 1…n-1 (tokens 2…n)
                           / n+1…2n-1 (tokens n+2…2n) of the probe

The first half is unpredictable (ideal loss ln n_words); the second half is predictable by
induction. Patterns are the engine's (``blocks.{l}.attn.hook_pattern`` in transformer-lens's names).

Memory: a pass over [batch, pos] tokens holds the logits [batch, pos, d_vocab] and, inside each
layer, attention scores [batch, n_heads, pos, pos]. So the probe lengths come from the caller, with
defaults that do not grow with the model's context (``DEFAULT_SEQ_LEN``: the toys' whole 32-token
context, 128 tokens of a real model's 8,192), and a call whose estimated peak exceeds ``max_bytes``
is refused with :class:`~interp.errors.MemoryCapError` before anything is allocated.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp._validate import check_int_range, check_positive_int
from interp.engine.internal import read_forward
from interp.errors import MemoryCapError, ShapeError
from interp.models.internal import TOY_FIRST_WORD_ID as FIRST_WORD_ID
from interp.models import Model
from interp.toy._data import random_tokens, repeated_tokens

__all__ = ["DEFAULT_SEQ_LEN", "MAX_BYTES", "logits_and_patterns", "probe_report"]

#: Default probe length: the random sequence's length and 2n + 1 for the repeated one (each capped
#: by the model's context).
DEFAULT_SEQ_LEN: int = 128
#: Default cap on a probe's estimated peak memory (1 GiB).
MAX_BYTES: int = 1 << 30


def _pass_bytes(model: Model, batch: int, pos: int, *, logits: bool, keep_patterns: bool) -> int:
    """Estimated peak bytes of one forward pass over [batch, pos] tokens (see the module docstring)."""
    a = model.arch
    e = model.dtype.itemsize
    need = 3 * batch * a.n_heads * pos * pos * e  # one layer's scores, softmax and pattern
    need += batch * pos * (4 * a.d_model + 2 * a.d_mlp) * e  # the stream and one layer's activations
    if logits:
        need += batch * pos * a.d_vocab * (e + 4)  # logits and their float log-softmax
    if keep_patterns:
        need += a.n_layers * batch * a.n_heads * pos * pos * e
    return need


def _refuse(what: str, need: int, max_bytes: int, hint: str) -> None:
    if need > max_bytes:
        raise MemoryCapError(
            f"{what} needs about {need / 2**20:,.0f} MiB, over the cap max_bytes={max_bytes} "
            f"({max_bytes / 2**20:,.0f} MiB); {hint}"
        )


def _run(model: Model, tokens: Tensor, reduce: Any, *, need_logits: bool) -> tuple[Any, list[Tensor]]:
    """One engine pass, every layer's pattern reduced by ``reduce`` as the layer produces it; the logits (the final
    norm and the unembedding of the last residual) when ``need_logits``."""
    t = tokens.to(model.device)
    L = model.arch.n_layers
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(L)]
    kept, logits = read_forward(model, t, torch.ones_like(t), dict.fromkeys(names, reduce), logits=need_logits)
    return logits, [kept[n] for n in names]


def logits_and_patterns(
    model: Model, tokens: Int[Tensor, "batch pos"], *, max_bytes: int = MAX_BYTES
) -> tuple[Float[Tensor, "batch pos d_vocab"], Float[Tensor, "n_layers batch n_heads pos pos"]]:
    """Logits and every layer's attention pattern for ``tokens`` (one engine pass).

    Refused with MemoryCapError when the logits and the n_layers patterns would exceed ``max_bytes``.
    """
    check_positive_int("max_bytes", max_bytes)
    if not isinstance(tokens, Tensor) or tokens.ndim != 2:
        raise ShapeError(
            f"tokens must be an int tensor [batch, pos]; got {getattr(tokens, 'shape', type(tokens).__name__)}"
        )
    b, p = tokens.shape
    _refuse(
        f"logits_and_patterns on tokens {tuple(tokens.shape)}",
        _pass_bytes(model, b, p, logits=True, keep_patterns=True),
        max_bytes,
        "pass fewer or shorter sequences, or raise max_bytes",
    )
    logits, pats = _run(model, tokens, lambda t: t.clone(), need_logits=True)
    return logits.detach(), torch.stack(pats)


def probe_report(
    model: Model,
    *,
    n: int | None = None,
    seq_len: int | None = None,
    batch: int = 200,
    seed: int = 1234,
    max_bytes: int = MAX_BYTES,
) -> dict[str, Any]:
    """Per-head previous-token / induction scores and the probe's first/second-half losses.

    ``n``: distinct words in the repeated probe (2n + 1 tokens); default min((n_ctx − 1) // 2,
    (DEFAULT_SEQ_LEN − 1) // 2). ``seq_len``: length of the random sequences that give the
    previous-token scores; default min(n_ctx, DEFAULT_SEQ_LEN). ``batch`` sequences of each.
    Raises MemoryCapError, before any pass, if either pass's estimated peak exceeds ``max_bytes``.
    """
    arch = model.arch
    check_positive_int("batch", batch)
    check_positive_int("max_bytes", max_bytes)
    n_max = min((arch.n_ctx - 1) // 2, arch.d_vocab - FIRST_WORD_ID)
    if n is None:
        n = min(n_max, (DEFAULT_SEQ_LEN - 1) // 2)
    check_int_range("n", n, 2, n_max + 1)  # 2n + 1 tokens within n_ctx, n distinct words
    seq_len = min(arch.n_ctx, DEFAULT_SEQ_LEN) if seq_len is None else seq_len
    check_int_range("seq_len", seq_len, 2, arch.n_ctx + 1)
    need = max(
        _pass_bytes(model, batch, 2 * n + 1, logits=True, keep_patterns=False),
        _pass_bytes(model, batch, seq_len, logits=False, keep_patterns=False),
    )
    _refuse(
        f"probe_report(n={n}, seq_len={seq_len}, batch={batch}) on {arch.name!r}",
        need,
        max_bytes,
        "lower batch, n or seq_len, or raise max_bytes",
    )
    g = torch.Generator().manual_seed(seed)
    rep = repeated_tokens(batch, n, arch.d_vocab, generator=g)
    rnd = random_tokens(batch, seq_len, arch.d_vocab, generator=g)
    q = torch.arange(n + 1, 2 * n + 1)
    qr = torch.arange(1, seq_len)
    logits, ind = _run(model, rep, lambda A: A[:, :, q, q - n + 1], need_logits=True)  # each [batch, n_heads, n]
    _, prv = _run(model, rnd, lambda A: A[:, :, qr, qr - 1], need_logits=False)
    induction = torch.stack(ind).mean(dim=(1, 3))  # [n_layers, n_heads]
    prev = torch.stack(prv).mean(dim=(1, 3))
    nll = -F.log_softmax(logits.float(), dim=-1)[:, :-1].gather(-1, rep[:, 1:, None].to(logits.device))[..., 0]
    return {
        "n": n,
        "seq_len": seq_len,
        "batch": batch,
        "seed": seed,
        "prev_token_score": [[round(float(v), 4) for v in row] for row in prev],
        "induction_score": [[round(float(v), 4) for v in row] for row in induction],
        # nll[:, p] is the loss of predicting token p+1
        "loss_first_half": round(float(nll[:, 1:n].mean()), 4),
        "loss_second_half": round(float(nll[:, n + 1 :].mean()), 4),
        "uniform_loss": round(float(torch.log(torch.tensor(float(arch.d_vocab - 2)))), 4),
    }
