"""The one grammar for everything interp names: writes, reads, resid points, paths and edges.

A label is a small frozen value whose ``str`` is the text a person reads and every result keys by,
and whose ``parse`` reads that text back (``parse(str(x)) == x`` for every label). Public functions
accept either the object or its text; modules build and parse labels only through this module.

Writes (terms that join the residual stream)::

    embed  pos_embed  type_embed            Embed("token" | "pos" | "type")
    L3.H5                                   Head(3, 5)            a head's output z_h W_O^h
    L3.H5[src=4]                            HeadSource(3, 5, 4)   the part of it read from source position 4,
                                                                  A[dst, 4] · v_4 W_O^h
    L3.mlp                                  Mlp(3)                an MLP's output
    L3.N17                                  Neuron(3, 17)         one MLP neuron's write
    L3.attn_bias  L3.mlp_bias  unembed_bias Bias(3, "attn") ...   output-projection / unembedding biases
    L3.ln1_bias  L3.ln2_bias  embed_ln_bias  final_bias
                                            NormBias(Norm(...))   a frozen norm's β (its own term)
    L3.F1234@5  L3.mlp_error@5              Feature(3, 1234, 5)   a transcoder feature / error node of an
                                            FeatureError(3, 5)    attribution graph, at position 5
    L3.F1234@*                              Feature(3, 1234, None) the feature at every position
    log_partition  wrong_lse_remainder      TargetTerm(...)       terms of a non-linear attribution target
    softcap_remainder

Reads (linear maps that see the stream)::

    L3.attn.q[H5]                           HeadInput(3, "q", 5)  query head 5's input
    L3.attn.k[H1]  L3.attn.v[H1]            HeadInput(3, "k", 1)  KV head 1 (under GQA one KV head
                                                                  serves n_heads / n_kv_heads query heads)
    L3.mlp.in  L3.mlp.gate                  MlpInput(3, "in")
    unembed                                 Output("unembed")     the logits' read of the final stream
    final                                   Output("final")       an encoder's final hidden state

Other names::

    L3.attn                                 Attn(3)               a whole attention layer's output
    L3.ln1  L3.ln2  embed_ln  ln_final      Norm(3, "ln1") ...    a norm (post-norm models apply it to
                                                                  the whole stream)
    blocks.3.hook_resid_pre                 Resid(3, "pre")       a resid point (transformer-lens hook name)
    embed→L0.H1→L1.H2                       Path(Embed(), (Head(0, 1), Head(1, 2)))   path expansion
    L0.H3→L1.attn.k[H2]                     Edge(Head(0, 3), HeadInput(1, "k", 2))    writer → reader

Labels sort by their position in a forward pass only approximately (by layer, then kind); the exact
"does this read see that write" order is the model's block program (:mod:`interp.models`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional, Union

from interp.errors import LabelError

__all__ = [
    "Label",
    "Write",
    "Read",
    "Node",
    "Embed",
    "Head",
    "Mlp",
    "Neuron",
    "Bias",
    "Norm",
    "NormBias",
    "Attn",
    "HeadSource",
    "TargetTerm",
    "Feature",
    "FeatureError",
    "HeadInput",
    "MlpInput",
    "Output",
    "Resid",
    "Path",
    "Edge",
    "ARROW",
    "parse",
    "parse_write",
    "parse_read",
    "as_label",
]

ARROW = "→"


class _Label:
    """Base of every label: ``str`` is the label's text, ``parse`` reads it back."""

    _pattern: ClassVar[re.Pattern[str]]

    @classmethod
    def parse(cls, text: Any) -> Any:
        """Read ``text`` as this kind of label (or return it if it already is one)."""
        if isinstance(text, cls):
            return text
        if not isinstance(text, str):
            raise LabelError(f"label={text!r} must be a str or a {cls.__name__}")
        lab = parse(text)
        if not isinstance(lab, cls):
            raise LabelError(f"label={text!r} is a {type(lab).__name__}, not a {cls.__name__}")
        return lab

    @property
    def layer_index(self) -> int:
        """The label's layer (−1 before the first block, a large number after the last)."""
        return int(getattr(self, "layer", -1))

    def __lt__(self, other: "_Label") -> bool:
        return _sort_key(self) < _sort_key(other)


