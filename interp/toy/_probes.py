"""Behavioural probes of a toy: previous-token and induction attention, in-context loss.

For the standard probe (``<bos>`` + n distinct random words + the same n words, Olsson et al.
2022, "In-context Learning and Induction Heads", section 2) and query positions q ∈ [n+1, 2n]:

    prev_token_score(h)  = mean_q A^h[q, q-1]          (on random sequences, q ≥ 1)
    induction_score(h)   = mean_q A^h[q, q-n+1]        (attention to the token after the
                                                        previous occurrence of x[q])
    loss_first / second  = mean loss of the predictions made at positions 1…n-1 (tokens 2…n)
                           / n+1…2n-1 (tokens n+2…2n) of the probe

The first half is unpredictable (ideal loss ln n_words); the second half is predictable by
induction. Patterns are read from ``blocks.{l}.attn.hook_pattern`` through the bridge.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp.toy._data import random_tokens, repeated_tokens

__all__ = ["attention_patterns", "probe_report"]


def attention_patterns(model: Any, tokens: Int[Tensor, "batch pos"]
                       ) -> tuple[Float[Tensor, "batch pos d_vocab"], Float[Tensor, "n_layers batch n_heads pos pos"]]:
    """Logits and every layer's attention pattern for ``tokens`` (hooks removed on exit)."""
    store: dict[int, Tensor] = {}

    def keep(l: int):
        def hook(t: Tensor, hook: Any) -> None:
            store[l] = t.detach().clone()

        return hook

    hooks = [(f"blocks.{l}.attn.hook_pattern", keep(l)) for l in range(model.arch.n_layers)]
    with torch.no_grad(), model.bridge.hooks(fwd_hooks=hooks):
        logits = model.bridge(tokens.to(model.device))
    return logits.detach(), torch.stack([store[l] for l in range(model.arch.n_layers)])


def probe_report(model: Any, *, n: int | None = None, batch: int = 200, seed: int = 1234) -> dict[str, Any]:
    """Per-head previous-token / induction scores and the probe's first/second-half losses."""
    arch = model.arch
    n = (arch.n_ctx - 1) // 2 if n is None else n
    g = torch.Generator().manual_seed(seed)
    rep = repeated_tokens(batch, n, arch.d_vocab, generator=g)
    rnd = random_tokens(batch, arch.n_ctx, arch.d_vocab, generator=g)
    logits, pat_rep = attention_patterns(model, rep)
    _, pat_rnd = attention_patterns(model, rnd)
    q = torch.arange(n + 1, 2 * n + 1)
    induction = pat_rep[:, :, :, q, q - n + 1].mean(dim=(1, 3))  # [n_layers, n_heads]
    qr = torch.arange(1, arch.n_ctx)
    prev = pat_rnd[:, :, :, qr, qr - 1].mean(dim=(1, 3))
    nll = -F.log_softmax(logits.float(), dim=-1)[:, :-1].gather(-1, rep[:, 1:, None].to(logits.device))[..., 0]
    return {
        "n": n, "batch": batch, "seed": seed,
        "prev_token_score": [[round(float(v), 4) for v in row] for row in prev],
        "induction_score": [[round(float(v), 4) for v in row] for row in induction],
        # nll[:, p] is the loss of predicting token p+1
        "loss_first_half": round(float(nll[:, 1:n].mean()), 4),
        "loss_second_half": round(float(nll[:, n + 1 :].mean()), 4),
        "uniform_loss": round(float(torch.log(torch.tensor(float(arch.d_vocab - 2)))), 4),
    }
