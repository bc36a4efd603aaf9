"""A feature's logit effects: the tokens its decoder row promotes and suppresses most, directly.

For a feature's direction u (its decoder row through the final norm's gain and centring; the position's frozen
scale 1/σ_p > 0 only rescales) the effects are z = u W_U, and the k largest and k smallest entries of z are kept,
exactly: one product per ``chunk`` features, then one min/max pass over blocks of z (:func:`top_and_bottom`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["top_and_bottom", "top_and_bottom_logits"]


def top_and_bottom_logits(U: Tensor, W_U: Tensor, k: int, *, chunk: int = 256) -> tuple[Tensor, Tensor]:
    """ids, values [R, 2k]: the k largest then the k smallest entries of each row of U W_U (U [R, d], W_U [d, V]),
    largest first then smallest first."""
    ids, vals = [], []
    for c in range(0, len(U), chunk):
        i, v = top_and_bottom(U[c : c + chunk] @ W_U, k)
        ids.append(i)
        vals.append(v)
    return torch.cat(ids), torch.cat(vals)


def top_and_bottom(z: Tensor, k: int, block: int = 64) -> tuple[Tensor, Tensor]:
    """The ``k`` largest then the ``k`` smallest entries of each row of z [R, V] (ids, values [R, 2k]), exactly:
    the k largest lie in the k blocks (of ``block`` columns) with the largest maxima, so one min/max pass over z
    and a top-k among those blocks' entries (the columns past the last whole block always among them)."""
    R, V = z.shape
    nb = V // block
    if nb <= k:
        up, down = z.topk(k, dim=-1), z.topk(k, dim=-1, largest=False)
        return torch.cat([up.indices, down.indices], 1), torch.cat([up.values, down.values], 1)
    lo, hi = torch.aminmax(z[:, : nb * block].view(R, nb, block), dim=-1)
    tail = torch.arange(nb * block, V, device=z.device).expand(R, -1)
    out_i, out_v = [], []
    for ext, largest in ((hi, True), (lo, False)):
        blocks = ext.topk(k, dim=-1, largest=largest).indices  # [R, k]
        cand = (blocks[:, :, None] * block + torch.arange(block, device=z.device)).reshape(R, -1)
        cand = torch.cat([cand, tail], 1)
        best = z.gather(1, cand).topk(k, dim=-1, largest=largest)
        out_i.append(cand.gather(1, best.indices))
        out_v.append(best.values)
    return torch.cat(out_i, 1), torch.cat(out_v, 1)
