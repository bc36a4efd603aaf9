"""Top activating contexts: where in a set of texts a transcoder feature fires most.

For feature f of layer l, its activation at token t of a text is f(h2_t) = act(h2_t W_enc[f]ᵀ + b_enc[f]) with h2_t the
MLP's input there (the engine's forward; through the second norm). The top contexts are the k (text, token) pairs with
the largest activation over the texts, each shown as the tokens before it with the token itself marked. The viewer
of an attribution graph (:meth:`AttributionGraph.show`) takes the result as its ``contexts``.
"""

from __future__ import annotations

import heapq
from typing import Any, Sequence, Union

from torch import Tensor

from interp._validate import is_int
from interp.engine.internal import Engine
from interp.errors import ArgumentError
from interp.dictionaries._set import DictionarySet
from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder, check_layers, mlp_input
from interp.labels import Feature, parse
from interp.models import Model
from interp.stream.internal import as_batch, require_model

__all__ = ["top_activating_contexts"]


def _feature_ids(features: Any, transcoders: Sequence[Transcoder]) -> list[tuple[int, int]]:
    out = []
    for i, x in enumerate(features):
        if isinstance(x, str) and "@" not in x:
            x = x + "@*"  # "L3.F12": the feature at any position
        lab = parse(x) if isinstance(x, str) else x
        if isinstance(lab, tuple) and len(lab) == 2:
            lab = Feature(int(lab[0]), int(lab[1]), None)
        if not isinstance(lab, Feature):
            raise ArgumentError(
                f"features[{i}]={x!r} must be a feature label ('L3.F12@*'; a position is ignored) or (layer, feature)"
            )
        if not 0 <= lab.layer < len(transcoders) or not 0 <= lab.feature < transcoders[lab.layer].n_features:
            n = transcoders[lab.layer].n_features if 0 <= lab.layer < len(transcoders) else None
            raise ArgumentError(
                f"features[{i}]={x!r}: feature {lab.feature} of layer {lab.layer} does not exist "
                f"({len(transcoders)} layers; n_features={n})"
            )
        out.append((lab.layer, lab.feature))
    return list(dict.fromkeys(out))


def top_activating_contexts(
    model: Model,
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    texts: Union[Sequence[str], Tensor],
    features: Sequence[Union[str, Feature, tuple]],
    *,
    k: int = 5,
    before: int = 12,
) -> dict[str, list[str]]:
    """``{"L3.F12": [context, ...]}``: each feature's ``k`` contexts of largest activation over ``texts``, largest
    first, each the ``before`` tokens before the token and the token marked ``«token»``, then ``(activation)``
    (module docstring). ``texts``: strings, or token ids [n, T] (one text a row; a model without a tokenizer).
    ``features``: labels (``"L3.F12"``; a position is ignored) or (layer, feature); the
    keys are ``"L{layer}.F{feature}"``, which the graph viewer matches to every position of the feature. A
    :class:`CrossLayerTranscoder`'s feature of layer l is read by its encoder l (its activation is that encoder's; its
    decoders do not enter).
    """
    require_model(model)
    if isinstance(transcoders, CrossLayerTranscoder):  # its encoders read as the CLT reads (decoders do not enter)
        ds = DictionarySet.of(transcoders)
        transcoders = [ds.encoder(l) for l in ds.layers]
    if isinstance(texts, Tensor) and not texts.is_floating_point() and texts.ndim == 2 and len(texts):
        texts = [row[None] for row in texts]  # token ids [n, T]: each row one text (a model without a tokenizer)
    elif not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) for t in texts):
        raise ArgumentError(
            f"texts={type(texts).__name__} must be a non-empty list of strings or token ids (an int tensor [n, T])"
        )
    for name, v in (("k", k), ("before", before)):
        if not is_int(v) or v < (1 if name == "k" else 0):
            raise ArgumentError(f"{name}={v!r} must be an int ≥ {1 if name == 'k' else 0}")
    ids = _feature_ids(features, transcoders)
    if len(transcoders) != model.arch.n_layers:
        raise ArgumentError(
            f"transcoders has {len(transcoders)} entries; model {model.name!r} has {model.arch.n_layers} layers"
        )
    check_layers(transcoders)
    e = Engine.of(model)
    layers = sorted({l for l, _ in ids})
    heaps: dict[tuple[int, int], list[tuple[float, int, int]]] = {f: [] for f in ids}
    toks: list[list[int]] = []
    for ti, text in enumerate(texts):
        batch = as_batch(model, text)
        tokens = batch.tokens
        toks.append(tokens[0].tolist())
        cache = e.run(tokens, batch.attention_mask, capture={"resid_mid"})
        for l in layers:
            mids = cache.acts.get("resid_mid")
            h2 = mlp_input(e, cache.resid_pre[l], None if mids is None else mids[l], l)[0].float()
            tc = transcoders[l].to(device=h2.device, dtype=h2.dtype)
            f = tc.encode(h2)  # [n, F]
            for ll, fi in ids:
                if ll != l:
                    continue
                col = f[:, fi]
                vals, pos = col.topk(min(k, len(col)))
                for v, p in zip(vals.tolist(), pos.tolist()):
                    if v > 0:
                        item = (v, ti, p)
                        if len(heaps[(l, fi)]) < k:
                            heapq.heappush(heaps[(l, fi)], item)
                        else:
                            heapq.heappushpop(heaps[(l, fi)], item)
    tok = model.tokenizer
    dec = (lambda xs: tok.decode(xs)) if tok is not None else (lambda xs: " ".join(map(str, xs)))  # noqa: E731
    out: dict[str, list[str]] = {}
    for (l, fi), h in heaps.items():
        out[f"L{l}.F{fi}"] = [
            f"{dec(toks[ti][max(0, p - before) : p])}«{dec(toks[ti][p : p + 1])}» ({v:.4g})"
            for v, ti, p in sorted(h, reverse=True)
        ]
    return out
