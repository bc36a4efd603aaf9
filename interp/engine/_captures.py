"""Captures: the engine's forward read at the points transformer-lens names, one layer at a time.

Every analysis that reads activations (the residual-stream trace, attention patterns, the logit lens,
predictions, SAE reconstruction, the probes) asks for them by transformer-lens's hook names; this module is
the one map from those names to the engine's sites (:class:`interp.engine.Engine`'s block steps) and the
one capture run. A name maps to where the engine's forward holds that tensor:

    embed.hook_out · hook_embed                  the token embedding W_E[t] (embedding scale included)
    pos_embed.hook_out · hook_pos_embed          the learned position embedding
    token_type_embed.hook_out                    the token-type embedding (BERT)
    embed_ln.hook_in / hook_out                  the embedding norm's input and output (post-norm)
    blocks.{l}.hook_resid_pre / _mid / _post     the stream at the block's points (post-norm: x_mid = N1(x + attn);
                                                 the bridge's BERT hook there holds N2's input instead)
    blocks.{l}.hook_attn_out / hook_mlp_out      a sublayer's output as it joins (after its output norm)
    blocks.{l}.hook_mlp_in · mlp.hook_in         what the MLP reads (through its pre-norm, if any)
    blocks.{l}.attn.hook_q / _k / _v             q, k, v [batch, pos, heads, d_head] (before QK-norm and RoPE)
    blocks.{l}.attn.hook_rot_q / hook_rot_k      q, k as the scores use them (QK-normed, rotated)
    blocks.{l}.attn.hook_pattern                 A [batch, n_heads, query_pos, key_pos]
    blocks.{l}.attn.hook_z                       z [batch, pos, n_heads, d_head]
    blocks.{l}.mlp.hook_post · mlp.out.hook_in   the MLP's hidden activation (dense MLPs)
    blocks.{l}.{ln1,ln2,ln1_post,ln2_post}.hook_in / hook_out / hook_scale / hook_normalized
    ln_final.hook_in / hook_out / hook_scale / hook_normalized

A capture never changes the forward: the pattern is computed beside the fused attention, not in its place,
so every other tensor is what an uncaptured run gives, bit for bit. ``hook_scale`` is the norm's σ
[batch, pos, 1] (sqrt(var + ε) for LayerNorm, sqrt(mean x² + ε) for RMSNorm); ``hook_normalized`` is what
transformer-lens calls so: a LayerNorm's output after gain and bias, an RMSNorm's x / σ before its gain.
Reducers (``reducers[name]``, e.g. one position kept) are applied as each layer's tensor is produced, so a
capture holds one layer's activations at a time beyond what it keeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional

import torch
from torch import Tensor

from interp.engine._readout import unembed
from interp.errors import ArgumentError

if TYPE_CHECKING:
    from interp.engine._forward import Engine

__all__ = ["CaptureSite", "capture_site", "run_captures"]

Reducer = Callable[[Tensor], Tensor]

_GLOBAL = {
    "embed.hook_out": "embed.token",
    "hook_embed": "embed.token",
    "pos_embed.hook_out": "embed.pos",
    "hook_pos_embed": "embed.pos",
    "token_type_embed.hook_out": "embed.type",
}
_LAYER = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "hook_mlp_in": "mlp_in",
    "mlp.hook_in": "mlp_in",
    "attn.hook_q": "q",
    "attn.hook_k": "k",
    "attn.hook_v": "v",
    "attn.hook_rot_q": "rot_q",
    "attn.hook_rot_k": "rot_k",
    "attn.hook_pattern": "attn_pattern",
    "attn.hook_z": "z",
    "mlp.hook_post": "mlp_post",
    "mlp.out.hook_in": "mlp_post",
}
_NORM_PART = {"hook_in": "in", "hook_out": "out", "hook_scale": "scale", "hook_normalized": "normalized"}
_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")
_NORM = re.compile(r"(ln1|ln2|ln1_post|ln2_post)\.(hook_in|hook_out|hook_scale|hook_normalized)")
_OUTER_NORM = re.compile(r"(embed_ln|ln_final)\.(hook_in|hook_out|hook_scale|hook_normalized)")


@dataclass(frozen=True)
class CaptureSite:
    """Where the engine holds transformer-lens's ``name``: block ``layer`` (None: before or after the blocks),
    the engine's ``site`` (a block point, an attention or MLP internal, or ``{norm}_in`` / ``{norm}_out``), and
    ``derive`` ("scale" | "normalized") with the ``norm`` whose input it is derived from."""

    name: str
    layer: Optional[int]
    site: str
    norm: Optional[str] = None
    derive: Optional[str] = None


def capture_site(engine: "Engine", name: str) -> CaptureSite:
    """The engine site of transformer-lens hook ``name`` (module docstring), or an ArgumentError naming it."""
    L = engine.L
    if name in _GLOBAL:
        return CaptureSite(name, None, _GLOBAL[name])
    m = _OUTER_NORM.fullmatch(name)
    if m:
        norm = "final" if m.group(1) == "ln_final" else "embed_ln"
        return _norm_site(name, None, norm, _NORM_PART[m.group(2)])
    m = _BLOCK.fullmatch(name)
    if m and int(m.group(1)) < L:
        l, rest = int(m.group(1)), m.group(2)
        if rest in _LAYER:
            return CaptureSite(name, l, _LAYER[rest])
        n = _NORM.fullmatch(rest)
        if n:
            return _norm_site(name, l, n.group(1), _NORM_PART[n.group(2)])
    raise ArgumentError(
        f"name={name!r} is not a capture point of this {L}-layer model; capture points are transformer-lens's "
        "hook names: 'embed.hook_out', 'blocks.{l}.hook_resid_pre|mid|post', 'blocks.{l}.attn.hook_z|pattern|q|k|v|"
        "rot_q|rot_k', 'blocks.{l}.hook_mlp_out', 'blocks.{l}.mlp.hook_post', 'blocks.{l}.ln1.hook_in|out|scale|"
        f"normalized', 'ln_final.hook_in|out|scale|normalized' (l in [0, {L - 1}])"
    )


def _norm_site(name: str, layer: Optional[int], norm: str, part: str) -> CaptureSite:
    if part in ("in", "out"):
        return CaptureSite(name, layer, f"{norm}_{part}", norm)
    return CaptureSite(name, layer, f"{norm}_in", norm, derive=part)


def run_captures(
    engine: "Engine",
    tokens: Tensor,
    mask: Tensor,
    names: Iterable[str],
    *,
    reducers: Optional[Mapping[str, Reducer]] = None,
    logits: bool = True,
) -> tuple[dict[str, Tensor], Optional[Tensor]]:
    """One engine forward of ``tokens`` [batch, pos] (key padding ``mask``), returning ``{name: activation}`` for
    transformer-lens hook ``names`` (each through ``reducers[name]`` as its layer produces it) and, with
    ``logits``, the logits [batch, pos, d_vocab] (None for a model without an unembedding). The run stops after
    the last layer anything is needed from."""
    e, a, w = engine, engine.arch, engine.w
    reducers = reducers or {}
    sites = [capture_site(e, n) for n in dict.fromkeys(names)]
    by_layer: dict[int, list[CaptureSite]] = {}
    outer: list[CaptureSite] = []  # before or after the blocks
    for s in sites:
        if s.layer is None:
            outer.append(s)
        else:
            by_layer.setdefault(s.layer, []).append(s)
    final_wanted = logits or any(s.norm == "final" for s in outer)
    last = e.L - 1 if final_wanted else max(by_layer, default=-1)
    out: dict[str, Tensor] = {}

    def keep(s: CaptureSite, t: Tensor, norm: Optional[tuple[Optional[Tensor], Optional[Tensor], str]] = None) -> None:
        if s.derive is not None:
            t = _derived(e, t, s.derive, norm)
        fn = reducers.get(s.name)
        out[s.name] = fn(t) if fn is not None else t

    P = tokens.shape[0]
    prompt = torch.arange(P, device=tokens.device)
    result: Optional[Tensor] = None
    with torch.inference_mode():
        parts = e.embed_parts(tokens)
        x = _embed(e, parts, outer, keep)
        for l in range(last + 1):
            here = by_layer.get(l, [])
            store: dict[str, Tensor] = {}
            x = e.layer(l, x, prompt=prompt, mask=mask, capture={s.site for s in here}, store=store)
            for s in here:
                if s.site not in store:
                    raise ArgumentError(f"name={s.name!r}: this model's block has no such point (layer {l})")
                keep(s, store[s.site], (*e.norm_weights(s.norm, l), a.norm) if s.norm is not None else None)
            del store
        if final_wanted:
            y = x
            if a.norm != "none" and w.lnf_w is not None and not e.block.normed_stream:
                y = e.norm(x, w.lnf_w, w.lnf_b)
            for s in outer:
                if s.norm == "final":
                    keep(s, x if s.site == "final_in" else y, (w.lnf_w, w.lnf_b, a.norm))
            if logits and a.has_logits and w.W_U is not None:
                result = unembed(y, w.W_U, w.b_U, a.final_softcap)
    missing = [s.name for s in sites if s.name not in out]
    if missing:
        raise ArgumentError(f"name={missing[0]!r}: this model's forward has no such point")
    return out, result


def _embed(e: "Engine", parts: dict[str, Tensor], outer: list[CaptureSite], keep: Callable) -> Tensor:
    """The embedding (:meth:`Engine.embed`), keeping the embedding sites asked for along the way."""
    for s in outer:
        if s.site in parts:
            keep(s, parts[s.site])
    wanted = [s for s in outer if s.norm == "embed_ln"]
    if not wanted:
        return e.embed(parts)
    vals = list(parts.values())
    x = vals[0]
    for t in vals[1:]:
        x = x + t
    y = e.norm(x, e.w.ln_emb_w, e.w.ln_emb_b, "layernorm") if e.w.ln_emb_w is not None else x
    for s in wanted:
        keep(s, x if s.site == "embed_ln_in" else y, (e.w.ln_emb_w, e.w.ln_emb_b, "layernorm"))
    return y


def _derived(
    e: "Engine", x: Tensor, derive: str, norm: Optional[tuple[Optional[Tensor], Optional[Tensor], str]]
) -> Tensor:
    """transformer-lens's ``hook_scale`` (σ [.., 1]) or ``hook_normalized`` of a norm whose input is ``x``."""
    kind = norm[2] if norm is not None else e.arch.norm
    sigma = e.norm_scale(x, kind)
    if derive == "scale":
        return sigma
    if kind == "layernorm":  # transformer-lens's LayerNorm names its output (gain and bias applied) so
        assert norm is not None
        return e.norm(x, norm[0], norm[1], kind)
    return x / sigma
