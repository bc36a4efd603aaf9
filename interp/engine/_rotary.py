"""The block maths every forward in interp shares: RoPE in either layout and which keys a query sees.

RoPE rotates each pair of query/key coordinates by the angle t·θ_i of the position t,

    (x_a, x_b) ↦ (x_a cos tθ_i − x_b sin tθ_i,  x_b cos tθ_i + x_a sin tθ_i),

the pairs being the two halves of the first ``rotary_dim`` coordinates or adjacent coordinates
(``ArchInfo.rotary_interleaved``); the tables come from :func:`interp.models.internal.rotary_tables`. A query at t
sees key s when s ≤ t (causal), and with a sliding window w also s > t − w.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["allowed_keys", "apply_rotary"]


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
        rot = torch.cat((-xr[..., rd // 2 :], xr[..., : rd // 2]), dim=-1)
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
