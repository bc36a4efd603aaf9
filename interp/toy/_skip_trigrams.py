"""Skip-trigrams of one attention head, read off its full QK and OV circuits.

Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits", section "One-Layer
Attention-Only Transformers" → "Skip-trigram interpretation": a one-layer head implements
triples ``[source] … [destination] → [output]``. With the token embeddings as both queries and
keys (positions ignored) and query head h reading KV head kv(h):

    full QK circuit   QK[dst, src] = (W_E W_Q^h)(W_E W_K^kv)ᵀ / √d_head     (attention logit)
    full OV circuit   OV[src, out] = W_E W_V^kv W_O^h W_U                    (logit effect)

Reading (numbered): 1. rank (source, output) pairs by OV[src, out]; 2. for each, the
destination that attends to that source most, argmax_dst (QK[dst, src] − mean_src' QK[dst, src'])
— the logit advantage of that source over an average one at that destination. A copying head
shows ``src == out`` at the top. Pure weight maths: no forward pass.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from interp._validate import check_int_range, check_positive_int
from interp.errors import UnsupportedOperationError
from interp.models import Model, TOY_FIRST_WORD_ID as FIRST_WORD_ID

__all__ = ["skip_trigrams"]


def skip_trigrams(model: Model, layer: int, head: int, *, k: int = 10, words_only: bool = True) -> Any:
    """The ``k`` strongest skip-trigrams of head ``L{layer}.H{head}`` as a pandas DataFrame.

    Columns: source, destination, output (token strings), ov (output logit boost from the
    source), qk (the destination's attention-logit advantage for that source). ``words_only``
    leaves out the toy's special tokens (<bos>, <unk>); set False for other models.
    """
    import pandas as pd

    a, w = model.arch, model.weights
    check_int_range("layer", layer, 0, a.n_layers)
    check_int_range("head", head, 0, a.n_heads)
    check_positive_int("k", k)
    if not a.has_logits or model.tokenizer is None:
        raise UnsupportedOperationError(f"model {a.name!r} needs an unembedding and a tokenizer for skip-trigrams")
    if a.norm != "none":
        raise UnsupportedOperationError(
            f"skip_trigrams reads raw circuits; model {a.name!r} has norm={a.norm!r} (use a norm='none' toy)"
        )
    kv = a.kv_head(head)
    W_U = w.W_U
    if W_U is None:
        raise UnsupportedOperationError(f"model {a.name!r} needs an unembedding for skip-trigrams")
    first = FIRST_WORD_ID if words_only else 0
    E = w.W_E[first:].double()  # [n_tok, d_model]
    with torch.no_grad():
        ov = (E @ w.W_V[layer, kv].double()) @ (w.W_O[layer, head].double() @ W_U[:, first:].double())
        qk = (E @ w.W_Q[layer, head].double()) @ (E @ w.W_K[layer, kv].double()).T / math.sqrt(a.d_head)
        qk = qk - qk.mean(dim=1, keepdim=True)  # [dst, src] advantage over an average source
        top = torch.topk(ov.flatten(), k=min(k, ov.numel()))
    n = ov.shape[1]
    rows = []
    for value, flat in zip(top.values.tolist(), top.indices.tolist()):
        src, out = divmod(flat, n)
        dst = int(qk[:, src].argmax())
        tok = lambda i: model.tokenizer.decode([i + first])  # noqa: E731
        rows.append(dict(source=tok(src), destination=tok(dst), output=tok(out), ov=value, qk=float(qk[dst, src])))
    return pd.DataFrame(rows)
