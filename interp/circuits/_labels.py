"""Write and read labels of the residual stream, their weights, and their order.

Labels (:mod:`interp.labels`): writes ``embed``, ``pos_embed`` (learned positions only), ``L3.H5``,
``L3.mlp``; reads ``L3.attn.q[H5]`` (query head), ``L3.attn.k[H1]`` / ``L3.attn.v[H1]`` (KV head
under GQA), ``L3.mlp.in`` (W_in, the up projection), ``L3.mlp.gate`` (gated MLPs only),
``unembed``. A read sees a write iff the write's event precedes the read's in the model's block
program (:func:`interp.models.internal.build_program`; positions from :func:`interp.models.internal.program_position`):

    sequential block (GPT-2, Llama, BERT):  attn reads < head writes < mlp reads < mlp writes
    parallel block (GPT-NeoX):              attn reads, mlp reads   < head writes, mlp writes

so in a parallel block ``L3.mlp.in`` does not read ``L3.H*``. In post-norm models every write
still precedes the later reads; the norms between are not part of the virtual weight — see
:mod:`interp.circuits._common`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from torch import Tensor

from interp import labels as L
from interp.circuits._common import _need_mlp, fold_read, fold_write, folded_unembed, post_gain
from interp.errors import LabelError, UnsupportedOperationError
from interp.models import Model, describe_block
from interp.models.internal import program_position

__all__ = ["Write", "Read", "parse_write", "parse_read", "write_labels", "read_labels", "write_matrix", "read_matrix"]


@dataclass(frozen=True)
class Write:
    label: str
    kind: str  # "embed" | "pos_embed" | "head" | "mlp"
    layer: int = -1
    head: int = -1
    node: Optional[L.Write] = field(default=None, compare=False)  # the typed label (``str(node) == label``)

    def position(self, model: Model) -> int:
        """Index of this write's event in the model's block program."""
        return program_position(model.arch, self.node if self.node is not None else self.label)


@dataclass(frozen=True)
class Read:
    label: str
    kind: str  # "q" | "k" | "v" | "mlp.in" | "mlp.gate" | "unembed"
    layer: int = -1
    head: int = -1  # query head for q, KV head for k/v
    node: Optional[L.Read] = field(default=None, compare=False)  # the typed label (``str(node) == label``)

    def position(self, model: Model) -> int:
        """Index of this read's event in the model's block program (a gate reads where ``mlp.in`` does)."""
        return program_position(model.arch, self.node if self.node is not None else self.label)


def _write_nodes(model: Model) -> list[L.Write]:
    a = model.arch
    mlp = describe_block(a).has_mlp
    out: list[L.Write] = [L.Embed("token")]
    if model.weights.W_pos is not None:
        out.append(L.Embed("pos"))
    for l in range(a.n_layers):
        out += [L.Head(l, h) for h in range(a.n_heads)]
        if mlp:
            out.append(L.Mlp(l))
    return out


def _read_nodes(model: Model) -> list[L.Read]:
    a = model.arch
    mlp = describe_block(a).has_mlp
    out: list[L.Read] = []
    for l in range(a.n_layers):
        out += [L.HeadInput(l, "q", h) for h in range(a.n_heads)]
        out += [L.HeadInput(l, "k", g) for g in range(a.n_kv_heads)]
        out += [L.HeadInput(l, "v", g) for g in range(a.n_kv_heads)]
        if mlp:
            out.append(L.MlpInput(l, "in"))
            if model.weights.W_gate is not None:
                out.append(L.MlpInput(l, "gate"))
    if a.has_logits:
        out.append(L.Output("unembed"))
    return out


def write_labels(model: Model) -> list[str]:
    return [str(w) for w in _write_nodes(model)]


def read_labels(model: Model) -> list[str]:
    return [str(r) for r in _read_nodes(model)]


def _grammar(label: Any) -> Optional[L.Label]:
    """``label`` (text) as a label of the grammar, or None; a label object is not accepted here (as before)."""
    if not isinstance(label, str):
        return None
    try:
        return L.parse(label)
    except LabelError:
        return None


class _Lazy:
    """The list of valid labels, built only when an error message needs it."""

    def __init__(self, fn, model: Model) -> None:
        self.fn, self.model = fn, model

    def get(self) -> list[str]:
        return self.fn(self.model)


def _bad(name: str, label: Any, lazy: "_Lazy", why: str = "") -> LabelError:
    valid = lazy.get()
    ex = valid if len(valid) <= 6 else valid[:3] + ["…"] + valid[-3:]
    return LabelError(
        f"{name}={label!r} is not a {'write' if name == 'src' else 'read'} label of this model"
        f"{why}; valid labels look like {ex}"
    )


def parse_write(model: Model, label: Any, *, name: str = "src") -> Write:
    a = model.arch
    valid = _Lazy(write_labels, model)
    lab = _grammar(label)
    if lab is None:
        raise _bad(name, label, valid)
    if lab == L.Embed("token"):
        return Write(label, "embed", node=lab)
    if lab == L.Embed("pos"):
        if model.weights.W_pos is None:
            raise _bad(name, label, valid, f" (positional={a.positional!r}: no learned position embedding)")
        return Write(label, "pos_embed", node=lab)
    if isinstance(lab, L.Head):
        if lab.layer < a.n_layers and lab.head < a.n_heads:
            return Write(label, "head", lab.layer, lab.head, node=lab)
    if isinstance(lab, L.Mlp) and describe_block(a).has_mlp:
        if lab.layer < a.n_layers:
            return Write(label, "mlp", lab.layer, node=lab)
    raise _bad(name, label, valid)


def parse_read(model: Model, label: Any, *, name: str = "dst") -> Read:
    a = model.arch
    valid = _Lazy(read_labels, model)
    lab = _grammar(label)
    if lab is None:
        raise _bad(name, label, valid)
    if lab == L.Output("unembed"):
        if not a.has_logits:
            raise UnsupportedOperationError(f"{name}='unembed': model {model.name!r} has no unembedding (W_U is None)")
        return Read(label, "unembed", node=lab)
    if isinstance(lab, L.HeadInput):
        l, kind, h = lab.layer, lab.which, lab.head
        n = a.n_heads if kind == "q" else a.n_kv_heads
        if l < a.n_layers and h < n:
            return Read(label, kind, l, h, node=lab)
        if l < a.n_layers and kind != "q" and h < a.n_heads:
            raise _bad(
                name,
                label,
                valid,
                f" (k and v are indexed by KV head 0..{a.n_kv_heads - 1}; query head "
                f"{h} reads KV head {a.kv_head(h)}, "
                f"i.e. {L.HeadInput(l, kind, a.kv_head(h))})",
            )
    if isinstance(lab, L.MlpInput) and describe_block(a).has_mlp:
        l, which = lab.layer, lab.which
        if l < a.n_layers and (which == "in" or model.weights.W_gate is not None):
            return Read(label, f"mlp.{which}", l, node=lab)
    raise _bad(name, label, valid)


def write_matrix(model: Model, w: Write, fold_norms: bool) -> Tensor:
    """The write's output weight [k, d_model] (rows: its internal directions)."""
    W = model.weights
    post: Optional[Tensor] = None  # a sandwich norm's gain on a head's / an MLP's output
    if w.kind == "embed":
        M = W.W_E
    elif w.kind == "pos_embed":
        if W.W_pos is None:
            raise LabelError(f"model {model.name!r} has no learned position embedding (no 'pos_embed' write)")
        M = W.W_pos
    elif w.kind == "head":
        M, post = W.W_O[w.layer, w.head], post_gain(model, "attn")
    else:
        if model.arch.n_experts:
            _need_mlp(model)
        M, post = W.W_out[w.layer], post_gain(model, "mlp")
    return fold_write(model, M, fold_norms, None if post is None else post[w.layer])


