"""The residual stream of each block family as an ordered program of events, and its order.

An event is a *write* (a term joins the stream), a *norm* applied to the whole stream
(post-norm models), a *read* (a sublayer's linear map sees the stream, through its own
pre-norm if any) or a *resid* point (a ``blocks.{l}.hook_resid_*`` hook). Decomposing a read
walks this list backwards (:mod:`interp.stream`); a read sees a write iff the write's event
comes before the read's (:func:`sees`, used by :mod:`interp.circuits`).

Pre-norm:  x_mid = x + Σ_h z_h W_O^h + b_O     (heads read N1(x));  x_out = x_mid + MLP(N2(x_mid))
Parallel:  x_out = x + Σ_h z_h W_O^h + b_O + MLP(N2(x))            (heads read N1(x))
Post-norm: x_mid = N1(x + Σ_h z_h W_O^h + b_O);  x_out = N2(x_mid + MLP(x_mid))

so in a parallel block ``L3.mlp.in`` reads the stream before ``L3.H*`` write, in a sequential one after.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from interp.errors import LabelError
from interp.models._arch import ArchInfo

__all__ = ["Event", "build_program", "head_label", "program_position", "resid_hook_names", "sees"]


_GATE = re.compile(r"L(\d+)\.mlp\.gate")


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


def build_program(arch: ArchInfo, *, neuron_layers: Sequence[int] = (), n_types: int = 0) -> list[Event]:
    """The ordered events of ``arch``'s forward pass (see module docstring).

    ``neuron_layers``: layers whose MLP write is split into one write per neuron (``L{l}.N{n}``,
    plus ``L{l}.mlp_bias`` if ``arch.mlp_bias``); ``n_types``: a token-type embedding write
    (BERT). An ``L{l}.attn_bias`` write follows the heads iff ``arch.attn_bias``.
    """
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
        if arch.attn_bias:
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
                if arch.mlp_bias:
                    ev.append(Event("write", f"L{l}.mlp_bias", layer=l, sub="mlp_bias"))
            else:
                ev.append(Event("write", f"L{l}.mlp", layer=l, sub="mlp"))
        if post:
            ev.append(Event("norm", f"L{l}.ln2", layer=l))
            ev.append(Event("write", f"L{l}.ln2_bias", layer=l, sub="norm_bias", norm=f"L{l}.ln2"))
        ev.append(Event("resid", f"blocks.{l}.hook_resid_post", layer=l))
    if arch.has_logits:
        ev.append(Event("read", "unembed", norm="final" if has_norm else None))
    else:
        ev.append(Event("read", "final"))
    return ev


@functools.lru_cache(maxsize=64)
def _positions(arch: ArchInfo) -> dict[str, int]:
    """Write/read label -> index of its event in ``build_program(arch)``."""
    return {e.label: i for i, e in enumerate(build_program(arch)) if e.kind in ("write", "read")}


def program_position(arch: ArchInfo, label: str) -> int:
    """Index in ``build_program(arch)`` of the event of write or read ``label``.

    ``L{l}.mlp.gate`` (gated MLPs) reads the same normalised stream as ``L{l}.mlp.in``, so it
    has its position. Neuron writes exist only in a program built with ``neuron_layers``.
    """
    pos = _positions(arch)
    m = _GATE.fullmatch(label)
    key = f"L{m.group(1)}.mlp.in" if m else label
    if key in pos:
        return pos[key]
    raise LabelError(f"label={label!r} is not a write or read of {arch.name!r}'s block program; "
                     f"valid labels look like {list(pos)[:3] + ['…'] + list(pos)[-3:]}")


def sees(arch: ArchInfo, write: str, read: str) -> bool:
    """True iff read ``read`` sees write ``write``: the write's event precedes the read's."""
    return program_position(arch, write) < program_position(arch, read)
