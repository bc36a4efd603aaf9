"""The circuit viewer: an edge-level circuit graph (writer → reader) as one interactive plotly figure.

An edge joins a writer (an embedding, a head's output z_h W_O^h, an MLP's output, a bias) to a later
reader (a query head's q input, a KV head's k or v input, an MLP's input, the logits). Its score is what
the caller computed — e.g. edge attribution patching, score(w → r) = (a_w(clean) − a_w(corrupt)) · ∂M/∂x_r,
with the exact patching effect where it was computed (Syed et al. 2023; Conmy et al. 2023).

Layout: x is the forward order — the embeddings, then per layer its attention column and its MLP column
(only the columns that have nodes), then the output; y is the index within the layer (head h at y = h).
A head is one node: its output leaves the node, and its inputs are ports on its left — q beside the
head, k and v further left. Under GQA a KV head's k and v ports sit at the middle of the query heads
that share them and are joined to each. Edge width and opacity grow with |score| (``n_bins`` bins of
√(|score| / max |score|) — square-root spacing, so that a heavy-tailed score distribution does not leave
all but the largest edge in the faintest bin; ``scale="linear"`` for even spacing, ``scale="log"`` for bins
of equal ratio between the smallest and the largest |score| drawn, for scores that span decades); colour is
the sign (blue positive: the edge supports the metric; red negative: it opposes it — interp's one sign
convention, docs/math.md "Sign convention").

Size and speed: the edges of one (bin, sign) group are one SVG path of quadratic curves (a layout shape:
2 × ``n_bins`` paths in all, each with its legend entry), and one trace of invisible markers at the curves'
midpoints carries every edge's hover text; plotly draws only one of those markers (``maxdisplayed``) while
hovering still finds them all. Line traces with gaps would draw one SVG element per segment and a marker
per edge another, which costs more than a second for 5,000 edges; this draws a few dozen elements plus
the nodes. Only the ``max_edges`` edges with the largest |score| are drawn (the subtitle says how many).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from interp import labels as L
from interp._validate import check_choice, check_int_range, check_positive_int, is_int, is_real
from interp.errors import ArgumentError, LabelError, ShapeError
from interp.plots._common import as_numpy, esc, fmt

__all__ = ["circuit_graph_figure", "circuit_layout"]

#: Edge colours per |score| bin, weakest first (RdBu's blue and red halves).
_POS = ["#92c5de", "#4393c3", "#2166ac", "#1a4f8a", "#053061"]
_NEG = ["#f4a582", "#d6604d", "#b2182b", "#8c0d25", "#67001f"]
#: above this many columns the axis names layers only and node labels are left to the hover
_DENSE_COLUMNS = 28
#: the plot area's width the marker sizes assume (a 1,400 px window, less the page's and the figure's margins)
_PLOT_PX = 1100.0
_PORT_DX = {"q": 0.2, "k": 0.36, "v": 0.36, "in": 0.2, "gate": 0.2}
_KV_DY = 0.17


@dataclass(frozen=True)
class _Node:
    label: str
    kind: str  # "head" | "port" | "mlp" | "embed" | "output" | "bias" | "neuron" | "other"
    x: float
    y: float
    owner: str  # the node a port belongs to ("" for non-ports)


def _bin_colours(n_bins: int, palette: list[str]) -> list[str]:
    if n_bins <= len(palette):
        idx = np.round(np.linspace(0, len(palette) - 1, n_bins)).astype(int)
        return [palette[i] for i in idx]
    return [palette[min(len(palette) - 1, i * len(palette) // n_bins)] for i in range(n_bins)]


def _split_edge(edge: Any, i: int) -> tuple[str, str]:
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


class _Grid:
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

    def place(self, lab: Any) -> _Node:
        x = self.x_of[self._column(lab)]
        c, nh, s = self.centre, self.n_heads, str(lab)
        cm = math.floor(c) + 0.5  # MLPs sit between two head rows, so their labels clear the heads'
        if isinstance(lab, L.Head):
            return _Node(s, "head", x, float(lab.head), "")
        if isinstance(lab, L.HeadInput):
            if lab.which == "q":
                return _Node(s, "port", x - _PORT_DX["q"], float(lab.head), str(L.Head(lab.layer, lab.head)))
            mid = lab.head * self.group + (self.group - 1) / 2  # the middle of the query heads sharing this KV head
            dy = -_KV_DY if lab.which == "k" else _KV_DY
            return _Node(s, "port", x - _PORT_DX[lab.which], mid + dy, "")
        if isinstance(lab, L.Mlp):
            return _Node(s, "mlp", x, cm, "")
        if isinstance(lab, L.MlpInput):
            return _Node(
                s, "port", x - _PORT_DX[lab.which], cm + (0.3 if lab.which == "gate" else 0.0), str(L.Mlp(lab.layer))
            )
        if isinstance(lab, L.Neuron):
            return _Node(s, "neuron", x, c + 1.0 + 0.5 * self._neuron_rank[(lab.layer, lab.index)], "")
        if isinstance(lab, L.Embed):
            return _Node(s, "embed", x, c + {"token": 0.0, "pos": 1.5, "type": -1.5}[lab.which], "")
        if isinstance(lab, L.Output):
            return _Node(s, "output", x, c, "")
        if isinstance(lab, L.Attn):
            return _Node(s, "other", x, -1.0, "")
        if isinstance(lab, L.Bias):
            return _Node(s, "bias", x + 0.25, float(nh) if lab.sublayer == "attn" else c + 1.5, "")
        if isinstance(lab, L.NormBias):
            return _Node(s, "bias", x + 0.4, float(nh) + 0.5, "")
        return _Node(s, "other", x, float(nh) + 1.0, "")

    def kv_readers(self, lab: Any) -> list[str]:
        """The query heads that read through a KV port (joined to it by thin lines)."""
        return [str(L.Head(lab.layer, h)) for h in range(lab.head * self.group, (lab.head + 1) * self.group)]


def _read_inputs(
    edges: Any, scores: Any, exact: Any, n_layers: Any, n_heads: Any, n_kv_heads: Any, title: Optional[str]
) -> tuple[list[str], np.ndarray, Optional[np.ndarray], Any, Any, Any, str]:
    """Plain attributes from a result (``.edges``, ``.scores``, optional ``.exact``) or the arguments."""
    if hasattr(edges, "edges") and hasattr(edges, "scores"):
        res = edges
        edges, scores = res.edges, res.scores if scores is None else scores
        exact = getattr(res, "exact", None) if exact is None else exact
        arch = getattr(res, "arch", None)

        def count(attr: str, given: Any) -> Any:
            v = getattr(res, attr, None) if given is None else given
            v = getattr(arch, attr, None) if v is None else v
            return v if is_int(v) and v > 0 else given  # 0: not known

        n_layers, n_heads = count("n_layers", n_layers), count("n_heads", n_heads)
        n_kv_heads = count("n_kv_heads", n_kv_heads)
        if title is None:
            parts = [str(v) for v in (getattr(res, "model_name", None), getattr(res, "method", None)) if v]
            metric = getattr(res, "metric", None)
            title = (
                "Circuit graph" + (f" — {', '.join(parts)}" if parts else "") + (f"; metric {metric}" if metric else "")
            )
    if scores is None:
        raise ArgumentError("scores is None: give one score per edge (or a result with .edges and .scores)")
    if isinstance(edges, (str, bytes)) or not isinstance(edges, Sequence):
        raise ArgumentError(f"edges must be a sequence of edge labels, got {type(edges).__name__}")
    edges = [str(e) if isinstance(e, L.Edge) else e for e in edges]
    s = as_numpy(scores, name="scores")
    if s.ndim != 1:
        raise ShapeError(f"scores must be one number per edge (1-D), got shape {tuple(s.shape)}")
    if len(s) != len(edges):
        raise ShapeError(f"scores has {len(s)} values for {len(edges)} edges")
    if len(edges) == 0:
        raise ArgumentError("edges is empty: there is no edge to draw")
    bad = np.flatnonzero(np.isinf(s))
    if len(bad):
        raise ArgumentError(
            f"scores[{int(bad[0])}]={s[bad[0]]!r} (edge {edges[bad[0]]!r}) is infinite; "
            f"{len(bad)} infinite scores in all (NaN marks an edge without a score)"
        )
    ex = None
    if exact is not None:
        if isinstance(exact, Mapping):
            unknown = [k for k in exact if str(k) not in set(edges)]
            if unknown:
                raise LabelError(f"exact names {len(unknown)} edges that are not in edges, e.g. {str(unknown[0])!r}")
            ex = np.full(len(edges), np.nan)
            pos = {e: i for i, e in enumerate(edges)}
            for k, v in exact.items():
                ex[pos[str(k)]] = float(v)
        else:
            ex = as_numpy(exact, name="exact").reshape(-1)
            if len(ex) != len(edges):
                raise ShapeError(f"exact has {len(ex)} values for {len(edges)} edges (NaN where not computed)")
    return edges, s, ex, n_layers, n_heads, n_kv_heads, title or "Circuit graph"


def _info_lines(info: Optional[Mapping[str, Any]]) -> list[str]:
    """``key: value`` hover lines; numbers formatted, text escaped, lists one item per line."""
    out = []
    for k, v in (info or {}).items():
        if isinstance(v, (list, tuple)):
            items = [fmt(float(x)) if is_real(x) else esc(x) for x in v]
            out.append(f"{esc(k)}:<br>&nbsp;&nbsp;" + "<br>&nbsp;&nbsp;".join(items))
        elif is_real(v):
            out.append(f"{esc(k)}: {fmt(float(v))}")
        else:
            out.append(f"{esc(k)}: {esc(v)}")
    return out


def circuit_layout(
    edges: Sequence[Any],
    *,
    n_layers: Optional[int] = None,
    n_heads: Optional[int] = None,
    n_kv_heads: Optional[int] = None,
) -> dict[str, tuple[float, float]]:
    """The (x, y) of every node the edges touch (heads, ports, MLPs, embeddings, output), as drawn."""
    w_txt, r_txt = zip(*(_split_edge(e, i) for i, e in enumerate(edges))) if len(edges) else ((), ())
    parsed = {t: L.parse(t) for t in {*w_txt, *r_txt}}
    grid = _Grid([parsed[t] for t in w_txt], [parsed[t] for t in r_txt], n_layers, n_heads, n_kv_heads)
    out = {}
    for lab in parsed.values():
        node = grid.place(lab)
        out[node.label] = (node.x, node.y)
    return out


def circuit_graph_figure(
    edges: Any,
    scores: Any = None,
    *,
    exact: Any = None,
    node_info: Optional[Mapping[str, Mapping[str, Any]]] = None,
    node_value: str = "DLA",
    max_edges: int = 5000,
    n_bins: int = 5,
    scale: str = "sqrt",
    n_layers: Optional[int] = None,
    n_heads: Optional[int] = None,
    n_kv_heads: Optional[int] = None,
    score_name: str = "score",
    title: Optional[str] = None,
    steps: Optional[Sequence[Any]] = None,
    step_labels: Optional[Sequence[str]] = None,
    active: Optional[int] = None,
) -> go.Figure:
    """The circuit graph: nodes by layer, edge width/opacity by |score|, colour by sign, hover on edges and nodes.

    ``edges``: edge labels ``'L0.H3→L1.attn.k[H2]'`` (str or :class:`interp.labels.Edge`), or a result
    with ``.edges`` and ``.scores`` (and optionally ``.exact``, ``.n_layers``/``.n_heads``/``.n_kv_heads``);
    ``scores``: one number per edge (NaN: an edge without a score, drawn dotted grey); ``exact``: the exact
    patching effect per edge (NaN where not computed) or a mapping edge → effect — shown in the edge's hover;
    ``node_info``: per node label (``'L3.H5'``, ``'L3.mlp'``, a port ``'L3.attn.q[H5]'``) a mapping of hover lines, e.g.
    ``{"DLA": 0.41, "attends to": "“ Mary”@4 0.62", "OV top tokens": ["“ Mary” → “ Mary” 3.1"]}``; nodes
    are coloured by the numeric entry ``node_value``. ``max_edges``: draw the edges with the largest
    |score| (the subtitle says how many were left out); ``n_heads`` / ``n_kv_heads``: the model's head
    counts (else read from the labels; give them under GQA when not every KV head appears);
    ``n_bins`` / ``scale``: how |score| maps to width and opacity ("sqrt", "linear" or "log" bin spacing).

    ``steps``: nested circuits to choose between with a slider in the figure (works offline, in the page):
    each a list of edge labels or an object with ``.edges`` (an ``EdgeCircuit``), every edge one of
    ``edges``; ``step_labels`` names each on the slider; ``active`` is the one drawn first (default the
    last). Each step draws its own edges and the nodes they touch, with the same layout, bins and colours
    for every step; ``max_edges`` is not used then (the steps say what is drawn).

    The figure has no fixed width (it fills its container); with many layers the columns are labelled by
    layer only, node labels are left to the hover and markers shrink, so that 30 layers fit in 1,400 px.
    """
    # 1. the inputs read and checked
    edges, s, ex, n_layers, n_heads, n_kv_heads, title = _read_inputs(
        edges, scores, exact, n_layers, n_heads, n_kv_heads, title
    )
    _check_options(max_edges, n_bins, scale, n_layers, n_heads, n_kv_heads, node_info)
    # 2. the edges drawn: the max_edges largest |score|, or the union of the steps
    sets = _read_steps(steps, step_labels, edges) if steps is not None else None
    keep, active = _drawn_edges(s, max_edges, sets, active)
    # 3. their writers and readers parsed, and every node placed on the grid
    w_txt, r_txt, parsed = _parse_edges(edges, keep)
    grid = _Grid([parsed[t] for t in w_txt], [parsed[t] for t in r_txt], n_layers, n_heads, n_kv_heads)
    nodes, kv_of = _place_nodes(grid, parsed, w_txt, r_txt, node_info if sets is None else None)
    # 4. each drawn edge's curve, |score| bin and hover; each node's hover and colour value
    arcs = _arcs(nodes, w_txt, r_txt, s, ex, keep, score_name, scale, n_bins)
    node_hover, node_value_of = _node_hovers(nodes, edges, s, node_info, node_value, score_name, grid)
    scene = _Scene(
        nodes, kv_of, arcs, node_hover, node_value_of, grid, score_name, n_bins, len(edges), ranked=sets is None
    )
    # 5. one drawing per view: the whole graph, or each step
    views = _views(keep, w_txt, r_txt, nodes, kv_of, sets)
    drawn = [scene.draw(sel, labels) for sel, labels, _ in views]
    # 6. the figure: the first view's traces and layout, and with steps a slider over the views
    first = drawn[active if sets is not None and active is not None else 0]
    fig = go.Figure()
    _add_traces(fig, first[1], scene, node_value, stepped=sets is not None)
    head = f"{esc(title)}<br><sup>"
    fig.update_layout(**_layout(scene, head + first[2] + "</sup>", first[0], stepped=sets is not None))
    if sets is not None:
        fig.update_layout(sliders=[_slider(views, drawn, head, active, len(fig.data))])
    return fig


def _check_options(
    max_edges: Any, n_bins: Any, scale: Any, n_layers: Any, n_heads: Any, n_kv_heads: Any, node_info: Any
) -> None:
    """The drawing options checked (typed errors naming the argument)."""
    check_positive_int("max_edges", max_edges)
    check_int_range("n_bins", n_bins, 1, 10)
    check_choice("scale", scale, ("sqrt", "linear", "log"))
    for name, v in (("n_layers", n_layers), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        check_positive_int(name, v, allow_none=True)
    if node_info is not None and not isinstance(node_info, Mapping):
        raise ArgumentError(
            f"node_info must be a mapping node label -> {{name: value}}, got {type(node_info).__name__}"
        )


def _drawn_edges(
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


def _parse_edges(edges: list[str], keep: np.ndarray) -> tuple[list[str], list[str], dict[str, Any]]:
    """The drawn edges' writer and reader texts, and each text parsed; an edge must join a write to a read."""
    w_txt, r_txt = [], []
    for i in keep:
        w, r = _split_edge(edges[i], int(i))
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


