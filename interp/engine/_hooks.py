"""The engine's forward read at transformer-lens's hook names: one walk, each named tensor handed to its function
as the walk produces it (so a caller keeps one position, or a projection, and nothing larger).

The names, for layer l (the bridge's names for the same points; docs/architecture.md "What runs where"):

    embed.hook_out, pos_embed.hook_out, token_type_embed.hook_out   the embedding writes (token, position, type)
    embed_ln.hook_in / .hook_out                                    an encoder's embedding norm
    blocks.{l}.hook_resid_pre / _mid / _post                        the stream at the block's points
    blocks.{l}.hook_attn_out / .hook_mlp_out                        a sublayer's output as it joins (output norm
                                                                    included)
    blocks.{l}.attn.hook_q / _k / _v                                the projections, biases included (q, k before
                                                                    QK-norm and rotation) [b, pos, heads, d_head]
    blocks.{l}.attn.hook_rot_q / _rot_k                             q and k as the scores use them (QK-normed, rotated)
    blocks.{l}.attn.hook_pattern                                    A = softmax(q kᵀ · scale + mask) [b, H, q, k]
    blocks.{l}.attn.hook_z                                          z = A v [b, pos, H, d_head]
    blocks.{l}.{ln1,ln2,ln1_post,ln2_post}.hook_in / .hook_out      a norm's input and output (a pre-norm, a post-norm
                                                                    block's stream norm, a sublayer's output norm)
    blocks.{l}.mlp.hook_post (also blocks.{l}.mlp.out.hook_in)      a dense MLP's hidden activation, what W_out reads
    ln_final.hook_in / .hook_out                                    the final norm's input (the final residual)
                                                                    and output

A post-norm block's ``hook_resid_mid`` is the stream after its first norm, where the block's middle point is.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Optional, Union

import torch
from torch import Tensor

from interp.errors import ArgumentError
from interp.engine._forward import Engine
from interp.engine._readout import final_norm, readout
from interp.models import Model

__all__ = ["hook_site", "read_forward"]

_GLOBAL = {
    "embed.hook_out": "embed.token",
    "pos_embed.hook_out": "embed.pos",
    "token_type_embed.hook_out": "embed.type",
    "embed_ln.hook_in": "embed_ln_in",
    "embed_ln.hook_out": "embed_ln_out",
    "ln_final.hook_in": "final_in",
    "ln_final.hook_out": "final_out",
}
_LAYER = re.compile(r"blocks\.(\d+)\.(.+)")
_IN_LAYER = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "attn.hook_q": "q",
    "attn.hook_k": "k",
    "attn.hook_v": "v",
    "attn.hook_rot_q": "rot_q",
    "attn.hook_rot_k": "rot_k",
    "attn.hook_pattern": "pattern",
    "attn.hook_z": "z",
    "mlp.hook_post": "mlp_post",
    "mlp.out.hook_in": "mlp_post",
    **{f"{n}.hook_{io}": f"{n}_{io}" for n in ("ln1", "ln2", "ln1_post", "ln2_post") for io in ("in", "out")},
}


def hook_site(model: Model, name: str) -> tuple[int, str]:
    """(layer, engine site) of hook ``name`` (layer −1: before or after the blocks); an ArgumentError naming the
    hook and the names the engine serves when it is none of them, or names a point this model does not have."""
    if name in _GLOBAL:
        return -1, _GLOBAL[name]
    m = _LAYER.fullmatch(name) if isinstance(name, str) else None
    site = _IN_LAYER.get(m.group(2)) if m else None
    if m is None or site is None:
        raise ArgumentError(
            f"hook {name!r} is not a point the engine's forward names; it names "
            f"{', '.join(_GLOBAL)} and blocks.{{l}}.{{{', '.join(_IN_LAYER)}}}"
        )
    layer = int(m.group(1))
    if not 0 <= layer < model.arch.n_layers:
        raise ArgumentError(f"hook {name!r}: layer {layer} is outside [0, {model.arch.n_layers - 1}]")
    return layer, site


def read_forward(
    model: Model,
    tokens: Tensor,
    mask: Tensor,
    readers: Mapping[str, Optional[Callable[[Tensor], Any]]],
    *,
    logits: Union[bool, Callable[[Tensor], Tensor]] = False,
    grad: bool = False,
) -> tuple[dict[str, Any], Optional[Tensor]]:
    """One walk of the engine's forward of ``tokens`` [b, pos] (key padding ``mask``): {name: readers[name](tensor)}
    for each hook name (module docstring; a None function keeps the tensor itself), each called as the walk
    produces its tensor, and the logits when ``logits`` (a function: of the final residual it returns, e.g. some
    positions of it; None for a model without an unembedding). The walk stops after the last layer it needs.
    ``grad``: the walk in grad mode, its graph starting at the embedding writes (leaves that require grad; the
    weights are constants), so that the kept tensors can be differentiated by each other (attribution patching)."""
    e = Engine.of(model)
    sites: dict[int, dict[str, list[str]]] = {}
    for name in readers:
        layer, site = hook_site(model, name)
        sites.setdefault(layer, {}).setdefault(site, []).append(name)
    out: dict[str, Any] = {}

    def hand(at: Mapping[str, list[str]], site: str, t: Optional[Tensor]) -> None:
        for name in at.get(site, ()):
            if t is None:
                raise ArgumentError(f"hook {name!r}: model {model.name!r} has no such point")
            fn = readers[name]
            out[name] = t if fn is None else fn(t)

    top = sites.get(-1, {})
    last = max([l for l in sites if l >= 0], default=-1)
    through = bool(logits) or any(s.startswith("final") for s in top)
    prompt = torch.arange(tokens.shape[0], device=tokens.device)
    with torch.enable_grad() if grad else torch.inference_mode():
        parts = e.embed_parts(tokens)
        if grad:
            parts = {k: v.detach().requires_grad_(True) for k, v in parts.items()}
        for s in ("embed.token", "embed.pos", "embed.type"):
            if s in top:
                hand(top, s, parts.get(s))
        if "embed_ln_in" in top:  # the embedding norm's input: the writes summed, in the engine's order
            vals = list(parts.values())
            hand(top, "embed_ln_in", sum(vals[1:], vals[0]))
        x = e.embed(parts)
        if "embed_ln_out" in top:
            hand(top, "embed_ln_out", x if model.weights.ln_emb_w is not None else None)
        for l in range(e.L if through else last + 1):
            at = sites.get(l, {})
            store: dict[str, Tensor] = {}
            x = e.layer(l, x, prompt=prompt, mask=mask, capture=set(at) or None, store=store)
            for site in at:
                hand(at, site, store.get(site))
        if not through:
            return out, None
        hand(top, "final_in", x)
        if "final_out" in top:
            normed = not model.block.normed_stream and model.arch.norm != "none" and model.weights.lnf_w is not None
            hand(top, "final_out", final_norm(model, x)[0] if normed else None)
        if not logits or not model.arch.has_logits:
            return out, None
        return out, readout(model, logits(x) if callable(logits) else x)
