"""The circuit viewer's layout: which edges are drawn and where every node sits.

x is the forward order — the embeddings, then per layer its attention column and its MLP column (only the columns
that have nodes), then the output; y is the index within the layer (head h at y = h). A head is one node: its output
leaves the node, and its inputs are ports on its left — q beside the head, k and v further left. Under GQA (query
head h reads KV head h // group) a KV head's k and v ports sit at the middle of the query heads that share them and
are joined to each. The edges drawn are the ``max_edges`` largest |score| or, with steps, the union of the steps'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from interp import labels as L
from interp._validate import check_int_range
from interp.errors import ArgumentError, LabelError

__all__ = [
    "Grid",
    "Node",
    "circuit_layout",
    "drawn_edges",
    "parse_edges",
    "place_nodes",
    "read_steps",
    "split_edge",
    "step_views",
]

#: how far left of its head (or MLP) each input port sits, and how far a KV head's k / v port sits above / below
_PORT_DX = {"q": 0.2, "k": 0.36, "v": 0.36, "in": 0.2, "gate": 0.2}
_KV_DY = 0.17


@dataclass(frozen=True)
class Node:
    """A drawn node: its label, kind and place."""

    label: str
    kind: str  # "head" | "port" | "mlp" | "embed" | "output" | "bias" | "neuron" | "other"
    x: float
    y: float
    owner: str  # the node a port belongs to ("" for non-ports)


def split_edge(edge: Any, i: int) -> tuple[str, str]:
    """The writer and reader texts of ``edges[i]`` (a str or an :class:`interp.labels.Edge`)."""
    text = str(edge) if isinstance(edge, L.Edge) else edge
    if not isinstance(text, str):
        raise ArgumentError(f"edges[{i}]={edge!r} must be an edge label such as 'L0.H3→L1.attn.k[H2]' (str or Edge)")
    w, sep, r = text.partition(L.ARROW)
    if not sep:
        raise LabelError(
            f"edges[{i}]={text!r} is not an edge label: expected 'writer{L.ARROW}reader', "
            f"e.g. 'L0.H3{L.ARROW}L1.attn.k[H2]'"
        )
    return w, r


class Grid:
    """Places every node: columns in forward order, heads by index, ports beside their head."""

    def __init__(
        self,
        writers: Sequence[Any],
        readers: Sequence[Any],
        n_layers: Optional[int],
        n_heads: Optional[int],
        n_kv_heads: Optional[int],
    ) -> None:
        labs = [*writers, *readers]
        heads = [lab.head for lab in labs if isinstance(lab, L.Head)]
        heads += [lab.head for lab in labs if isinstance(lab, L.HeadInput) and lab.which == "q"]
        kv = [lab.head for lab in labs if isinstance(lab, L.HeadInput) and lab.which != "q"]
        layers = [lab.layer for lab in labs if getattr(lab, "layer", None) is not None]
        self.n_layers = n_layers if n_layers is not None else (max(layers) + 1 if layers else 0)
        self.n_heads = n_heads if n_heads is not None else max([*heads, *kv, 0]) + 1
        n_kv = n_kv_heads if n_kv_heads is not None else (max(kv) + 1 if kv else self.n_heads)
        # GQA: query head h reads KV head h // group; an inferred n_kv that does not divide n_heads is not a grouping
        self.group = self.n_heads // n_kv if 0 < n_kv <= self.n_heads and self.n_heads % n_kv == 0 else 1
        self.centre = (self.n_heads - 1) / 2
        cols = {(-1, 0)}  # embeddings
        for lab in labs:
            cols.add(self._column(lab))
        self.columns = sorted(cols)
        self.x_of = {c: float(i) for i, c in enumerate(self.columns)}
        self._neuron_rank: dict[tuple[int, int], int] = {}
        for lab in sorted({lab for lab in labs if isinstance(lab, L.Neuron)}, key=lambda n: (n.layer, n.index)):
            self._neuron_rank[(lab.layer, lab.index)] = sum(1 for k in self._neuron_rank if k[0] == lab.layer)

    def _column(self, lab: Any) -> tuple[int, int]:
        """(layer, 0 attention | 1 MLP | 2 after the MLP); (-1, 0) the embeddings, (big, 0) the output."""
        if isinstance(lab, (L.Embed,)) or (isinstance(lab, L.NormBias) and lab.norm.which == "embed_ln"):
            return (-1, 0)
        if (
            isinstance(lab, L.Output)
            or (isinstance(lab, L.NormBias) and lab.norm.which == "final")
            or (isinstance(lab, L.Bias) and lab.sublayer == "unembed")
        ):
            return (1 << 30, 0)
        if isinstance(lab, (L.Head, L.HeadInput, L.Attn)):
            return (lab.layer, 0)
        if isinstance(lab, L.Bias):
            return (lab.layer_index, 0 if lab.sublayer == "attn" else 1)
        if isinstance(lab, (L.Mlp, L.MlpInput, L.Neuron)):
            return (lab.layer, 1)
        if isinstance(lab, L.NormBias):
            return (lab.layer_index, 0 if lab.norm.which == "ln1" else 1)
        return (lab.layer_index, 1)

    def ticks(self, *, short: bool = False) -> tuple[list[float], list[str]]:
        """The x axis's ticks: one per column ("L3 attn", "L3 mlp"), or with ``short`` one per layer ("L3",
        between its columns)."""
        xs: dict[str, list[float]] = {}
        for layer, sub in self.columns:
            if layer in (-1, 1 << 30):
                name = ("emb" if short else "embed") if layer == -1 else ("out" if short else "output")
            else:
                name = f"L{layer}" if short else f"L{layer} {'attn' if sub == 0 else 'mlp'}"
            xs.setdefault(name, []).append(self.x_of[(layer, sub)])
        return [sum(v) / len(v) for v in xs.values()], list(xs)

    def place(self, lab: Any) -> Node:
        x = self.x_of[self._column(lab)]
        c, nh, s = self.centre, self.n_heads, str(lab)
        cm = math.floor(c) + 0.5  # MLPs sit between two head rows, so their labels clear the heads'
        if isinstance(lab, L.Head):
            return Node(s, "head", x, float(lab.head), "")
        if isinstance(lab, L.HeadInput):
            if lab.which == "q":
                return Node(s, "port", x - _PORT_DX["q"], float(lab.head), str(L.Head(lab.layer, lab.head)))
            mid = lab.head * self.group + (self.group - 1) / 2  # the middle of the query heads sharing this KV head
            dy = -_KV_DY if lab.which == "k" else _KV_DY
            return Node(s, "port", x - _PORT_DX[lab.which], mid + dy, "")
        if isinstance(lab, L.Mlp):
            return Node(s, "mlp", x, cm, "")
        if isinstance(lab, L.MlpInput):
            return Node(
                s, "port", x - _PORT_DX[lab.which], cm + (0.3 if lab.which == "gate" else 0.0), str(L.Mlp(lab.layer))
            )
        if isinstance(lab, L.Neuron):
            return Node(s, "neuron", x, c + 1.0 + 0.5 * self._neuron_rank[(lab.layer, lab.index)], "")
        if isinstance(lab, L.Embed):
            return Node(s, "embed", x, c + {"token": 0.0, "pos": 1.5, "type": -1.5}[lab.which], "")
        if isinstance(lab, L.Output):
            return Node(s, "output", x, c, "")
        if isinstance(lab, L.Attn):
            return Node(s, "other", x, -1.0, "")
        if isinstance(lab, L.Bias):
            return Node(s, "bias", x + 0.25, float(nh) if lab.sublayer == "attn" else c + 1.5, "")
        if isinstance(lab, L.NormBias):
            return Node(s, "bias", x + 0.4, float(nh) + 0.5, "")
        return Node(s, "other", x, float(nh) + 1.0, "")

    def kv_readers(self, lab: Any) -> list[str]:
        """The query heads that read through a KV port (joined to it by thin lines)."""
        return [str(L.Head(lab.layer, h)) for h in range(lab.head * self.group, (lab.head + 1) * self.group)]


def circuit_layout(
    edges: Sequence[Any],
    *,
    n_layers: Optional[int] = None,
    n_heads: Optional[int] = None,
    n_kv_heads: Optional[int] = None,
) -> dict[str, tuple[float, float]]:
    """The (x, y) of every node the edges touch (heads, ports, MLPs, embeddings, output), as drawn."""
    w_txt, r_txt = zip(*(split_edge(e, i) for i, e in enumerate(edges))) if len(edges) else ((), ())
    parsed = {t: L.parse(t) for t in {*w_txt, *r_txt}}
    grid = Grid([parsed[t] for t in w_txt], [parsed[t] for t in r_txt], n_layers, n_heads, n_kv_heads)
    out = {}
    for lab in parsed.values():
        node = grid.place(lab)
        out[node.label] = (node.x, node.y)
    return out


def parse_edges(edges: list[str], keep: np.ndarray) -> tuple[list[str], list[str], dict[str, Any]]:
    """The drawn edges' writer and reader texts, and each text parsed; an edge must join a write to a read."""
    w_txt, r_txt = [], []
    for i in keep:
        w, r = split_edge(edges[i], int(i))
        w_txt.append(w)
        r_txt.append(r)
    parsed: dict[str, Any] = {}
    for t in sorted({*w_txt, *r_txt}):
        try:
            parsed[t] = L.parse(t)
        except LabelError as e:
            raise LabelError(f"edges holds {t!r}, which is not a label: {e}") from None
    for i, (w, r) in enumerate(zip(w_txt, r_txt)):
        if not isinstance(parsed[w], L._WRITES) or not isinstance(parsed[r], L._READS):
            raise LabelError(
                f"edges[{int(keep[i])}]={edges[keep[i]]!r} must join a write (embed, L3.H5, L3.mlp, "
                f"...) to a read (L3.attn.q[H5], L3.attn.k[H1], L3.mlp.in, unembed)"
            )
    return w_txt, r_txt, parsed


