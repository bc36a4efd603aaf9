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

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["norm_scale", "apply_frozen", "frozen_direction", "accumulate_dtype"]

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
    gain: Float[Tensor, "d_model"],
    scale: Float[Tensor, "... 1"],
    kind: str,
) -> Float[Tensor, "... d_model"]:
    """The linear part of the norm with σ frozen: γ ⊙ centre(t) / σ (no β; β is its own term).

    ``terms`` may carry leading term axes: [n_terms, batch, pos, d_model] against a scale of
    [batch, pos, 1] broadcasts.
    """
    if kind == "none":
        return terms
    if kind == "layernorm":
        terms = terms - terms.mean(dim=-1, keepdim=True)
    return terms / scale.to(terms.dtype) * gain.to(terms.dtype)


def frozen_direction(
    direction: Float[Tensor, "... d_model"], gain: Float[Tensor, "d_model"], kind: str
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
