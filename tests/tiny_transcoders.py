"""Random per-layer transcoders for tests (never part of the package): small Gaussian weights, so a fair
share of features is active and the error nodes are large — the graph must close whatever they are."""

from __future__ import annotations

import torch

from interp.features import Transcoder


def random_transcoders(model, n_features: int = 32, seed: int = 0, *, activation: str = "relu", skip: bool = False,
                       b_dec: bool = True, k: int = 3) -> list[Transcoder]:
    """One random :class:`Transcoder` per layer of ``model`` (float32; ``skip`` adds W_skip, ``b_dec=False`` zeroes
    b_dec; "jumprelu" thresholds are 0.1, "topk" keeps ``k``)."""
    g = torch.Generator().manual_seed(seed)
    d, F = model.arch.d_model, n_features
    out = []
    for _ in range(model.arch.n_layers):
        W_enc = torch.randn(F, d, generator=g) / d ** 0.5
        b_enc = torch.randn(F, generator=g) * 0.1
        W_dec = torch.randn(F, d, generator=g) / F ** 0.5
        bd = torch.randn(d, generator=g) * 0.1 if b_dec else torch.zeros(d)
        W_skip = torch.randn(d, d, generator=g) * 0.05 if skip else None
        out.append(Transcoder(W_enc, b_enc, W_dec, bd, W_skip=W_skip, activation=activation,
                              threshold=torch.full((F,), 0.1) if activation == "jumprelu" else None,
                              k=k if activation == "topk" else None))
    return out