def _place_nodes(
    grid: _Grid, parsed: Mapping[str, Any], w_txt: list[str], r_txt: list[str], described: Optional[Mapping[str, Any]]
) -> tuple[dict[str, _Node], dict[str, list[str]]]:
    """Every node drawn (the edges' ends, the ``described`` nodes, ports' owners, KV ports' query heads), and the
    query heads each KV port is read by."""
    nodes: dict[str, _Node] = {}
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


@dataclass(frozen=True)
class _Arcs:
    """The drawn edges as curves: ends (wx, wy) → (rx, ry), control height cy, score, |score| bin (−1: no
    score), hover text and hover point; ``smax``, ``fmin`` and ``scale`` give each bin's |score| range."""

    wx: np.ndarray
    wy: np.ndarray
    rx: np.ndarray
    ry: np.ndarray
    cy: np.ndarray
    scores: np.ndarray
    bins: np.ndarray
    hover: list[str]
    mid_x: np.ndarray
    mid_y: np.ndarray
    smax: float
    fmin: float
    scale: str

    def bin_edge(self, q: float) -> float:
        """The |score| at fraction q of the bin scale."""
        scale, fmin = self.scale, self.fmin
        return self.smax * (q if scale == "linear" else q * q if scale == "sqrt" else fmin ** (1 - q) if fmin else q)


