"""A feature's logit effects: the tokens its decoder row promotes and suppresses most, directly.

For a feature's direction u (its decoder row through the final norm's gain and centring; the position's frozen
scale 1/σ_p > 0 only rescales) the effects are z = u W_U, and the k largest and k smallest entries of z are kept,
exactly: one product per ``chunk`` features, then one min/max pass over blocks of z (:func:`top_and_bottom`).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from interp._norms import apply_frozen
from interp._validate import is_int
from interp.errors import ArgumentError
from interp.labels import Feature, parse
from interp.dictionaries._transcoder import CrossLayerTranscoder

__all__ = ["feature_logit_effects", "top_and_bottom", "top_and_bottom_logits"]


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


def _pair(x: Any, i: int) -> tuple[int, int]:
    """(layer, feature) of a feature label ("L3.F12", any position ignored) or a (layer, feature) pair."""
    if isinstance(x, str):
        lab = parse(x if "@" in x else x + "@*")
        if isinstance(lab, Feature):
            return lab.layer, lab.feature
    elif isinstance(x, tuple) and len(x) == 2 and all(is_int(v) for v in x):
        return int(x[0]), int(x[1])
    raise ArgumentError(f"features[{i}]={x!r} must be a feature label ('L3.F12') or a (layer, feature) pair of ints")


def feature_logit_effects(model: Any, dicts: Any, features: Sequence[tuple[int, int]], k: int = 5) -> dict[str, Any]:
    """``{"L3.F12": [(token, effect), ...]}``: each feature's ``k`` most promoted then ``k`` most suppressed tokens,
    the effects z = u W_U of its direction u — its decoder row (a cross-layer transcoder's feature: the sum of its
    writes at every layer, as they all reach the final stream) through the final norm's gain and centring, the
    position's scale 1/σ left out (module docstring). ``dicts``: {model layer: dictionary with ``W_dec`` [F, d]} or a
    :class:`~interp.features.CrossLayerTranscoder`; ``features``: (model layer, feature) pairs or feature labels
    (``"L3.F12"``)."""
    w = model.weights
    W_U = w.need("W_U")
    features = [_pair(x, i) for i, x in enumerate(features)]
    rows = []
    for i, (l, f) in enumerate(features):
        try:
            if isinstance(dicts, CrossLayerTranscoder):
                rows.append(dicts.W_dec[dicts.model_layers.index(l)][f].sum(0))
            else:
                rows.append(dicts[l].W_dec[f])
        except (IndexError, KeyError, ValueError):
            raise ArgumentError(f"features[{i}]=L{l}.F{f}: the dictionaries have no feature {f} at layer {l}") from None
    if not rows:
        return {}
    with torch.no_grad():
        U = torch.stack(rows).to(device=W_U.device, dtype=W_U.dtype)
        one = torch.ones((), dtype=W_U.dtype, device=W_U.device)
        U = apply_frozen(U, w.lnf_w, one, model.arch.norm)
        ids, vals = top_and_bottom_logits(U, W_U, min(k, int(W_U.shape[1])))
    tok = model.tokenizer
    name = (lambda i: tok.decode([i])) if tok is not None else str  # noqa: E731
    return {
        f"L{l}.F{f}": [(name(int(i)), float(v)) for i, v in zip(ids[r].tolist(), vals[r].tolist())]
        for r, (l, f) in enumerate(features)
    }