def _sort_key(lab: _Label) -> tuple:
    return (lab.layer_index, type(lab).__name__, str(lab))


# ---------------------------------------------------------------------------------------------
# writes


@dataclass(frozen=True, eq=True, order=False)
class Embed(_Label):
    """A token, learned-position or token-type embedding write: ``embed``, ``pos_embed``, ``type_embed``."""

    which: Literal["token", "pos", "type"] = "token"

    def __str__(self) -> str:
        return {"token": "embed", "pos": "pos_embed", "type": "type_embed"}[self.which]


@dataclass(frozen=True, eq=True, order=False)
class Head(_Label):
    """Attention head ``head`` of layer ``layer``: its output z_h W_O^h (``L3.H5``)."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}.H{self.head}"


@dataclass(frozen=True, eq=True, order=False)
class Mlp(_Label):
    """The MLP of layer ``layer`` (``L3.mlp``)."""

    layer: int

    def __str__(self) -> str:
        return f"L{self.layer}.mlp"


@dataclass(frozen=True, eq=True, order=False)
class Neuron(_Label):
    """Neuron ``index`` of layer ``layer``'s MLP: its activation times its row of W_out (``L3.N17``)."""

    layer: int
    index: int

    def __str__(self) -> str:
        return f"L{self.layer}.N{self.index}"


@dataclass(frozen=True, eq=True, order=False)
class Bias(_Label):
    """An output bias: ``L3.attn_bias`` (b_O, plus b_V W_O where folded), ``L3.mlp_bias``, ``unembed_bias``."""

    layer: Optional[int]
    sublayer: Literal["attn", "mlp", "unembed"]

    def __str__(self) -> str:
        if self.sublayer == "unembed":
            return "unembed_bias"
        return f"L{self.layer}.{self.sublayer}_bias"

    @property
    def layer_index(self) -> int:
        return 1 << 30 if self.layer is None else self.layer


@dataclass(frozen=True, eq=True, order=False)
class Norm(_Label):
    """A norm: ``L3.ln1`` / ``L3.ln2`` (a block's first / second norm), ``embed_ln``, ``ln_final``.

    (The final norm is ``ln_final``, as its transformer-lens module, so that ``final`` stays the name of
    an encoder's final read; its β is still the term ``final_bias``.)"""

    layer: Optional[int]
    which: Literal["ln1", "ln2", "embed_ln", "final"]

    def __str__(self) -> str:
        if self.layer is not None:
            return f"L{self.layer}.{self.which}"
        return "ln_final" if self.which == "final" else self.which

    @property
    def layer_index(self) -> int:
        return {"embed_ln": -1, "final": 1 << 30}.get(self.which, self.layer if self.layer is not None else -1)


@dataclass(frozen=True, eq=True, order=False)
class NormBias(_Label):
    """A frozen norm's β, a term of its own: ``L3.ln1_bias``, ``embed_ln_bias``, ``final_bias``."""

    norm: Norm

    def __str__(self) -> str:
        return "final_bias" if self.norm.which == "final" else f"{self.norm}_bias"

    @property
    def layer_index(self) -> int:
        return self.norm.layer_index


@dataclass(frozen=True, eq=True, order=False)
class Attn(_Label):
    """A whole attention layer's output Σ_h z_h W_O^h + b_O (``L3.attn``)."""

    layer: int

    def __str__(self) -> str:
        return f"L{self.layer}.attn"


@dataclass(frozen=True, eq=True, order=False)
class HeadSource(_Label):
    """The part of head ``head``'s output at a destination token read from source position ``src``:
    A[dst, src] · v_src W_O^h (``L3.H5[src=4]``). Summed over ``src`` it is the head's term (``L3.H5``)."""

    layer: int
    head: int
    src: int

    def __str__(self) -> str:
        return f"L{self.layer}.H{self.head}[src={self.src}]"

    @property
    def head_label(self) -> Head:
        return Head(self.layer, self.head)


