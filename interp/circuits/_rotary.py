"""Rotary position embeddings folded into the QK circuit for a query/key pair Δ positions apart.

Hugging Face's RoPE (Llama, GPT-NeoX; Su et al. 2021, "RoFormer" §3.4) rotates the first
``rotary_dim`` coordinates of each query and key (NeoX: ``rotary_dim = rotary_pct · d_head``;
the remaining coordinates pass through) with the *rotate_half* layout: coordinate t pairs with
t + rotary_dim/2 (not with t+1 as in GPT-J's interleaved layout), and

    rope(x, p) = x ⊙ cos(p θ) + rotate_half(x) ⊙ sin(p θ),   rotate_half([x₁, x₂]) = [−x₂, x₁],
    θ = [θ₀ … θ_{r/2−1}, θ₀ … θ_{r/2−1}],  θ_i = inv_freq_i (base^(−2i/r) for default RoPE),

times ``attention_scaling`` (1 for default RoPE). In the row convention rope(x, p) = x G(p) with
G(p) a block rotation, so a query at position i and a key at position j = i − Δ score

    rope(q, i) · rope(k, j) = q G(i) G(j)ᵀ kᵀ = q M_Δ kᵀ,   M_Δ = G(Δ) G(0)ᵀ

(G(i)G(j)ᵀ depends on i − j only). M_Δ is a d_head × d_head matrix; the rotary QK circuit is
W_Q M_Δ W_Kᵀ, still factored. Frequencies come from the model's HF config (``rope_parameters``:
``rope_theta``, ``rope_type``, ``partial_rotary_factor``); non-default RoPE types use
transformers' own ``ROPE_INIT_FUNCTIONS`` (sequence-length-dependent types such as "dynamic" are
taken at their initial frequencies).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from interp._validate import check_int
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.models import Model

__all__ = ["rope_frequencies", "rope_matrix", "relative_rotation"]


def _hf_config(model: Model) -> Any:
    hf = getattr(model.bridge, "original_model", None)
    cfg = getattr(hf, "config", None)
    if cfg is None:
        raise UnsupportedOperationError(
            f"model {model.name!r} has no Hugging Face config to read its RoPE frequencies from"
        )
    return cfg


def rope_frequencies(model: Model, layer: int = 0) -> tuple[Float[Tensor, " half"], float]:
    """(inv_freq [rotary_dim/2] float64, attention_scaling) of ``layer`` as Hugging Face computes them (a
    model with a RoPE per layer type, Gemma 3, keys its ``rope_parameters`` by the layer's type)."""
    arch = model.arch
    if arch.positional != "rotary":
        raise ArgumentError(
            f"rel_pos was given but model {model.name!r} is not rotary (arch.positional={arch.positional!r}); "
            "rel_pos only applies to RoPE models (Llama, GPT-NeoX); leave rel_pos=None"
        )
    if arch.rotary_interleaved:
        raise UnsupportedOperationError(
            f"model {model.name!r} rotates adjacent pairs (GPT-J layout); rel_pos circuits are built for the "
            "rotate-half layout only"
        )
    cfg = _hf_config(model)
    params = dict(getattr(cfg, "rope_parameters", None) or {})
    types: Any = getattr(cfg, "layer_types", None)
    if types is not None and types[layer] in params:  # one set of RoPE parameters per layer type
        params = dict(params[types[layer]])
    rope_type = params.get("rope_type", params.get("type", "default"))
    r = arch.rotary_dim
    if rope_type == "default":
        base = params.get("rope_theta", getattr(cfg, "rope_theta", None))
        if base is None:
            raise UnsupportedOperationError(f"model {model.name!r}: no rope_theta in its config")
        inv = 1.0 / (float(base) ** (torch.arange(0, r, 2, dtype=torch.float64, device="cpu") / r))
        return inv, 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    fn = ROPE_INIT_FUNCTIONS.get(str(rope_type))
    if fn is None:
        raise UnsupportedOperationError(f"model {model.name!r} uses rope_type={rope_type!r}, unknown to transformers")
    by_type = types is not None and "layer_type" in inspect.signature(fn).parameters
    inv, scaling = fn(cfg, "cpu", layer_type=types[layer]) if by_type else fn(cfg, "cpu")
    return inv.to(torch.float64), float(scaling)


def rope_matrix(inv_freq: Tensor, scaling: float, d_head: int, pos: int) -> Float[Tensor, "d_head d_head"]:
    """G(pos) with rope(x, pos) = x G(pos) for a row vector x [d_head] (rotate_half layout)."""
    r = 2 * inv_freq.shape[0]
    half = r // 2
    ang = pos * inv_freq  # [half]
    cos, sin = torch.cos(ang) * scaling, torch.sin(ang) * scaling
    G = torch.eye(d_head, dtype=torch.float64, device=inv_freq.device)
    idx = torch.arange(half, device=inv_freq.device)
    # rope(x)_t     = x_t cos − x_{t+h} sin      (t < h)
    # rope(x)_{t+h} = x_{t+h} cos + x_t sin
    # so in x G: G[t, t] = cos, G[t+h, t] = −sin, G[t, t+h] = sin, G[t+h, t+h] = cos.
    G[idx, idx] = cos
    G[idx + half, idx + half] = cos
    G[idx + half, idx] = -sin
    G[idx, idx + half] = sin
    return G


def relative_rotation(model: Model, rel_pos: Any, layer: int = 0) -> Float[Tensor, "d_head d_head"]:
    """M_Δ = G(Δ) G(0)ᵀ (float64) at ``layer``: q M_Δ kᵀ is the score of a query Δ positions after its key."""
    check_int("rel_pos", rel_pos)  # query position minus key position
    inv, scaling = rope_frequencies(model, layer)
    n_ctx = model.arch.n_ctx
    if not -n_ctx < rel_pos < n_ctx:
        raise ArgumentError(f"rel_pos={rel_pos} is outside the model's context (|rel_pos| < n_ctx={n_ctx})")
    dh = model.arch.d_head
    return rope_matrix(inv, scaling, dh, rel_pos) @ rope_matrix(inv, scaling, dh, 0).T
