"""The residual stream of each block family as an ordered program of events.

An event is a *write* (a term joins the stream), a *norm* applied to the whole stream
(post-norm models), a *read* (a sublayer's linear map sees the stream, through its own
pre-norm if any) or a *resid* point (a ``blocks.{l}.hook_resid_*`` hook). Decomposing a read
walks this list backwards (see :mod:`interp.stream._trace`).

Pre-norm:  x_mid = x + Σ_h z_h W_O^h + b_O     (heads read N1(x));  x_out = x_mid + MLP(N2(x_mid))
Parallel:  x_out = x + Σ_h z_h W_O^h + b_O + MLP(N2(x))            (heads read N1(x))
Post-norm: x_mid = N1(x + Σ_h z_h W_O^h + b_O);  x_out = N2(x_mid + MLP(x_mid))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from interp.models import ArchInfo

__all__ = ["Event", "build_program", "head_label", "resid_hook_names"]


@dataclass(frozen=True)
class Event:
    kind: str  # "write" | "norm" | "read" | "resid"
    label: str  # write/read label, norm id ("L3.ln1", "final", "embed_ln"), or resid hook name
    layer: int = -1
    head: int = -1  # head (write) or KV/query head (read)
    norm: Optional[str] = None  # for reads: the pre-norm id applied at the read, or None
    sub: str = ""  # write kind: embed|pos_embed|type_embed|head|attn_bias|mlp|neuron|mlp_bias|norm_bias


def head_label(layer: int, head: int) -> str:
    return f"L{layer}.H{head}"


def resid_hook_names(arch: ArchInfo) -> list[str]:
    names = []
    for l in range(arch.n_layers):
        names.append(f"blocks.{l}.hook_resid_pre")
        if not arch.parallel_attn_mlp and not arch.attn_only:
            names.append(f"blocks.{l}.hook_resid_mid")
        names.append(f"blocks.{l}.hook_resid_post")
    return names


def _has_bias(arch: ArchInfo) -> bool:
    return arch.family != "llama"


def build_program(
    arch: ArchInfo,
    *,
    neuron_layers: Sequence[int] = (),
    n_types: int = 0,
    attn_bias: Optional[bool] = None,
    mlp_bias: Optional[bool] = None,
) -> list[Event]:
    """The ordered events of ``arch``'s forward pass (see module docstring).

    ``attn_bias`` / ``mlp_bias``: whether the output projections carry a bias (an
    ``L{l}.attn_bias`` write, and ``L{l}.mlp_bias`` when the MLP is split into neurons).
    Default: every family but Llama; a Llama config with ``attention_bias`` / ``mlp_bias``
    has them too, so :class:`~interp.stream.ResidualTrace` decides from the weights.
    """
    attn_bias = _has_bias(arch) if attn_bias is None else attn_bias
    mlp_bias = _has_bias(arch) if mlp_bias is None else mlp_bias
    ev: list[Event] = [Event("write", "embed", sub="embed")]
    if arch.positional == "learned":
        ev.append(Event("write", "pos_embed", sub="pos_embed"))
    if n_types:
        ev.append(Event("write", "type_embed", sub="type_embed"))
    post = arch.norm_placement == "post"
    has_norm = arch.norm != "none"
    norm_bias = arch.norm == "layernorm"
    if post:
        ev.append(Event("norm", "embed_ln"))
        ev.append(Event("write", "embed_ln_bias", sub="norm_bias", norm="embed_ln"))
    for l in range(arch.n_layers):
        ev.append(Event("resid", f"blocks.{l}.hook_resid_pre", layer=l))
        attn_norm = f"L{l}.ln1" if (has_norm and not post) else None
        mlp_norm = f"L{l}.ln2" if (has_norm and not post) else None
        for h in range(arch.n_heads):
            ev.append(Event("read", f"L{l}.attn.q[H{h}]", layer=l, head=h, norm=attn_norm))
        for g in range(arch.n_kv_heads):
            ev.append(Event("read", f"L{l}.attn.k[H{g}]", layer=l, head=g, norm=attn_norm))
            ev.append(Event("read", f"L{l}.attn.v[H{g}]", layer=l, head=g, norm=attn_norm))
        if arch.parallel_attn_mlp and not arch.attn_only:
            ev.append(Event("read", f"L{l}.mlp.in", layer=l, norm=mlp_norm))
        for h in range(arch.n_heads):
            ev.append(Event("write", head_label(l, h), layer=l, head=h, sub="head"))
        if attn_bias:
            ev.append(Event("write", f"L{l}.attn_bias", layer=l, sub="attn_bias"))
        if post:
            ev.append(Event("norm", f"L{l}.ln1", layer=l))
            ev.append(Event("write", f"L{l}.ln1_bias", layer=l, sub="norm_bias", norm=f"L{l}.ln1"))
        if not arch.parallel_attn_mlp and not arch.attn_only:
            ev.append(Event("resid", f"blocks.{l}.hook_resid_mid", layer=l))
            ev.append(Event("read", f"L{l}.mlp.in", layer=l, norm=mlp_norm))
        if not arch.attn_only:
            if l in neuron_layers:
                for n in range(arch.d_mlp):
                    ev.append(Event("write", f"L{l}.N{n}", layer=l, head=n, sub="neuron"))
                if mlp_bias:
                    ev.append(Event("write", f"L{l}.mlp_bias", layer=l, sub="mlp_bias"))
            else:
                ev.append(Event("write", f"L{l}.mlp", layer=l, sub="mlp"))
        if post:
            ev.append(Event("norm", f"L{l}.ln2", layer=l))
            ev.append(Event("write", f"L{l}.ln2_bias", layer=l, sub="norm_bias", norm=f"L{l}.ln2"))
        ev.append(Event("resid", f"blocks.{l}.hook_resid_post", layer=l))
    if arch.has_unembed and not post:
        ev.append(Event("read", "unembed", norm="final" if has_norm else None))
    else:
        ev.append(Event("read", "final"))
    return ev