def _arcs(
    nodes: Mapping[str, _Node],
    w_txt: list[str],
    r_txt: list[str],
    s: np.ndarray,
    ex: Optional[np.ndarray],
    keep: np.ndarray,
    score_name: str,
    scale: str,
    n_bins: int,
) -> _Arcs:
    """Each drawn edge's curve (longer edges arc higher), |score| bin and hover text at its midpoint."""
    wx = np.array([nodes[w].x for w in w_txt], dtype=np.float64)
    wy = np.array([nodes[w].y for w in w_txt], dtype=np.float64)
    rx = np.array([nodes[r].x for r in r_txt], dtype=np.float64)
    ry = np.array([nodes[r].y for r in r_txt], dtype=np.float64)
    cy = (wy + ry) / 2 - _bend(wx, rx)  # control points (y grows downwards: minus lifts the arc)
    ss = s[keep]
    bins, smax, fmin = _score_bins(ss, scale, n_bins)
    # hover text at the edges' midpoints (invisible markers, of which plotly draws one: maxdisplayed)
    mid_x = ((wx + rx) / 2).astype(np.float32)
    mid_y = (0.25 * wy + 0.25 * ry + 0.5 * cy).astype(np.float32)
    return _Arcs(
        wx,
        wy,
        rx,
        ry,
        cy,
        ss,
        bins,
        _edge_hovers(w_txt, r_txt, s, ex, keep, score_name),
        mid_x,
        mid_y,
        smax,
        fmin,
        scale,
    )