@dataclass(frozen=True, eq=True, order=False)
class Feature(_Label):
    """Dictionary feature ``feature`` of layer ``layer``'s transcoder, active at position ``pos``: a node of an
    attribution graph (``L3.F1234@5``); ``pos=None`` is the feature at every position (``L3.F1234@*``)."""

    layer: int
    feature: int
    pos: Optional[int]

    def __str__(self) -> str:
        return f"L{self.layer}.F{self.feature}@{'*' if self.pos is None else self.pos}"


@dataclass(frozen=True, eq=True, order=False)
class FeatureError(_Label):
    """The error node of layer ``layer``'s transcoder at position ``pos`` (the MLP's real output minus the
    transcoder's): ``L3.mlp_error@5``; ``pos=None`` is the layer's error nodes at every position (``L3.mlp_error@*``,
    an aggregate graph's identity)."""

    layer: int
    pos: Optional[int]

    def __str__(self) -> str:
        return f"L{self.layer}.mlp_error@{'*' if self.pos is None else self.pos}"


@dataclass(frozen=True, eq=True, order=False)
class TargetTerm(_Label):
    """A term an attribution target adds beyond the model's writes: ``log_partition`` (−log Σ_v exp logit_v of a
    log-probability target), ``wrong_lse_remainder`` (the gap of a logsumexp over wrong tokens beyond its
    softmax-weighted mean) or ``softcap_remainder`` (a soft-capped logit c·tanh(z/c) beyond its first order
    z·sech²(z/c) in the pre-cap logit z)."""

    which: Literal["log_partition", "wrong_lse_remainder", "softcap_remainder"]

    def __str__(self) -> str:
        return self.which

    @property
    def layer_index(self) -> int:
        return 1 << 30


# ---------------------------------------------------------------------------------------------
# reads


@dataclass(frozen=True, eq=True, order=False)
class HeadInput(_Label):
    """A head's q, k or v input (``L3.attn.q[H5]``). For k and v, ``head`` is the KV head index."""

    layer: int
    which: Literal["q", "k", "v"]
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}.attn.{self.which}[H{self.head}]"


@dataclass(frozen=True, eq=True, order=False)
class MlpInput(_Label):
    """An MLP's input (``L3.mlp.in``, W_in) or, in gated MLPs, its gate's input (``L3.mlp.gate``)."""

    layer: int
    which: Literal["in", "gate"] = "in"

    def __str__(self) -> str:
        return f"L{self.layer}.mlp.{self.which}"


@dataclass(frozen=True, eq=True, order=False)
class Output(_Label):
    """The model's final read: ``unembed`` (the logits) or ``final`` (an encoder's final hidden state)."""

    which: Literal["unembed", "final"] = "unembed"

    def __str__(self) -> str:
        return self.which

    @property
    def layer_index(self) -> int:
        return 1 << 30


@dataclass(frozen=True, eq=True, order=False)
class Resid(_Label):
    """A resid point, named by its transformer-lens hook (``blocks.3.hook_resid_pre``)."""

    layer: int
    where: Literal["pre", "mid", "post"]

    def __str__(self) -> str:
        return f"blocks.{self.layer}.hook_resid_{self.where}"


# ---------------------------------------------------------------------------------------------
# paths and edges

Write = Union[Embed, Head, Mlp, Neuron, Bias, NormBias, Attn]
Read = Union[HeadInput, MlpInput, Output]
Node = Union[Write, Read, Norm, Resid]


