"""What a trace can keep beyond the residual writes: the attention patterns and per-head q, k, v.

A head's pattern is A^h = softmax(q_h k_gᵀ / √d_head + mask) (g = the KV head query head h reads
under GQA), and its output is z_h = A^h v_g. ``trace(..., keep=...)`` keeps, per layer:

    "patterns"  blocks.{l}.attn.hook_pattern   [batch, n_heads, query_pos, key_pos]
    "q"         the queries the scores use      [batch, pos, n_heads, d_head]     (after QK-norm and RoPE)
    "k"         the keys the scores use         [batch, pos, n_kv_heads, d_head]  (after RoPE, if rotary)
    "v"         blocks.{l}.attn.hook_v          [batch, pos, n_kv_heads, d_head]  (b_V included)

so that q·kᵀ/√d_head, masked and softmaxed, is the pattern, and the pattern times v is hook_z.
q and k are kept where the engine's forward scores them (``hook_rot_q`` / ``hook_rot_k``: after the QK-norm
and the rotation). A trace saved by an earlier version kept the bridge's ``hook_q`` / ``hook_k`` (before the
rotation, QK-normed ones as ``hook_q_normed``) with the pass's ``hook_cos`` / ``hook_sin``; :func:`kept_tensor`
rotates those on reading, through :func:`interp.engine.internal.apply_rotary`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from interp.errors import ArgumentError
from interp.engine.internal import apply_rotary, require_capabilities
from interp.models import Model

__all__ = ["KEEP", "check_keep", "keep_hooks", "kept_tensor"]

KEEP = ("patterns", "q", "k", "v")


def check_keep(keep: Any) -> tuple[str, ...]:
    """``keep`` as a tuple of distinct items of :data:`KEEP` (a single string is one item)."""
    if keep is None:
        return ()
    items = (keep,) if isinstance(keep, str) else keep
    try:
        items = tuple(items)
    except TypeError:
        raise ArgumentError(f"keep={keep!r} must be a tuple of items from {KEEP}") from None
    bad = [k for k in items if not isinstance(k, str) or k not in KEEP]
    if bad:
        raise ArgumentError(f"keep={keep!r} has {bad[0]!r}; allowed items: {KEEP}")
    return tuple(dict.fromkeys(items))


_HOOK = {"patterns": "hook_pattern", "q": "hook_rot_q", "k": "hook_rot_k", "v": "hook_v"}


def keep_hooks(model: Model, keep: Sequence[str]) -> dict[str, list[str]]:
    """{keep item: [hook name of layer 0, 1, ...]}: the engine's points (:func:`interp.engine.internal.read_forward`)
    where the pattern, q and k as the scores use them (QK-normed, rotated) and v are."""
    if {"q", "k"} & set(keep):  # the kept q and k must give the pattern by softmax(q kᵀ · scale)
        require_capabilities(model, "trace(keep=('q', 'k'))", "attn_softcap")
    return {item: [f"blocks.{l}.attn.{_HOOK[item]}" for l in range(model.arch.n_layers)] for item in keep}


def kept_tensor(
    acts: Mapping[str, Tensor], kept: Mapping[str, list[str]], item: str, *, interleaved: bool = False, d_head: int = 0
) -> Tensor:
    """A kept item stacked over layers. A trace saved by an earlier version (module docstring) holds q and k before
    the rotation, rotated here, and an OLMo 2 QK-norm over the whole projection unsplit [b, pos, n·d_head], split
    here into heads of ``d_head``."""
    hooks = kept.get(item)
    if not hooks:
        raise ArgumentError(
            f"this trace did not keep {item!r}; trace again with keep=({item!r},) (allowed items: {', '.join(KEEP)})"
        )
    xs = [acts[h] for h in hooks]
    if hooks[0].endswith("_normed"):  # an earlier version's trace: QK-normed q and k heads-first, [b, n, pos, d]
        xs = [x.unflatten(-1, (-1, d_head)) if x.dim() == 3 else x.transpose(1, 2) for x in xs]
    if item in ("q", "k") and "cos" in kept:
        xs = [
            apply_rotary(x, acts[c][:, :, None], acts[s][:, :, None], interleaved=interleaved)
            for x, c, s in zip(xs, kept["cos"], kept["sin"])
        ]
    return torch.stack(xs)
