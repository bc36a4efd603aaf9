"""The rotary tables of a loaded model: cos and sin of every position, in the layout its ArchInfo says.

RoPE rotates each pair of query/key coordinates by the angle t·θ_i of the position t:

    (x_a, x_b) ↦ (x_a cos tθ_i − x_b sin tθ_i,  x_b cos tθ_i + x_a sin tθ_i)

with the pairs either the two halves of the first ``rotary_dim`` coordinates (Hugging Face's Llama, NeoX,
Qwen, Mistral, Gemma, Phi-3: ``rotate_half``) or adjacent coordinates (2i, 2i+1) (GPT-J, the toys:
``ArchInfo.rotary_interleaved``). The tables are read from the model's own module — its θ, scaling and
partial factor included — never recomputed: halves layout ``[cos θ_0…θ_{r/2−1} | same]``, adjacent layout
``[cos θ_0, cos θ_0, cos θ_1, …]``. This is the one place that knows where each family keeps them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from interp.errors import UnsupportedArchitectureError

__all__ = ["allowed_keys", "apply_rotary", "rotary_tables"]


def rotary_tables(model: Any, n: int) -> tuple[Tensor, Tensor]:
    """(cos, sin) [n, rotary_dim] for positions 0…n−1 of ``model`` (an interp Model), on its device and dtype."""
    hf = model.bridge.original_model
    dev, dt = model.device, model.dtype
    mods = {type(m).__name__: m for m in hf.modules()}
    if "NativeRotary" in mods:  # the toys: adjacent pairs, tables cached by the module
        cos, sin = mods["NativeRotary"].cos_cached[:n], mods["NativeRotary"].sin_cached[:n]
    elif "GPTJAttention" in mods:  # GPT-J: one buffer [max_pos, rotary_dim] = [sin | cos] per frequency
        table = mods["GPTJAttention"].embed_positions[:n]
        sin_h, cos_h = table.chunk(2, dim=-1)
        cos, sin = cos_h.repeat_interleave(2, dim=-1), sin_h.repeat_interleave(2, dim=-1)
    else:
        rot = [m for name, m in mods.items() if name.endswith("RotaryEmbedding")]
        if not rot:
            raise UnsupportedArchitectureError(f"model {model.name!r} is rotary but has no rotary module")
        x = torch.zeros(1, n, model.arch.d_model, device=dev, dtype=dt)
        with torch.no_grad():
            cos, sin = rot[0](x, torch.arange(n, device=dev)[None])
        cos, sin = cos[0], sin[0]
    return cos.to(dev, dt), sin.to(dev, dt)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, *, interleaved: bool) -> Tensor:
    """RoPE on the first ``rotary_dim`` coordinates of ``x`` [..., d_head] (the rest pass through), with
    ``cos``/``sin`` [..., rotary_dim] broadcastable to them, in the layout :func:`rotary_tables` gives:

        halves:        rope(x) = [x₁ cos − x₂ sin,  x₂ cos + x₁ sin]      (x₁ | x₂ the two halves)
        adjacent pairs: the same for each pair (x_{2i}, x_{2i+1})

    Written straight into one new tensor (no rotate-half temporary). Every forward in interp rotates
    through this function."""
    rd = cos.shape[-1]
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return _apply_rotary_autograd(x, cos, sin, interleaved=interleaved)
    out = torch.empty(torch.broadcast_shapes(x.shape, (*cos.shape[:-1], x.shape[-1])), dtype=x.dtype, device=x.device)
    if rd < x.shape[-1]:
        out[..., rd:] = x[..., rd:]
    if interleaved:
        a, b, o1, o2 = x[..., 0:rd:2], x[..., 1:rd:2], out[..., 0:rd:2], out[..., 1:rd:2]
        c, s = cos[..., 0::2].to(x.dtype), sin[..., 0::2].to(x.dtype)
    else:
        h = rd // 2
        a, b, o1, o2 = x[..., :h], x[..., h:rd], out[..., :h], out[..., h:rd]
        c, s = cos[..., :h].to(x.dtype), sin[..., :h].to(x.dtype)
    torch.mul(a, c, out=o1)
    o1.addcmul_(b, s, value=-1.0)
    torch.mul(b, c, out=o2)
    o2.addcmul_(a, s)
    return out


def _apply_rotary_autograd(x: Tensor, cos: Tensor, sin: Tensor, *, interleaved: bool) -> Tensor:
    """:func:`apply_rotary` out of differentiable ops (the gradient passes use it): x cos + rot(x) sin."""
    rd = cos.shape[-1]
    xr, xp = x[..., :rd], x[..., rd:]
    if interleaved:
        rot = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    else:
        rot = torch.cat((-xr[..., rd // 2:], xr[..., : rd // 2]), dim=-1)
    out = xr * cos.to(x.dtype) + rot * sin.to(x.dtype)
    return torch.cat([out, xp.expand(*out.shape[:-1], xp.shape[-1])], dim=-1) if xp.shape[-1] else out


def allowed_keys(n_queries: int, n_keys: int, *, causal: bool, window: int = 0, device: Any = None) -> Tensor:
    """[n_queries, n_keys] bool: the last ``n_queries`` of ``n_keys`` positions may attend key s — every s
    (bidirectional), s ≤ t (causal) and, with a sliding ``window`` w, t − w < s ≤ t (Mistral, Qwen 2, the
    local layers of Gemma 2/3)."""
    t = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]
    s = torch.arange(n_keys, device=device)[None, :]
    ok = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    if causal:
        ok = ok & (s <= t)
    if window:
        ok = ok & (s > t - window) & (s < t + window)
    return ok