@dataclass(frozen=True, eq=True, order=False)
class Path(_Label):
    """A path-expansion term: a source write followed by the heads it passes through, in layer order
    (``embed``, ``embed→L0.H1``, ``pos_embed→L0.H3→L1.H2``, ``L0.attn_bias→L1.H2``)."""

    source: Write
    heads: tuple[Head, ...] = ()

    def __str__(self) -> str:
        return ARROW.join([str(self.source), *map(str, self.heads)])

    @property
    def order(self) -> int:
        """How many heads the path goes through."""
        return len(self.heads)

    @property
    def layer_index(self) -> int:
        return self.heads[-1].layer if self.heads else self.source.layer_index


@dataclass(frozen=True, eq=True, order=False)
class Edge(_Label):
    """A writer → reader edge of the circuit graph (``L0.H3→L1.attn.k[H2]``, ``L5.mlp→unembed``)."""

    writer: Write
    reader: Read

    def __str__(self) -> str:
        return f"{self.writer}{ARROW}{self.reader}"

    @property
    def layer_index(self) -> int:
        return self.reader.layer_index


Label = Union[Write, Read, Norm, Resid, Path, Edge, HeadSource, TargetTerm, Feature, FeatureError]

# ---------------------------------------------------------------------------------------------
# parsing

_FIXED: dict[str, _Label] = {
    "embed": Embed("token"),
    "pos_embed": Embed("pos"),
    "type_embed": Embed("type"),
    "unembed_bias": Bias(None, "unembed"),
    "embed_ln": Norm(None, "embed_ln"),
    "ln_final": Norm(None, "final"),
    "embed_ln_bias": NormBias(Norm(None, "embed_ln")),
    "final_bias": NormBias(Norm(None, "final")),
    "unembed": Output("unembed"),
    "final": Output("final"),
    "log_partition": TargetTerm("log_partition"),
    "wrong_lse_remainder": TargetTerm("wrong_lse_remainder"),
    "softcap_remainder": TargetTerm("softcap_remainder"),
}
_LAYERED = re.compile(r"L(\d+)\.(.+)")
_RESID = re.compile(r"blocks\.(\d+)\.hook_resid_(pre|mid|post)")
_IN_LAYER: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"H(\d+)"), lambda l, m: Head(l, int(m[1]))),
    (re.compile(r"H(\d+)\[src=(\d+)\]"), lambda l, m: HeadSource(l, int(m[1]), int(m[2]))),
    (re.compile(r"N(\d+)"), lambda l, m: Neuron(l, int(m[1]))),
    (re.compile(r"mlp"), lambda l, m: Mlp(l)),
    (re.compile(r"attn"), lambda l, m: Attn(l)),
    (re.compile(r"(attn|mlp)_bias"), lambda l, m: Bias(l, m[1])),
    (re.compile(r"(ln1|ln2)"), lambda l, m: Norm(l, m[1])),
    (re.compile(r"(ln1|ln2)_bias"), lambda l, m: NormBias(Norm(l, m[1]))),
    (re.compile(r"attn\.([qkv])\[H(\d+)\]"), lambda l, m: HeadInput(l, m[1], int(m[2]))),
    (re.compile(r"mlp\.(in|gate)"), lambda l, m: MlpInput(l, m[1])),
    (re.compile(r"F(\d+)@(\d+|\*)"), lambda l, m: Feature(l, int(m[1]), None if m[2] == "*" else int(m[2]))),
    (re.compile(r"mlp_error@(\d+|\*)"), lambda l, m: FeatureError(l, None if m[1] == "*" else int(m[1]))),
]
_WRITES = (Embed, Head, Mlp, Neuron, Bias, NormBias, Attn)
_READS = (HeadInput, MlpInput, Output)


def _parse_one(text: str) -> Optional[_Label]:
    if text in _FIXED:
        return _FIXED[text]
    if m := _LAYERED.fullmatch(text):
        layer, rest = int(m[1]), m[2]
        for pattern, make in _IN_LAYER:
            if mm := pattern.fullmatch(rest):
                return make(layer, mm)
        return None
    if m := _RESID.fullmatch(text):
        return Resid(int(m[1]), m[2])  # type: ignore[arg-type]
    return None


