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

Neither vocab × vocab matrix is formed: OV is streamed in row blocks of at most ``max_chunk_bytes``
keeping a running top-k, and the QK column of each chosen source is
(W_E W_Q^h)(W_E W_K^kv[src] − mean_src' W_E W_K^kv[src'])ᵀ / √d_head, one vocab-long vector. Memory
is O(d_vocab · d_head) plus one block, whatever the vocabulary.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from interp._validate import check_int_range, check_positive_int
from interp.errors import UnsupportedOperationError
from interp.models import Model
from interp.models.internal import TOY_FIRST_WORD_ID as FIRST_WORD_ID

__all__ = ["skip_trigrams"]


def _rows_times(X: torch.Tensor, W: torch.Tensor, rows: int) -> torch.Tensor:
    """X.double() @ W.double() in row blocks (X is vocab-long: never copied whole in float64)."""
    Wd = W.double()
    return torch.cat([X[s : s + rows].double() @ Wd for s in range(0, X.shape[0], rows)])


def skip_trigrams(
    model: Model, layer: int, head: int, *, k: int = 10, words_only: bool = True, max_chunk_bytes: int = 256 << 20
) -> Any:
    """The ``k`` strongest skip-trigrams of head ``L{layer}.H{head}`` as a pandas DataFrame.

    Columns: source, destination, output (token strings), ov (output logit boost from the
    source), qk (the destination's attention-logit advantage for that source). ``words_only``
    leaves out the toy's special tokens (<bos>, <unk>); set False for other models.
    ``max_chunk_bytes``: the largest block of the full OV circuit held at once (default 256 MiB).
    """
    import pandas as pd

    a, w = model.arch, model.weights
    check_int_range("layer", layer, 0, a.n_layers)
    check_int_range("head", head, 0, a.n_heads)
    check_positive_int("k", k)
    check_positive_int("max_chunk_bytes", max_chunk_bytes)
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
    E = w.W_E[first:]  # [n, d_model], n tokens
    n = E.shape[0]
    block = max(1, min(n, max_chunk_bytes // (8 * n)))  # rows of a float64 [rows, n] block
    with torch.no_grad():
        A = _rows_times(E, w.W_V[layer, kv], block)  # [n, d_head]: OV = A B
        B = w.W_O[layer, head].double() @ W_U[:, first:].double()  # [d_head, n]
        Q = _rows_times(E, w.W_Q[layer, head], block)  # [n, d_head]: QK = Q Kᵀ / √d_head
        K = _rows_times(E, w.W_K[layer, kv], block)
        vals = torch.empty(0, dtype=torch.float64, device=A.device)
        idx = torch.empty(0, dtype=torch.long, device=A.device)
        for s in range(0, n, block):  # running top-k over row blocks of OV
            v, i = torch.topk(A[s : s + block] @ B, k=min(k, n), dim=1)  # each row's top-k: [rows, k]
            flat = (
                i + n * torch.arange(s, s + v.shape[0], device=i.device)[:, None]
            ).flatten()  # flat index src · n + out
            vals, order = torch.topk(torch.cat([vals, v.flatten()]), k=min(k, vals.numel() + v.numel()))
            idx = torch.cat([idx, flat])[order]
        K_centred = K - K.mean(dim=0, keepdim=True)  # QK[dst, src] − mean_src' QK[dst, src'] = Q (K[src] − K̄)ᵀ
    rows = []
    for value, flat in zip(vals.tolist(), idx.tolist()):
        src, out = divmod(flat, n)
        col = (Q @ K_centred[src]) / math.sqrt(a.d_head)  # [n]: every destination's advantage for src
        dst = int(col.argmax())
        tok = lambda i: model.tokenizer.decode([i + first])  # noqa: E731
        rows.append(dict(source=tok(src), destination=tok(dst), output=tok(out), ov=value, qk=float(col[dst])))
    return pd.DataFrame(rows)