def place_nodes(
    grid: Grid, parsed: Mapping[str, Any], w_txt: list[str], r_txt: list[str], described: Optional[Mapping[str, Any]]
) -> tuple[dict[str, Node], dict[str, list[str]]]:
    """Every node drawn (the edges' ends, the ``described`` nodes, ports' owners, KV ports' query heads), and the
    query heads each KV port is read by."""
    nodes: dict[str, Node] = {}
    for t in sorted({*w_txt, *r_txt}):
        node = grid.place(parsed[t])
        nodes[node.label] = node
    for t in described or {}:  # described nodes are drawn even without a drawn edge
        try:
            lab = L.parse(t)
        except LabelError:
            continue
        if isinstance(lab, (*L._WRITES, *L._READS)) and t not in nodes:
            try:
                node = grid.place(lab)
            except KeyError:  # a column no edge opened
                continue
            nodes[node.label] = node
    for node in list(nodes.values()):  # a q or MLP port implies its owner node
        if node.owner and node.owner not in nodes:
            nodes[node.owner] = grid.place(L.parse(node.owner))
    kv_of = {
        t: grid.kv_readers(parsed[t])
        for t in sorted(set(r_txt))
        if isinstance(parsed[t], L.HeadInput) and parsed[t].which != "q"
    }
    for hs in kv_of.values():
        for h in hs:
            if h not in nodes:
                nodes[h] = grid.place(L.parse(h))
    return nodes, kv_of