def _score_bins(ss: np.ndarray, scale: str, n_bins: int) -> tuple[np.ndarray, float, float]:
    """Each score's |score| bin on the ``scale`` spacing (−1: no score), the largest |score| (1 when none) and,
    for ``log``, the smallest nonzero |score| / the largest (0 when none)."""
    scored = np.isfinite(ss)
    smax = float(np.abs(ss[scored]).max()) if scored.any() else 0.0
    smax = smax or 1.0
    frac = np.where(scored, np.abs(ss), 0.0) / smax
    nonzero = frac[scored & (frac > 0)]
    fmin = float(nonzero.min()) if len(nonzero) and nonzero.min() < 1 else 0.0  # log: the smallest |score| drawn
    if scale == "sqrt":
        frac = np.sqrt(frac)
    elif scale == "log":
        frac = (
            np.clip(np.log(np.maximum(frac, fmin) / fmin) / -math.log(fmin), 0, 1)
            if fmin
            else (frac > 0).astype(np.float64)
        )
    bins = np.where(scored, np.minimum((frac * n_bins).astype(int), n_bins - 1), -1)  # -1: no score
    return bins, smax, fmin


def _edge_hovers(
    w_txt: list[str], r_txt: list[str], s: np.ndarray, ex: Optional[np.ndarray], keep: np.ndarray, score_name: str
) -> list[str]:
    """Each drawn edge's hover: writer → reader, its score and its exact patching effect where computed."""
    hov = []
    for k, i in enumerate(keep):
        h = f"<b>{esc(w_txt[k])} {L.ARROW} {esc(r_txt[k])}</b><br>{esc(score_name)} {fmt(float(s[i]))}"
        if ex is not None:
            h += (
                f"<br>exact patching effect {fmt(float(ex[i]))}"
                if math.isfinite(ex[i])
                else "<br>exact effect not computed"
            )
        hov.append(h)
    return hov


