"""What a trace can keep beyond the residual writes: the attention patterns and per-head q, k, v.

A head's pattern is A^h = softmax(q_h k_gᵀ / √d_head + mask) (g = the KV head query head h reads
under GQA), and its output is z_h = A^h v_g. ``trace(..., keep=...)`` keeps, per layer:

    "patterns"  blocks.{l}.attn.hook_pattern   [batch, n_heads, query_pos, key_pos]
    "q"         the queries the scores use      [batch, pos, n_heads, d_head]     (after RoPE, if rotary)
    "k"         the keys the scores use         [batch, pos, n_kv_heads, d_head]  (after RoPE, if rotary)
    "v"         blocks.{l}.attn.hook_v          [batch, pos, n_kv_heads, d_head]  (b_V included)

so that q·kᵀ/√d_head, masked and softmaxed, is the pattern, and the pattern times v is hook_z.
"""

from __future__ import annotations

from typing import Any, Sequence

from interp.errors import ArgumentError

__all__ = ["KEEP", "check_keep", "keep_hooks"]

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


def keep_hooks(model: Any, keep: Sequence[str]) -> dict[str, list[str]]:
    """{keep item: [hook name of layer 0, 1, ...]} for this model's bridge."""
    hooks = model.bridge.hook_dict
    out: dict[str, list[str]] = {}
    for item in keep:
        names = []
        for l in range(model.arch.n_layers):
            base = f"blocks.{l}.attn."
            if item == "patterns":
                name = base + "hook_pattern"
            elif item in ("q", "k"):
                rot = base + f"hook_rot_{item}"
                name = rot if (model.arch.positional == "rotary" and rot in hooks) else base + f"hook_{item}"
            else:
                name = base + "hook_v"
            if name not in hooks:
                raise ArgumentError(f"keep={tuple(keep)!r}: this model's bridge has no hook {name!r} for {item!r}")
            names.append(name)
        out[item] = names
    return out
