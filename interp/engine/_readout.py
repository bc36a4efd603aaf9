"""The logit readout: the final norm and the unembedding of the final residual stream, written once.

For a final residual x (one vector per row) the readout is

    N_f(x) = γ ⊙ centre(x) / σ + β        (RMSNorm: no centre, no β; the identity without a final norm)
    logits = N_f(x) W_U + b_U             (no b_U: none added; "b_U is zeros")
    capped = c · tanh(logits / c)         (models that soft-cap their logits, as Gemma 2 does; else the logits)

with σ recomputed from x (σ = sqrt(var(x) + ε), or sqrt(mean x² + ε)) or *frozen* at a given scale (a real
forward's, so that the readout is affine in x: direct effects, the frozen logit lens, the replacement model).
Post-norm encoders end in a norm inside their last block: their N_f is the identity. Every analysis that reads
logits off a final stream it computed (the metrics of patching, effects, edge attribution and circuit evaluation,
the logit lens, attribution graphs, interventions, faithfulness reruns) reads them here.
"""

from __future__ import annotations

from typing import Optional

import torch
from jaxtyping import Float
from torch import Tensor

from interp._norms import apply_frozen, norm_scale
from interp.models import Model, Weights

__all__ = ["final_norm", "readout", "soft_cap", "unembed", "unembedding"]


def final_norm(
    model: Model,
    x: Float[Tensor, "... d_model"],
    scale: Optional[Tensor] = None,
    *,
    weights: Optional[Weights] = None,
) -> tuple[Tensor, Tensor]:
    """(N_f(x), σ): the decoder's final norm applied to ``x``, with σ recomputed or frozen at ``scale``
    [..., 1]. ``weights``: the model's weights in another dtype (default ``model.weights``).

    Post-norm encoders and norm-free models have no final norm: N_f is the identity (σ = 1).
    """
    arch, w = model.arch, weights if weights is not None else model.weights
    if model.block.normed_stream or arch.norm == "none" or w.lnf_w is None:
        return x, torch.ones_like(x[..., :1])
    sigma = norm_scale(x, arch.norm, arch.norm_eps).to(x.dtype) if scale is None else scale.to(x.dtype)
    return apply_frozen(x, w.lnf_w, sigma, arch.norm, w.lnf_b), sigma


def soft_cap(logits: Tensor, cap: float) -> Tensor:
    """c · tanh(logits / c) for a soft-cap c > 0 (Gemma 2's final logits); the logits themselves for c = 0."""
    return torch.tanh(logits / cap) * cap if cap else logits


def unembed(y: Tensor, W_U: Tensor, b_U: Optional[Tensor], softcap: float = 0.0) -> Tensor:
    """logits = y W_U + b_U of normed final rows y (then c·tanh(logits / c) when ``softcap`` c > 0)."""
    out = y @ W_U
    if b_U is not None:
        out = out + b_U
    return soft_cap(out, softcap)


def unembedding(model: Model, *, weights: Optional[Weights] = None) -> tuple[Tensor, Tensor]:
    """(W_U [d_model, d_vocab], b_U [d_vocab]) with b_U zeros where the model has none — for readouts that
    take columns of the unembedding (a token's logit direction u = W_U[:, t] and its bias b_U[t])."""
    w = weights if weights is not None else model.weights
    W_U = w.need("W_U")
    b_U = torch.zeros(W_U.shape[1], dtype=W_U.dtype, device=W_U.device) if w.b_U is None else w.b_U
    return W_U, b_U


def readout(
    model: Model,
    x: Float[Tensor, "... d_model"],
    space: str = "logits",
    scale: Optional[Tensor] = None,
    *,
    weights: Optional[Weights] = None,
    capped: bool = True,
) -> Tensor:
    """The readout of final residuals ``x`` (module docstring): logits N_f(x) W_U + b_U, soft-capped where the
    model caps them (``capped=False``: the linear logits before the cap), or with ``space="hidden"`` the hidden
    state N_f(x). ``scale``: σ frozen [..., 1] (None: recomputed from x); ``weights``: the model's weights in
    another dtype (default ``model.weights``; ``x`` must have their dtype)."""
    y, _ = final_norm(model, x, scale, weights=weights)
    if space == "hidden":
        return y
    w = weights if weights is not None else model.weights
    return unembed(y, w.need("W_U"), w.b_U, model.arch.final_softcap if capped else 0.0)