def parse(text: Any) -> Label:
    """The label named by ``text`` (any kind); a label object is returned unchanged.

    Raises :class:`~interp.errors.LabelError` for text that is not in the grammar (this checks the
    grammar only; whether a model has that layer or head is checked where a model is known).
    """
    if isinstance(text, _Label):
        return text  # type: ignore[return-value]
    if not isinstance(text, str):
        raise LabelError(f"label={text!r} must be a str or an interp.labels label, not {type(text).__name__}")
    if ARROW in text:
        first, *rest = text.split(ARROW)
        parts = [_parse_one(p) for p in (first, *rest)]
        if all(p is not None for p in parts):
            if len(parts) == 2 and isinstance(parts[0], _WRITES) and isinstance(parts[1], _READS):
                return Edge(parts[0], parts[1])
            if isinstance(parts[0], _WRITES) and all(isinstance(p, Head) for p in parts[1:]):
                return Path(parts[0], tuple(parts[1:]))  # type: ignore[arg-type]
        raise LabelError(
            f"label={text!r} is neither a path (a write then heads, e.g. 'embed→L0.H1→L1.H2') "
            f"nor an edge (a write then a read, e.g. 'L0.H3→L1.attn.k[H2]')"
        )
    lab = _parse_one(text)
    if lab is None and re.fullmatch(r"L\d+\.F\d+", text):
        raise LabelError(
            f"label={text!r} names a feature without its position: write {text + '@5'!r} for position 5 "
            f"or {text + '@*'!r} for every position"
        )
    if lab is None and (m := re.fullmatch(r"(L(\d+)\.(?:F(\d+)|mlp_error))@-(\d+)", text)):
        arg = (
            f", or give -{m[4]} as a position argument, which may count from the end: "
            f"Intervention.ablate(({m[2]}, {m[3]}, -{m[4]}))"
            if m[3]
            else ""
        )
        raise LabelError(
            f"label={text!r} has a negative position: a label names one node of a graph at an absolute position "
            "(0 = the first token), the same node whatever the prompt's length, so it cannot count from the end. "
            f"Write the position ({m[1] + '@5'!r}){arg}"
        )
    if lab is None:
        raise LabelError(
            f"label={text!r} is not an interp label; labels look like 'embed', 'L3.H5', 'L3.mlp', "
            f"'L3.N17', 'L3.H5[src=4]', 'L3.attn_bias', 'L3.ln1_bias', 'L3.attn.q[H5]', 'L3.mlp.in', 'unembed', "
            f"'L3.F12@5', 'L3.F12@*', 'L3.mlp_error@5', "
            f"'blocks.3.hook_resid_pre', 'embed→L0.H1', 'L0.H3→L1.attn.k[H2]'"
        )
    return lab  # type: ignore[return-value]


def parse_write(text: Any, *, name: str = "label") -> Write:
    """``text`` as a write label, or a :class:`LabelError` naming argument ``name``."""
    return _as(text, _WRITES, name, "a write (embed, L3.H5, L3.mlp, L3.N17, L3.attn_bias, L3.ln1_bias, ...)")


def parse_read(text: Any, *, name: str = "label") -> Read:
    """``text`` as a read label, or a :class:`LabelError` naming argument ``name``."""
    return _as(text, _READS, name, "a read (L3.attn.q[H5], L3.attn.k[H1], L3.mlp.in, unembed, final)")


def as_label(text: Any, kinds: Union[type, tuple[type, ...]], *, name: str = "label") -> Any:
    """``text`` (a label or its text) as one of ``kinds``, or a :class:`LabelError` naming ``name``."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return _as(text, kinds, name, " or ".join(k.__name__ for k in kinds))


def _as(text: Any, kinds: tuple, name: str, what: str) -> Any:
    try:
        lab = parse(text)
    except LabelError as e:
        raise LabelError(f"{name}={text!r} is not a label: {e}") from None
    if not isinstance(lab, kinds):
        raise LabelError(f"{name}={text!r} is a {type(lab).__name__} label; expected {what}")
    return lab
