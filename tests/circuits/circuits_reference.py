"""Independent references for the circuits tests: transformer-lens's own composition maths, hooks.

``tl_composition_scores`` repeats ``TransformerBridge.all_composition_scores`` (TL 4.3,
``transformer_lens/model_bridge/transformer_bridge.py``): the same stacked weights, the same
KV-head expansion (``bridge._expand_kv_heads``, a repeat_interleave), the same SVD-collapsed
factors as ``transformer_lens.utilities.matrix.composition_scores`` — with the final product done
one source layer at a time, because the unchunked call broadcasts both collapsed factors to
[L, H, L, H, d_head, d_model] and was killed for lack of memory on smollm2-135m (>20 GB RSS).
Masked entries are NaN instead of TL's zeros.
"""

from __future__ import annotations

import torch
from transformer_lens import FactoredMatrix


def _tl_factors(bridge, mode: str):
    """The left (OV) and right FactoredMatrix of TransformerBridge.all_composition_scores, verbatim."""
    W_V = bridge._expand_kv_heads(bridge.W_V)  # repeat_interleave of the KV heads
    W_O = bridge.W_O
    W_Q = bridge.W_Q
    W_K = bridge._expand_kv_heads(bridge.W_K)
    left = FactoredMatrix(W_V, W_O)
    if mode == "Q":
        right = FactoredMatrix(W_Q, W_K.transpose(-2, -1))
    elif mode == "K":
        right = FactoredMatrix(W_Q, W_K.transpose(-2, -1)).T
    else:
        right = left
    return left, right


def tl_composition_scores(bridge, mode: str, *, src_layers=None) -> torch.Tensor:
    """TL's all_composition_scores maths, with only its final product chunked by source layer.

    ``transformer_lens.utilities.matrix.composition_scores`` collapses both factored matrices
    with TL's SVD (``collapse_l`` / ``collapse_r``), then forms every [d_head, d_head] product
    at once. Here the collapses (TL's own code, computed once, as in the unchunked call) are
    followed by the same product and norms one source layer at a time. Returns [L, H, L, H]
    (or [len(src_layers), H, L, H]) with NaN where the destination is not in a later layer.
    """
    left, right = _tl_factors(bridge, mode)
    with torch.no_grad():
        new_left = left.collapse_l()  # [L, H, d_head, d_model]
        new_right = right.collapse_r()  # [L, H, d_model, d_head]
        l_norms = new_left.norm(dim=[-2, -1])
        r_norms = new_right.norm(dim=[-2, -1])
        L = l_norms.shape[0]
        layers = range(L) if src_layers is None else list(src_layers)
        rows = []
        for l in layers:
            comp = (new_left[l][:, None, None] @ new_right[None]).norm(dim=[-2, -1])  # [H, L, H]
            s = comp / r_norms[None] / l_norms[l][:, None, None]
            s[:, : l + 1] = float("nan")
            rows.append(s.float())
    return torch.stack(rows)


def capture(model, tokens: torch.Tensor, names) -> dict:
    """Run the bridge on ``tokens`` and return detached copies of the named hook activations."""
    out: dict = {}

    def make(name):
        def fn(t, hook):
            out[name] = t.detach().clone()
            return t

        return fn

    with torch.no_grad(), model.bridge.hooks(fwd_hooks=[(n, make(n)) for n in names]):
        logits = model.bridge(tokens)
    out["logits"] = logits.detach()
    return out


def n_hooks(bridge) -> int:
    """How many forward hooks are attached to the bridge's hook points right now."""
    return sum(len(hp._forward_hooks) for hp in bridge.hook_dict.values())