def read_steps(steps: Any, step_labels: Any, edges: list[str]) -> list[tuple[list[int], str]]:
    """(indices into ``edges``, slider label) per step; every step's edges must be among ``edges``."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
        raise ArgumentError(
            f"steps must be a non-empty list of circuits (lists of edge labels or objects with "
            f".edges), got {type(steps).__name__}"
        )
    if step_labels is not None and (isinstance(step_labels, str) or len(step_labels) != len(steps)):
        raise ArgumentError(f"step_labels must name each of the {len(steps)} steps, got {step_labels!r:.80}")
    pos = {e: i for i, e in enumerate(edges)}
    out = []
    for j, st in enumerate(steps):
        st = getattr(st, "edges", st)
        if isinstance(st, (str, bytes)) or not isinstance(st, Sequence):
            raise ArgumentError(f"steps[{j}] must be a list of edge labels or have .edges, got {type(st).__name__}")
        missing = [str(e) for e in st if str(e) not in pos]
        if missing:
            raise LabelError(f"steps[{j}] names {len(missing)} edges that are not in edges, e.g. {missing[0]!r}")
        label = str(step_labels[j]) if step_labels is not None else f"{len(st):,} edges"
        out.append(([pos[str(e)] for e in st], label))
    return out


def drawn_edges(
    s: np.ndarray, max_edges: int, sets: Optional[list[tuple[list[int], str]]], active: Optional[int]
) -> tuple[np.ndarray, Optional[int]]:
    """The indices of the drawn edges in the caller's order, and the step drawn first (``active`` mod steps)."""
    if sets is None:
        order = np.argsort(-np.nan_to_num(np.abs(s), nan=-1.0), kind="stable")[:max_edges]  # NaN (no score) last
        return np.sort(order), active
    keep = np.array(sorted(set().union(*(set(st) for st, _ in sets))), dtype=np.int64)
    if active is None:
        active = len(sets) - 1
    check_int_range("active", active, -len(sets), len(sets))
    return keep, active % len(sets)


def step_views(
    keep: np.ndarray,
    w_txt: list[str],
    r_txt: list[str],
    nodes: Mapping[str, Node],
    kv_of: Mapping[str, list[str]],
    sets: Optional[list[tuple[list[int], str]]],
) -> list[tuple[np.ndarray, list[str], str]]:
    """(edges drawn as positions in ``keep``, node labels drawn, slider label) per view: the whole graph, or each
    step with its ports' owners and its KV ports' query heads."""
    if sets is None:
        return [(np.arange(len(keep)), [*w_txt, *r_txt, *nodes], "")]
    pos_in_keep = {int(i): k for k, i in enumerate(keep)}
    views: list[tuple[np.ndarray, list[str], str]] = []
    for st, step_name in sets:
        sel = np.array(sorted(pos_in_keep[int(i)] for i in st), dtype=np.int64)
        labels = [*(w_txt[k] for k in sel), *(r_txt[k] for k in sel)]
        labels += [nodes[t].owner for t in labels if nodes[t].owner]
        labels += [h for t in labels if t in kv_of for h in kv_of[t]]
        views.append((sel, labels, step_name))
    return views
