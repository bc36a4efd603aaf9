"""Random per-layer transcoders for tests (never part of the package): small Gaussian weights, so a fair
share of features is active and the error nodes are large — the graph must close whatever they are."""

from __future__ import annotations

import torch

from interp.features import CrossLayerTranscoder, Transcoder


def random_transcoders(
    model,
    n_features: int = 32,
    seed: int = 0,
    *,
    activation: str = "relu",
    skip: bool = False,
    b_dec: bool = True,
    k: int = 3,
) -> list[Transcoder]:
    """One random :class:`Transcoder` per layer of ``model`` (float32; ``skip`` adds W_skip, ``b_dec=False`` zeroes
    b_dec; "jumprelu" thresholds are 0.1, "topk" keeps ``k``)."""
    g = torch.Generator().manual_seed(seed)
    d, F = model.arch.d_model, n_features
    out = []
    for _ in range(model.arch.n_layers):
        W_enc = torch.randn(F, d, generator=g) / d**0.5
        b_enc = torch.randn(F, generator=g) * 0.1
        W_dec = torch.randn(F, d, generator=g) / F**0.5
        bd = torch.randn(d, generator=g) * 0.1 if b_dec else torch.zeros(d)
        W_skip = torch.randn(d, d, generator=g) * 0.05 if skip else None
        out.append(
            Transcoder(
                W_enc,
                b_enc,
                W_dec,
                bd,
                W_skip=W_skip,
                activation=activation,
                threshold=torch.full((F,), 0.1) if activation == "jumprelu" else None,
                k=k if activation == "topk" else None,
            )
        )
    return out


def random_clt(
    model=None,
    n_features: int = 16,
    seed: int = 0,
    *,
    n_layers: int | None = None,
    d_model: int | None = None,
    activation: str = "relu",
    skip: bool = False,
    k: int = 3,
    dtype=torch.float32,
) -> CrossLayerTranscoder:
    """A random :class:`CrossLayerTranscoder` with an encoder at every layer of ``model`` (or ``n_layers`` of width
    ``d_model``): the same scales as :func:`random_transcoders`, each decoder to a later layer too; "jumprelu"
    thresholds 0.1, "batchtopk" θ 0.05 per layer, "topk" keeps ``k``; ``skip`` adds W_skip."""
    g = torch.Generator().manual_seed(seed)
    L = model.arch.n_layers if model is not None else n_layers
    d = model.arch.d_model if model is not None else d_model
    F = n_features
    r = lambda *shape, s=1.0: (torch.randn(*shape, generator=g, dtype=torch.float64) * s).to(dtype)  # noqa: E731
    thr = {"jumprelu": torch.full((L, F), 0.1, dtype=dtype), "batchtopk": torch.full((L,), 0.05, dtype=dtype)}
    return CrossLayerTranscoder(
        r(L, F, d, s=d**-0.5),
        r(L, F, s=0.1),
        tuple(r(F, L - l, d, s=F**-0.5) for l in range(L)),
        r(L, d, s=0.1),
        W_skip=r(L, d, d, s=0.05) if skip else None,
        activation=activation,
        threshold=thr.get(activation),
        k=k if activation == "topk" else None,
        layers=tuple(range(L)) if model is not None else None,
    )