def read_matrix(model: Model, r: Read, fold_norms: bool) -> Tensor:
    """The read's input weight [d_model, k] (columns: its internal directions), norm gain folded."""
    W = model.weights
    if r.kind == "unembed":
        return folded_unembed(model, fold_norms)
    if r.kind in ("q", "k", "v"):
        M = {"q": W.W_Q, "k": W.W_K, "v": W.W_V}[r.kind][r.layer, r.head]
        return fold_read(model, M, W.ln1_w[r.layer], fold_norms)
    if model.arch.n_experts:
        _need_mlp(model)
    if r.kind == "mlp.gate" and W.W_gate is None:
        raise LabelError(f"model {model.name!r} has no gated MLP (no '{L.MlpInput(r.layer, 'gate')}' read)")
    M = W.W_in[r.layer] if r.kind == "mlp.in" or W.W_gate is None else W.W_gate[r.layer]
    return fold_read(model, M, W.ln2_w[r.layer], fold_norms)


def check_order(model: Model, w: Write, r: Read) -> Optional[str]:
    """None if read ``r`` sees write ``w`` (``w``'s event precedes ``r``'s in the block program), else why not."""
    if w.position(model) < r.position(model):
        return None
    if w.kind == "head" and r.kind.startswith("mlp") and w.layer == r.layer:
        return (
            f"in this parallel-block model ({model.arch.family}) L{r.layer}'s MLP reads the same residual "
            f"stream as its attention, before L{w.layer}'s heads write"
        )
    return f"{r.label} is read before {w.label} is written"
