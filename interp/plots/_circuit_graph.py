"""The circuit viewer: an edge-level circuit graph (writer → reader) as one interactive plotly figure.

An edge joins a writer (an embedding, a head's output z_h W_O^h, an MLP's output, a bias) to a later
reader (a query head's q input, a KV head's k or v input, an MLP's input, the logits). Its score is what
the caller computed — e.g. edge attribution patching, score(w → r) = (a_w(clean) − a_w(corrupt)) · ∂M/∂x_r,
with the exact patching effect where it was computed (Syed et al. 2023; Conmy et al. 2023).

This module reads the inputs (labels and scores, or a result read by its attributes) and the options
(:class:`CircuitGraphOptions`, whose fields are also keywords of :func:`circuit_graph_figure`); where the nodes sit
is :mod:`interp.plots._circuit_layout`, the hover text :mod:`interp.plots._circuit_hover`, and the bins, SVG paths,
markers and slider :mod:`interp.plots._circuit_draw`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from interp import labels as L
from interp._validate import check_choice, check_int_range, check_positive_int, is_int
from interp.errors import ArgumentError, LabelError, ShapeError
from interp.plots._circuit_draw import Scene, add_traces, build_arcs, figure_layout, slider
from interp.plots._circuit_hover import node_hovers
from interp.plots._circuit_layout import (
    Grid,
    circuit_layout,
    drawn_edges,
    parse_edges,
    place_nodes,
    read_steps,
    step_views,
)
from interp.plots._common import as_numpy, esc

__all__ = ["CircuitGraphOptions", "circuit_graph_figure", "circuit_layout"]


@dataclass(frozen=True)
class CircuitGraphOptions:
    """How :func:`circuit_graph_figure` draws a circuit; each field is also one of its keywords.

    ``node_value``: the numeric ``node_info`` entry nodes are coloured by. ``max_edges``: draw the edges with the
    largest |score| (the subtitle says how many were left out). ``n_bins`` / ``scale``: how |score| maps to width and
    opacity ("sqrt", "linear" or "log" bin spacing). ``score_name``: what the scores are called in the legend and
    hovers; ``title`` the figure's (None: from the result, else "Circuit graph"). ``n_layers`` / ``n_heads`` /
    ``n_kv_heads``: the model's counts (None: from the result or the labels; give them under GQA when not every KV
    head appears). ``steps``: nested circuits to choose between with a slider (each a list of edge labels or an
    object with ``.edges``), ``step_labels`` their names on the slider, ``active`` the one drawn first (default the
    last)."""

    node_value: str = "DLA"
    max_edges: int = 5000
    n_bins: int = 5
    scale: str = "sqrt"
    score_name: str = "score"
    title: Optional[str] = None
    n_layers: Optional[int] = None
    n_heads: Optional[int] = None
    n_kv_heads: Optional[int] = None
    steps: Optional[Sequence[Any]] = None
    step_labels: Optional[Sequence[str]] = None
    active: Optional[int] = None

    def __post_init__(self) -> None:
        check_positive_int("max_edges", self.max_edges)
        check_int_range("n_bins", self.n_bins, 1, 10)
        check_choice("scale", self.scale, ("sqrt", "linear", "log"))
        for name in ("n_layers", "n_heads", "n_kv_heads"):
            check_positive_int(name, getattr(self, name), allow_none=True)


_OPTION_NAMES = tuple(f.name for f in dataclasses.fields(CircuitGraphOptions))


def _options(options: Optional[CircuitGraphOptions], keywords: Mapping[str, Any]) -> CircuitGraphOptions:
    """``options`` (default: the defaults) with the ``keywords`` given beside it."""
    if options is not None and not isinstance(options, CircuitGraphOptions):
        raise ArgumentError(f"options must be a CircuitGraphOptions or None, got {type(options).__name__}")
    unknown = [k for k in keywords if k not in _OPTION_NAMES]
    if unknown:
        raise ArgumentError(
            f"circuit_graph_figure got the unknown keyword {unknown[0]!r}; its keywords are exact, node_info, "
            f"options and the options' fields {list(_OPTION_NAMES)}"
        )
    return dataclasses.replace(options or CircuitGraphOptions(), **keywords)


def _read_inputs(
    edges: Any, scores: Any, exact: Any, opts: CircuitGraphOptions
) -> tuple[list[str], np.ndarray, Optional[np.ndarray], CircuitGraphOptions]:
    """Plain attributes from a result (``.edges``, ``.scores``, optional ``.exact``; the model's counts and the
    title where the options leave them None) or the arguments."""
    n_layers, n_heads, n_kv_heads, title = opts.n_layers, opts.n_heads, opts.n_kv_heads, opts.title
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
    opts = dataclasses.replace(
        opts, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, title=title or "Circuit graph"
    )
    return edges, s, ex, opts


def circuit_graph_figure(
    edges: Any,
    scores: Any = None,
    *,
    exact: Any = None,
    node_info: Optional[Mapping[str, Mapping[str, Any]]] = None,
    options: Optional[CircuitGraphOptions] = None,
    **keywords: Any,
) -> go.Figure:
    """The circuit graph: nodes by layer, edge width/opacity by |score|, colour by sign, hover on edges and nodes.

    ``edges``: edge labels ``'L0.H3→L1.attn.k[H2]'`` (str or :class:`interp.labels.Edge`), or a result
    with ``.edges`` and ``.scores`` (and optionally ``.exact``, ``.n_layers``/``.n_heads``/``.n_kv_heads``);
    ``scores``: one number per edge (NaN: an edge without a score, drawn dotted grey); ``exact``: the exact
    patching effect per edge (NaN where not computed) or a mapping edge → effect — shown in the edge's hover;
    ``node_info``: per node label (``'L3.H5'``, ``'L3.mlp'``, a port ``'L3.attn.q[H5]'``) a mapping of hover lines, e.g.
    ``{"DLA": 0.41, "attends to": "“ Mary”@4 0.62", "OV top tokens": ["“ Mary” → “ Mary” 3.1"]}``.

    How it is drawn: ``options`` (a :class:`CircuitGraphOptions`) and/or its fields as keywords (a keyword overrides
    ``options``): ``node_value="DLA"``, ``max_edges=5000``, ``n_bins=5``, ``scale="sqrt"``, ``n_layers``,
    ``n_heads``, ``n_kv_heads``, ``score_name="score"``, ``title``, ``steps``, ``step_labels``, ``active``.

    ``steps``: nested circuits to choose between with a slider in the figure (works offline, in the page):
    each a list of edge labels or an object with ``.edges`` (an ``EdgeCircuit``), every edge one of
    ``edges``; ``step_labels`` names each on the slider; ``active`` is the one drawn first (default the
    last). Each step draws its own edges and the nodes they touch, with the same layout, bins and colours
    for every step; ``max_edges`` is not used then (the steps say what is drawn).

    The figure has no fixed width (it fills its container); with many layers the columns are labelled by
    layer only, node labels are left to the hover and markers shrink, so that 30 layers fit in 1,400 px.
    """
    # 1. the inputs read and checked
    opts = _options(options, keywords)
    edges, s, ex, opts = _read_inputs(edges, scores, exact, opts)
    if node_info is not None and not isinstance(node_info, Mapping):
        raise ArgumentError(
            f"node_info must be a mapping node label -> {{name: value}}, got {type(node_info).__name__}"
        )
    # 2. the edges drawn: the max_edges largest |score|, or the union of the steps
    sets = read_steps(opts.steps, opts.step_labels, edges) if opts.steps is not None else None
    keep, active = drawn_edges(s, opts.max_edges, sets, opts.active)
    # 3. their writers and readers parsed, and every node placed on the grid
    w_txt, r_txt, parsed = parse_edges(edges, keep)
    grid = Grid([parsed[t] for t in w_txt], [parsed[t] for t in r_txt], opts.n_layers, opts.n_heads, opts.n_kv_heads)
    nodes, kv_of = place_nodes(grid, parsed, w_txt, r_txt, node_info if sets is None else None)
    # 4. each drawn edge's curve, |score| bin and hover; each node's hover and colour value
    arcs = build_arcs(nodes, w_txt, r_txt, s, ex, keep, opts.score_name, opts.scale, opts.n_bins)
    node_hover, node_value_of = node_hovers(nodes, edges, s, node_info, opts.node_value, opts.score_name, grid)
    scene = Scene(
        nodes,
        kv_of,
        arcs,
        node_hover,
        node_value_of,
        grid,
        opts.score_name,
        opts.n_bins,
        len(edges),
        ranked=sets is None,
    )
    # 5. one drawing per view: the whole graph, or each step
    views = step_views(keep, w_txt, r_txt, nodes, kv_of, sets)
    drawn = [scene.draw(sel, labels) for sel, labels, _ in views]
    # 6. the figure: the first view's traces and layout, and with steps a slider over the views
    first = drawn[active if sets is not None and active is not None else 0]
    fig = go.Figure()
    add_traces(fig, first[1], scene, opts.node_value, stepped=sets is not None)
    head = f"{esc(opts.title)}<br><sup>"
    fig.update_layout(**figure_layout(scene, head + first[2] + "</sup>", first[0], stepped=sets is not None))
    if sets is not None:
        fig.update_layout(sliders=[slider(views, drawn, head, active, len(fig.data))])
    return fig
