"""Norm linearisation with the per-token scale frozen from the forward pass (docs/math.md §3).

    LayerNorm(x) = γ ⊙ (x − mean(x)) / σ + β,   σ = sqrt(var(x) + ε)
    RMSNorm(x)   = γ ⊙ x / σ,                   σ = sqrt(mean(x²) + ε)

With σ read off the actual input (and then held fixed) both are affine in x, so a sum of
writes x = Σᵢ wᵢ maps term by term: N(x) = Σᵢ γ ⊙ centre(wᵢ)/σ + β, exactly for that pass.

Precision (docs/math.md, "Precision"): σ is reduced in at least float32 whatever the input's dtype (as the
Hugging Face norms do), and a decomposition of a half-precision model accumulates its terms in float32
(:func:`accumulate_dtype`): its only error is then the model's own rounding, not the decomposition's.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

__all__ = ["accumulate_dtype", "apply_frozen", "frozen_direction", "norm", "norm_scale", "norm_vjp"]

_HALF = (torch.float16, torch.bfloat16)


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype decomposition maths accumulates in: float32 for half precision, else ``dtype`` itself."""
    return torch.float32 if dtype in _HALF else dtype


def norm_scale(x: Float[Tensor, "... d_model"], kind: str, eps: float) -> Float[Tensor, "... 1"]:
    """σ of the norm's actual input, reduced and returned in at least fp32 (as the HF norms compute it); the one
    implementation (the engine's ``Engine.norm_scale`` rounds it to its input's dtype)."""
    xf = x.float() if x.dtype in _HALF else x
    if kind == "layernorm":
        var = xf.var(dim=-1, keepdim=True, unbiased=False)
    elif kind == "rmsnorm":
        var = xf.pow(2).mean(dim=-1, keepdim=True)
    else:
        return torch.ones_like(xf[..., :1])
    return torch.sqrt(var + eps)


def apply_frozen(
    terms: Float[Tensor, "... d_model"],
    gain: Optional[Float[Tensor, " d_model"]],
    scale: Float[Tensor, "... 1"],
    kind: str,
    bias: Optional[Float[Tensor, " d_model"]] = None,
) -> Float[Tensor, "... d_model"]:
    """The norm with σ frozen: γ ⊙ centre(t) / σ, the linear part (no β: a decomposition keeps β as its own term);
    with ``bias`` the whole norm of one stream, γ ⊙ centre(t) / σ + β (β only for LayerNorm: RMSNorm has none).
    ``gain`` None: γ = 1. The one implementation, for decompositions and the frozen replacement model.

    ``terms`` may carry leading term axes: [n_terms, batch, pos, d_model] against a scale of
    [batch, pos, 1] broadcasts.
    """
    if kind == "none":
        return terms
    if kind == "layernorm":
        terms = terms - terms.mean(dim=-1, keepdim=True)
    y = terms / scale.to(terms.dtype)
    if gain is not None:
        y = y * gain.to(terms.dtype)
    if bias is not None and kind == "layernorm":
        y = y + bias.to(terms.dtype)
    return y


def frozen_direction(
    direction: Float[Tensor, "... d_model"], gain: Float[Tensor, " d_model"], kind: str
) -> Float[Tensor, "... d_model"]:
    """The direction u' with  apply_frozen(w)·u = (w·u')/σ  for every write w.

    LayerNorm: u' = centre(γ ⊙ u) (centring is self-adjoint); RMSNorm: u' = γ ⊙ u.
    """
    if kind == "none":
        return direction
    v = direction * gain
    if kind == "layernorm":
        v = v - v.mean(dim=-1, keepdim=True)
    return v


def norm(x: Tensor, gain: Optional[Tensor], bias: Optional[Tensor], kind: str, eps: float) -> Tensor:
    """N(x) over the last axis for norm ``kind`` ("layernorm" | "rmsnorm" | "none") with epsilon ``eps``:
    LayerNorm γ ⊙ (x − μ)/σ + β, RMSNorm γ ⊙ x/σ (half precision: computed in fp32). Safe under autograd (nothing
    autograd keeps is changed in place): the gradient passes use it too."""
    if kind == "none":
        return x
    if x.dtype in (torch.float32, torch.float64):  # the fused kernels
        d = (x.shape[-1],)
        if kind == "layernorm":
            return F.layer_norm(x, d, gain, bias, eps)
        # RMSNorm in three passes (one fused reduction): γ ⊙ x / sqrt(‖x‖²/d + ε)
        r = torch.rsqrt(torch.linalg.vector_norm(x, 2, dim=-1, keepdim=True).square() / d[0] + eps)
        return (x * r) if gain is None else (x * r).mul_(gain)
    xf = x.float()
    if kind == "layernorm":
        xf = xf - xf.mean(-1, keepdim=True)
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    y = y if gain is None else y * gain
    return y + bias if (bias is not None and kind == "layernorm") else y


def norm_vjp(
    g: Tensor,
    x: Optional[Tensor],
    gain: Optional[Tensor],
    *,
    kind: str,
    eps: float,
    frozen: bool,
    sigma: Optional[Tensor] = None,
) -> Tensor:
    """Jᵀg for the norm N at input ``x`` (``g`` at N's output; leading axes broadcast against ``x``).

    LayerNorm: Jᵀg = (C(γ⊙g) − x̂ (x̂·γ⊙g)/d)/σ with x̂ = C x/σ; RMSNorm: (γ⊙g − x̂ (x̂·γ⊙g)/d)/σ with
    x̂ = x/σ. ``frozen`` drops the x̂ term (σ held fixed): γ⊙C(g)/σ, the ledger's map; a frozen map may be
    given its σ [..., 1] (a forward's kept scale) instead of ``x``.
    """
    if kind == "none":
        return g
    if sigma is None or not frozen:
        assert x is not None, "norm_vjp needs x (or, frozen, its sigma)"
        sigma = norm_scale(x, kind, eps).to(x.dtype)
    u = g * gain if gain is not None else g
    if frozen:
        if kind == "layernorm":
            u = u - u.mean(-1, keepdim=True)
        return u / sigma
    assert x is not None
    xh = (x - x.mean(-1, keepdim=True) if kind == "layernorm" else x) / sigma
    proj = (xh * u).mean(-1, keepdim=True)
    if kind == "layernorm":
        u = u - u.mean(-1, keepdim=True)
    return (u - xh * proj) / sigma
