"""The residual stream of each block family as an ordered program of events, and its order.

An event is a *write* (a term joins the stream), a *norm* applied to the whole stream
(post-norm models), a *read* (a sublayer's linear map sees the stream, through its own
pre-norm if any) or a *resid* point (a ``blocks.{l}.hook_resid_*`` hook). Decomposing a read
walks this list backwards (:mod:`interp.stream`); a read sees a write iff the write's event
comes before the read's (:func:`sees`, used by :mod:`interp.circuits`).

Pre-norm:  x_mid = x + Σ_h z_h W_O^h + b_O     (heads read N1(x));  x_out = x_mid + MLP(N2(x_mid))
           (``pre_norms=False``, OLMo 2: heads read x and the MLP x_mid, with no norm at the read)
Parallel:  x_out = x + Σ_h z_h W_O^h + b_O + MLP(N2(x))            (heads read N1(x))
Post-norm: x_mid = N1(x + Σ_h z_h W_O^h + b_O);  x_out = N2(x_mid + MLP(x_mid))

so in a parallel block ``L3.mlp.in`` reads the stream before ``L3.H*`` write, in a sequential one after.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from interp.errors import LabelError
from interp.labels import Bias, Embed, Head, HeadInput, Label, Mlp, MlpInput, Neuron, Norm, NormBias, Output, Resid
from interp.labels import parse as parse_label
from interp.models._arch import ArchInfo
from interp.models._block import Step, describe_block

__all__ = ["Event", "build_program", "head_label", "program_position", "resid_hook_names", "sees"]


@dataclass(frozen=True)
class Event:
    kind: str  # "write" | "norm" | "read" | "resid"
    label: str  # write/read label, norm id ("L3.ln1", "final", "embed_ln"), or resid hook name
    layer: int = -1
    head: int = -1  # head (write) or KV/query head (read)
    norm: Optional[str] = None  # for reads: the pre-norm id applied at the read, or None
    sub: str = ""  # write kind: embed|pos_embed|type_embed|head|attn_bias|mlp|neuron|mlp_bias|norm_bias
    node: Optional[Label] = field(default=None, compare=False)  # the typed label (``str(node) == label``)


def _event(kind: str, node: Any, **kw: Any) -> Event:
    """An event named by typed label ``node`` (its text is the event's ``label``)."""
    return Event(kind, str(node), node=node, **kw)


def head_label(layer: int, head: int) -> str:
    return str(Head(layer, head))


def norm_hook(arch: ArchInfo, layer: int, which: str) -> str:
    """The bridge's hook prefix of block ``layer``'s norm ``which`` ("1" or "2"): ``blocks.{l}.ln{which}``,
    except that a block whose two sublayers read one norm (``ArchInfo.shared_block_norm``, GPT-J) has
    only ``ln1`` — its MLP reads that norm's output too."""
    return f"blocks.{layer}.ln{'1' if arch.shared_block_norm else which}"


def resid_hook_names(arch: ArchInfo) -> list[str]:
    sites = describe_block(arch).resid_sites()
    return [str(Resid(l, site[len("resid_") :])) for l in range(arch.n_layers) for site in sites]  # type: ignore[arg-type]


def build_program(arch: ArchInfo, *, neuron_layers: Sequence[int] = (), n_types: int = 0) -> list[Event]:
    """The ordered events of ``arch``'s forward pass (see module docstring).

    ``neuron_layers``: layers whose MLP write is split into one write per neuron (``L{l}.N{n}``,
    plus ``L{l}.mlp_bias`` if ``arch.mlp_bias``); ``n_types``: a token-type embedding write
    (BERT). An ``L{l}.attn_bias`` write follows the heads iff ``arch.attn_bias``.
    """
    ev: list[Event] = [_event("write", Embed("token"), sub="embed")]
    if arch.positional == "learned":
        ev.append(_event("write", Embed("pos"), sub="pos_embed"))
    if n_types:
        ev.append(_event("write", Embed("type"), sub="type_embed"))
    block = describe_block(arch)
    has_norm = arch.norm != "none"
    if block.normed_stream:
        embed_ln = Norm(None, "embed_ln")
        ev.append(_event("norm", embed_ln))
        ev.append(_event("write", NormBias(embed_ln), sub="norm_bias", norm=str(embed_ln)))
    for l in range(arch.n_layers):
        for step in block.walk():
            ev.extend(_step_events(arch, step, l, neuron_layers))
    if arch.has_logits:
        ev.append(_event("read", Output("unembed"), norm="final" if has_norm else None))
    else:
        ev.append(_event("read", Output("final")))
    return ev


def _step_events(arch: ArchInfo, step: Step, l: int, neuron_layers: Sequence[int]) -> list[Event]:
    """The events of block step ``step`` of layer ``l`` (points on the stream, reads, writes, stream norms)."""
    if step.op == "point":
        if not step.site.startswith("resid_"):
            return []
        return [_event("resid", Resid(l, step.site[len("resid_") :]), layer=l)]  # type: ignore[arg-type]
    norm = str(Norm(l, step.norm)) if step.norm is not None else None  # type: ignore[arg-type]
    if step.op == "read" and step.sub == "attn":
        return [_event("read", HeadInput(l, "q", h), layer=l, head=h, norm=norm) for h in range(arch.n_heads)] + [
            _event("read", HeadInput(l, kind, g), layer=l, head=g, norm=norm)
            for g in range(arch.n_kv_heads)
            for kind in ("k", "v")
        ]
    if step.op == "read":
        return [_event("read", MlpInput(l, "in"), layer=l, norm=norm)]
    if step.op == "add" and step.sub == "attn":
        heads = [_event("write", Head(l, h), layer=l, head=h, sub="head") for h in range(arch.n_heads)]
        return heads + ([_event("write", Bias(l, "attn"), layer=l, sub="attn_bias")] if arch.attn_bias else [])
    if step.op == "add" and l in neuron_layers:
        neurons = [_event("write", Neuron(l, n), layer=l, head=n, sub="neuron") for n in range(arch.d_mlp)]
        return neurons + ([_event("write", Bias(l, "mlp"), layer=l, sub="mlp_bias")] if arch.mlp_bias else [])
    if step.op == "add":
        return [_event("write", Mlp(l), layer=l, sub="mlp")]
    if step.op == "norm":
        ln = Norm(l, step.norm)  # type: ignore[arg-type]
        return [_event("norm", ln, layer=l), _event("write", NormBias(ln), layer=l, sub="norm_bias", norm=str(ln))]
    return []  # apply, out_norm: no event of the program (a sandwich norm is part of its sublayer's write)


@functools.lru_cache(maxsize=64)
def _positions(arch: ArchInfo) -> dict[str, int]:
    """Write/read label -> index of its event in ``build_program(arch)``."""
    return {e.label: i for i, e in enumerate(build_program(arch)) if e.kind in ("write", "read")}


def program_position(arch: ArchInfo, label: Union[str, Label]) -> int:
    """Index in ``build_program(arch)`` of the event of write or read ``label``.

    ``L{l}.mlp.gate`` (gated MLPs) reads the same normalised stream as ``L{l}.mlp.in``, so it
    has its position. Neuron writes exist only in a program built with ``neuron_layers``.
    """
    pos = _positions(arch)
    key = str(label)
    if key not in pos:
        try:
            lab = parse_label(label)
        except LabelError:
            lab = None
        if isinstance(lab, MlpInput) and lab.which == "gate":
            key = str(MlpInput(lab.layer, "in"))
    if key in pos:
        return pos[key]
    raise LabelError(
        f"label={label!r} is not a write or read of {arch.name!r}'s block program; "
        f"valid labels look like {list(pos)[:3] + ['…'] + list(pos)[-3:]}"
    )


def sees(arch: ArchInfo, write: Union[str, Label], read: Union[str, Label]) -> bool:
    """True iff read ``read`` sees write ``write``: the write's event precedes the read's."""
    return program_position(arch, write) < program_position(arch, read)