def _views(
    keep: np.ndarray,
    w_txt: list[str],
    r_txt: list[str],
    nodes: Mapping[str, _Node],
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


class _Scene:
    """Everything one view is drawn from: the placed nodes, the arcs, the hovers, the marker sizes."""

    def __init__(
        self,
        nodes: dict[str, _Node],
        kv_of: dict[str, list[str]],
        arcs: _Arcs,
        node_hover: dict[str, str],
        node_value_of: dict[str, float],
        grid: _Grid,
        score_name: str,
        n_bins: int,
        n_total: int,
        *,
        ranked: bool,
    ) -> None:
        self.nodes, self.kv_of, self.arcs, self.grid = nodes, kv_of, arcs, grid
        self.node_hover, self.node_value_of = node_hover, node_value_of
        self.score_name, self.n_bins, self.n_total, self.ranked = score_name, n_bins, n_total, ranked
        z_all = np.array([v for v in node_value_of.values() if math.isfinite(v)], dtype=float)
        self.zmax = float(np.abs(z_all).max()) if len(z_all) else 0.0
        self.n_cols = len(grid.columns)
        self.dense = self.n_cols > _DENSE_COLUMNS
        self.shrink = min(1.0, math.sqrt(_PLOT_PX / (self.n_cols + 0.4) / 40.0))  # markers shrink with the columns

    def draw(self, sel: np.ndarray, labels: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
        """Shapes, the three traces' data (edge hovers, nodes, ports) and the subtitle of the edges ``sel``."""
        shown_nodes = [self.nodes[t] for t in sorted(set(labels))]
        shapes = self._joins(shown_nodes, set(labels)) + self._edge_paths(sel)
        traces = [self._edge_hover_trace(sel)] + [self._node_trace(shown_nodes, kind) for kind in ("node", "port")]
        return shapes, traces, self._subtitle(len(sel), len(shown_nodes))

    def _joins(self, shown_nodes: list[_Node], have: set[str]) -> list[dict[str, Any]]:
        """The structure: ports joined to their heads / MLP (one thin grey path under everything)."""
        nodes, kv_of = self.nodes, self.kv_of
        joins = [(n, nodes[n.owner]) for n in shown_nodes if n.owner and n.owner in have]
        joins += [(nodes[t], nodes[h]) for t in sorted(have & set(kv_of)) for h in kv_of[t] if h in have]
        if not joins:
            return []
        return [
            dict(
                type="path",
                xref="x",
                yref="y",
                layer="below",
                line=dict(color="#bbbbbb", width=0.8),
                path=_segments(
                    [a.x for a, _ in joins], [a.y for a, _ in joins], [b.x for _, b in joins], [b.y for _, b in joins]
                ),
            )
        ]

    def _edge_paths(self, sel: np.ndarray) -> list[dict[str, Any]]:
        """The unscored edges (dotted grey), then one path per (|score| bin, sign) holding all its curves, weakest
        first so strong edges are on top."""
        a, n_bins, name = self.arcs, self.n_bins, esc(self.score_name)
        b_sel, s_sel = a.bins[sel], a.scores[sel]
        shapes: list[dict[str, Any]] = []
        unscored = sel[b_sel < 0]
        if len(unscored):
            shapes.append(
                dict(
                    type="path",
                    xref="x",
                    yref="y",
                    layer="below",
                    showlegend=True,
                    legendrank=99,
                    path=_curves(a.wx[unscored], a.wy[unscored], a.rx[unscored], a.ry[unscored], a.cy[unscored]),
                    line=dict(color="#888888", width=1.0, dash="dot"),
                    opacity=0.6,
                    name=f"no {name} ({len(unscored)})",
                )
            )
        pos_c, neg_c = _bin_colours(n_bins, _POS), _bin_colours(n_bins, _NEG)
        for b in range(n_bins):
            for positive, colours, word in ((True, pos_c, "supports (> 0)"), (False, neg_c, "opposes (≤ 0)")):
                one = sel[(b_sel == b) & ((s_sel > 0) if positive else (s_sel <= 0))]
                if not len(one):
                    continue
                lo, hi = a.bin_edge(b / n_bins), a.bin_edge((b + 1) / n_bins)
                shapes.append(
                    dict(
                        type="path",
                        xref="x",
                        yref="y",
                        layer="below",
                        path=_curves(a.wx[one], a.wy[one], a.rx[one], a.ry[one], a.cy[one]),
                        line=dict(color=colours[b], width=round(0.6 + 5.4 * (b + 1) / n_bins, 2)),
                        opacity=round(0.3 + 0.7 * (b + 1) / n_bins, 3),
                        showlegend=True,
                        legendrank=100 + b,
                        name=f"{word}: |{name}| {fmt(lo, 2)}–{fmt(hi, 2)} ({len(one)})",
                    )
                )
        return shapes

    def _edge_hover_trace(self, sel: np.ndarray) -> dict[str, Any]:
        """The invisible markers at the edges' midpoints that carry their hover text."""
        a = self.arcs
        return dict(
            x=a.mid_x[sel].tolist(),
            y=a.mid_y[sel].tolist(),
            hovertext=[a.hover[k] for k in sel],
            text=None,
            size=8,
            symbol="circle",
            color="rgba(0,0,0,0)",
        )

    def _node_trace(self, shown_nodes: list[_Node], kind: str) -> dict[str, Any]:
        """The markers of the shown nodes (``kind="node"``, coloured by value) or ports, in a fixed order."""
        members = sorted(
            (n for n in shown_nodes if (n.kind == "port") == (kind == "port")), key=lambda n: (n.x, n.y, n.label)
        )
        z = np.array([self.node_value_of[n.label] for n in members], dtype=float)
        shrink = self.shrink
        return dict(
            x=[n.x for n in members],
            y=[n.y for n in members],
            hovertext=[self.node_hover[n.label] for n in members],
            text=None if kind == "port" or self.dense else [_short(n) for n in members],
            size=max(4, round(7 * shrink))
            if kind == "port"
            else [max(6, round(_SIZE.get(n.kind, 12) * shrink)) for n in members],
            symbol="circle" if kind == "port" else [_SYMBOL.get(n.kind, "circle") for n in members],
            color="#ffffff"
            if kind == "port"
            else (np.where(np.isfinite(z), z, 0.0).tolist() if self.zmax else "#dddddd"),
        )

    def _subtitle(self, n_drawn: int, n_nodes: int) -> str:
        """How many edges and nodes are drawn, and how to read the figure."""
        n_total, score_name = self.n_total, self.score_name
        shown = (
            f"{n_drawn:,} of {n_total:,} edges (largest |{score_name}|)"
            if self.ranked and n_drawn < n_total
            else f"{n_drawn:,} of {n_total:,} edges"
            if n_drawn < n_total
            else f"{n_total:,} edges"
        )
        return (
            f"{shown}, {n_nodes} nodes · width and opacity ∝ |{score_name}|, blue > 0 supports the "
            "metric, red < 0 opposes it · "
            "hover an edge's middle or a node"
        )


def _add_traces(fig: go.Figure, traces: list[dict[str, Any]], scene: _Scene, node_value: str, *, stepped: bool) -> None:
    """The edge-hover, node and port traces of the first view (node and port traces kept empty with steps)."""
    edge_tr, node_tr, port_tr = traces
    fig.add_trace(
        go.Scatter(
            x=edge_tr["x"],
            y=edge_tr["y"],
            mode="markers",
            hovertext=edge_tr["hovertext"],
            marker=dict(size=8, color="rgba(0,0,0,0)", maxdisplayed=1),
            hoverinfo="text",
            showlegend=False,
            name="edges",
        )
    )
    for kind, tr in (("node", node_tr), ("port", port_tr)):
        if not stepped and not tr["x"]:
            continue
        marker: dict[str, Any] = dict(
            line=dict(color="#333", width=1), size=tr["size"], symbol=tr["symbol"], color=tr["color"]
        )
        if kind == "node" and scene.zmax:
            marker.update(
                colorscale="RdBu",
                cmid=0.0,
                cmin=-scene.zmax,
                cmax=scene.zmax,
                colorbar=dict(title=esc(node_value), x=1.02, len=0.5),
            )
        fig.add_trace(
            go.Scatter(
                x=tr["x"],
                y=tr["y"],
                mode="markers" if kind == "port" or scene.dense else "markers+text",
                text=tr["text"],
                textposition="top center",
                textfont=dict(size=9),
                marker=marker,
                hovertext=tr["hovertext"],
                hoverinfo="text",
                showlegend=False,
                name="inputs (q, k, v, mlp.in)" if kind == "port" else "nodes",
            )
        )


def _layout(scene: _Scene, title: str, shapes: list[dict[str, Any]], *, stepped: bool) -> dict[str, Any]:
    """The layout: title, axes (head 0 on top; with steps one y range for all of them), size, legend, shapes."""
    grid, dense = scene.grid, scene.dense
    # with steps, one y range for all of them (every node and arc of the union), so nothing moves between steps
    ys = [n.y for n in scene.nodes.values()] + scene.arcs.cy.tolist() + [0.0, float(grid.n_heads - 1)]
    y_range = [max(ys) + 0.5, min(ys) - 0.3]  # reversed: head 0 on top
    return dict(
        title=dict(text=title, yref="container", y=1.0, yanchor="top", pad=dict(t=12)),
        xaxis=dict(
            tickmode="array",
            tickvals=grid.ticks(short=dense)[0],
            ticktext=grid.ticks(short=dense)[1],
            zeroline=False,
            showgrid=False,
            range=[-0.8, scene.n_cols - 0.4],
            tickangle=0,
            title="layer (each layer: its attention heads, then its MLP)" if dense else None,
        ),
        yaxis=dict(
            title="head",
            zeroline=False,
            showgrid=False,  # ticks at the heads only (arcs rise above head 0)
            **(dict(tickmode="array", tickvals=list(range(grid.n_heads))) if grid.n_heads <= 24 else {}),
            **(dict(autorange="reversed") if not stepped else dict(range=y_range)),
        ),
        autosize=True,
        height=int(min(2400, max(520, 34 * (grid.n_heads + 3) + 240)) + (90 if stepped else 0)),
        template="plotly_white",
        hovermode="closest",
        hoverlabel=dict(align="left"),
        shapes=shapes,
        margin=dict(l=60, r=30, t=140 if stepped else 90, b=60),
        legend=dict(
            orientation="h",
            yanchor="top",
            y=-0.1 if dense else -0.08,
            xanchor="left",
            x=0,
            font=dict(size=10),
            title=dict(text=f"edges ({esc(scene.score_name)})"),
        ),
    )


def _slider(
    views: list[tuple[np.ndarray, list[str], str]],
    drawn: list[tuple[list[dict[str, Any]], list[dict[str, Any]], str]],
    head: str,
    active: Optional[int],
    n_tr: int,
) -> dict[str, Any]:
    """The step slider: each step restyles the ``n_tr`` traces and swaps the shapes and the subtitle."""
    keys = ("x", "y", "hovertext", "text", "size", "symbol", "color")
    return dict(
        active=active,
        x=0,
        len=1,
        y=1.0,
        yanchor="bottom",
        pad=dict(t=0, b=36),
        currentvalue=dict(visible=False),
        font=dict(size=10),
        steps=[
            dict(
                method="update",
                label=lab,
                args=[
                    {
                        ("marker." + k if k in ("size", "symbol", "color") else k): [tr[k] for tr in trs][:n_tr]
                        for k in keys
                    },
                    {"shapes": shapes, "title.text": head + sub + "</sup>"},
                    list(range(n_tr)),
                ],
            )
            for (_, _, lab), (shapes, trs, sub) in zip(views, drawn)
        ],
    )


_SIZE = {"head": 15, "mlp": 17, "embed": 15, "output": 19, "bias": 8, "neuron": 7, "other": 10}
_SYMBOL = {
    "head": "circle",
    "mlp": "square",
    "embed": "diamond",
    "output": "star",
    "bias": "triangle-up",
    "neuron": "circle",
    "other": "circle",
}


def _segments(x0: Any, y0: Any, x1: Any, y1: Any) -> str:
    """An SVG path of separate straight segments (x0, y0) → (x1, y1), in data coordinates."""
    return "".join(f"M{a:.4g},{b:.4g}L{c:.4g},{d:.4g}" for a, b, c, d in zip(x0, y0, x1, y1))


def _bend(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """How far an edge's control point lifts above its chord: longer edges arc higher, so an edge that skips
    layers does not run through the nodes of the layers it skips."""
    return np.minimum(0.3 * np.sqrt(np.abs(x1 - x0)), 1.4)


def _curves(x0: Any, y0: Any, x1: Any, y1: Any, cy: Any) -> str:
    """An SVG path of separate quadratic Bézier curves (x0, y0) → (x1, y1) with control points ((x0+x1)/2, cy)."""
    return "".join(
        f"M{a:.4g},{b:.4g}Q{(a + c) / 2:.4g},{e:.4g} {c:.4g},{d:.4g}" for a, b, c, d, e in zip(x0, y0, x1, y1, cy)
    )


def _read_steps(steps: Any, step_labels: Any, edges: list[str]) -> list[tuple[list[int], str]]:
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


def _node_hovers(
    nodes: Mapping[str, _Node],
    edges: list[str],
    s: np.ndarray,
    node_info: Any,
    node_value: str,
    score_name: str,
    grid: _Grid,
) -> tuple[dict[str, str], dict[str, float]]:
    """Each node's hover text and colour value; degrees and summed scores over every given edge."""
    deg_in: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    deg_out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for edge, v in zip(edges, s):
        w, _, r = str(edge).partition(L.ARROW)
        deg_out[w][0] += 1
        deg_out[w][1] += float(v) if math.isfinite(v) else 0.0
        deg_in[r][0] += 1
        deg_in[r][1] += float(v) if math.isfinite(v) else 0.0
    info = node_info or {}
    hover, value = {}, {}
    for n in nodes.values():
        lines = [f"<b>{esc(n.label)}</b>" + _kind_note(n, parsed_lab=L.parse(n.label), grid=grid)]
        lines += _info_lines(info.get(n.label))
        if n.label in deg_out:
            n_e, tot = deg_out[n.label]
            lines.append(f"out: {_n_edges(n_e)}, Σ {esc(score_name)} {fmt(tot)}")
        if n.label in deg_in:
            n_e, tot = deg_in[n.label]
            lines.append(f"in: {_n_edges(n_e)}, Σ {esc(score_name)} {fmt(tot)}")
        for port in _input_ports(n, grid):  # a head's or an MLP's inputs are read through its ports
            if port in deg_in:
                n_e, tot = deg_in[port]
                lines.append(f"in via {esc(port)}: {_n_edges(n_e)}, Σ {esc(score_name)} {fmt(tot)}")
        hover[n.label] = "<br>".join(lines)
        v = (info.get(n.label) or {}).get(node_value) if n.kind != "port" else None
        value[n.label] = float(v) if is_real(v) else math.nan
    return hover, value


def _input_ports(n: _Node, grid: _Grid) -> list[str]:
    """The read labels through which a head (its q, its KV head's k and v) or an MLP (in, gate) is read."""
    lab = L.parse(n.label)
    if isinstance(lab, L.Head):
        g = lab.head // grid.group
        return [
            str(L.HeadInput(lab.layer, "q", lab.head)),
            str(L.HeadInput(lab.layer, "k", g)),
            str(L.HeadInput(lab.layer, "v", g)),
        ]
    if isinstance(lab, L.Mlp):
        return [str(L.MlpInput(lab.layer, "in")), str(L.MlpInput(lab.layer, "gate"))]
    return []


def _n_edges(n: float) -> str:
    return "1 edge" if int(n) == 1 else f"{int(n)} edges"


def _short(n: _Node) -> str:
    return n.label.split(".", 1)[1] if n.kind in ("head", "neuron", "mlp") and "." in n.label else n.label


def _kind_note(n: _Node, *, parsed_lab: Any, grid: _Grid) -> str:
    lab = parsed_lab
    if isinstance(lab, L.HeadInput):
        if lab.which == "q":
            return f" — query input of head {lab.head}"
        qs = grid.kv_readers(lab)
        shared = f", read by query heads {', '.join(h.split('.')[-1] for h in qs)}" if grid.group > 1 else ""
        return f" — {'key' if lab.which == 'k' else 'value'} input of KV head {lab.head}{shared}"
    if isinstance(lab, L.MlpInput):
        return " — MLP input" if lab.which == "in" else " — MLP gate input"
    return ""
