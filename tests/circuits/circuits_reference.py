"""Independent references for the circuits tests: transformer-lens's own composition maths, chunked.

``tl_composition_scores`` repeats ``TransformerBridge.all_composition_scores`` (TL 4.3:
``transformer_lens/model_bridge/transformer_bridge.py``) step for step — the same stacked weights,
the same KV-head expansion (``bridge._expand_kv_heads``, a repeat_interleave), the same
``transformer_lens.utilities.matrix.composition_scores`` — but one source layer at a time, because
the unchunked call broadcasts both collapsed factors to [L, H, L, H, d_head, d_model] and is killed
for lack of memory on smollm2-135m (>20 GB). Masked entries are NaN instead of TL's zeros.
"""

from __future__ import annotations

import torch
from transformer_lens import FactoredMatrix
from transformer_lens.utilities.matrix import composition_scores as tl_scores


def tl_composition_scores(bridge, mode: str, *, layers_per_chunk: int = 1) -> torch.Tensor:
    W_V = bridge._expand_kv_heads(bridge.W_V)
    W_O = bridge.W_O
    W_Q = bridge.W_Q
    W_K = bridge._expand_kv_heads(bridge.W_K)
    L, H = W_Q.shape[:2]
    if mode == "Q":
        right = FactoredMatrix(W_Q, W_K.transpose(-2, -1))
    elif mode == "K":
        right = FactoredMatrix(W_Q, W_K.transpose(-2, -1)).T
    else:
        right = FactoredMatrix(W_V, W_O)
    out = torch.full((L, H, L, H), float("nan"))
    with torch.no_grad():
        for start in range(0, L - 1, layers_per_chunk):
            sl = slice(start, min(L - 1, start + layers_per_chunk))
            left = FactoredMatrix(W_V[sl], W_O[sl])
            s = tl_scores(left, right, broadcast_dims=True)  # [c, H, L, H]
            out[sl] = s.float()
    src = torch.arange(L)[:, None, None, None]
    dst = torch.arange(L)[None, None, :, None]
    return torch.where((src < dst).expand(L, H, L, H), out, torch.full_like(out, float("nan")))
