"""The effective token embedding: each token's embedding after block 0's MLP, with no context.

A token's raw embedding row W_E[t] is not what later heads read: in most decoders block 0's MLP
writes a large, token-dependent vector into the stream first, and that is the "effective
embedding" the circuit literature reads full OV/QK circuits through (e.g. McDougall et al. 2023,
"Copy Suppression"; Gould et al. 2023, "Successor Heads"; some authors also pass it through block
0's attention as if the token attended to itself). Here, for the pre-norm and parallel blocks
(docs/math.md §1), with block 0's attention left out and no position embedding added:

    W_E^eff = W_E + MLP_0(N2_0(W_E))                    [d_vocab, d_model]

(row by row, with each row's own norm scale: N2_0 is the real, nonlinear norm, and MLP_0 the real
MLP with its biases and activation — gated MLPs act(x W_gate + b_gate) ⊙ (x W_in + b_in)). With
``fold_norms=True`` (the :mod:`interp.circuits` default) the result is then centred like every
other write of a LayerNorm model (W P; :mod:`interp.circuits._common`), so it drops into a full
OV circuit in place of W_E (``ov_circuit(..., full=True, embedding="effective")``).

Not defined here, and refused with UnsupportedOperationError: attention-only models (there is
no MLP: their effective embedding is W_E itself) and post-norm encoders (block 0's Add & Norm
mixes the attention into the stream before the MLP reads it).
"""

from __future__ import annotations


import torch
from jaxtyping import Float
from torch import Tensor

from interp._validate import check_bool, check_positive_int
from interp.circuits._common import _need_mlp, check_model, fold_write
from interp.engine.internal import Engine
from interp.errors import UnsupportedOperationError
from interp.models import Model

__all__ = ["EFFECTIVE_EMBEDDING", "effective_embedding"]

#: How the effective embedding is built, in words (for captions and labels).
EFFECTIVE_EMBEDDING = (
    "the effective token embedding W_E + MLP₀(N₂(W_E)): each token's embedding "
    "through block 0's MLP (block 0's attention and the position embedding left out)"
)


def effective_embedding(
    model: Model, *, fold_norms: bool = True, batch_size: int = 4096
) -> Float[Tensor, "d_vocab d_model"]:
    """W_E + MLP_0(N2_0(W_E)) [d_vocab, d_model]: the token embedding through block 0's MLP.

    Block 0's attention and the position embedding are left out (see the module docstring);
    ``fold_norms=True`` centres the result for LayerNorm models, as the circuits centre W_E.
    Rows are computed ``batch_size`` tokens at a time (the MLP's hidden layer is
    [batch_size, d_mlp]). UnsupportedOperationError for attention-only and post-norm models.
    """
    check_model(model)
    check_bool("fold_norms", fold_norms)
    check_positive_int("batch_size", batch_size)
    a, w = model.arch, model.weights
    if a.n_experts:
        _need_mlp(model)
    block = model.block
    if not block.has_mlp:  # no MLP sublayer, or its weights are empty (a tracr program without MLPs)
        raise UnsupportedOperationError(
            f"model {model.name!r} is attention-only: it has no MLP, so its effective embedding is the raw W_E"
        )
    if block.normed_stream:
        raise UnsupportedOperationError(
            f"model {model.name!r} is post-norm (block: {block.layout}): block 0's Add & Norm "
            "mixes its attention into the stream before the MLP reads it, so an effective embedding without "
            "attention is not defined; use the raw W_E"
        )
    e = Engine.of(model)  # the MLP as every forward runs it: its read norm, the MLP, its output norm
    W_E = w.W_E
    out = torch.empty_like(W_E)
    with torch.no_grad():
        for i in range(0, W_E.shape[0], batch_size):
            x = W_E[i : i + batch_size]  # [batch, d_model]
            m = e.joined(0, e.mlp(0, e.read_norm(x, 0, "mlp")), "mlp")
            out[i : i + batch_size] = x + m
    return fold_write(model, out, fold_norms)
