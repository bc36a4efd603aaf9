"""The circuit diagram: heads as nodes placed by layer, composition edges between them.

Draws a :class:`interp.circuits.CompositionGraph` (built by :func:`interp.circuits.composition_edges`
from composition scores or virtual-weight norms: Elhage et al. 2021 §4 "Composition"), reading its
``nodes``, ``edges`` and options by attribute. Edge width and opacity grow with the score; each kind
has its own colour and line style, and bends its own way so that Q, K and V edges between the same
two heads stay apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from interp.plots._common import DIVERGING, KIND_COLOURS, esc, fmt, require_attr

__all__ = ["composition_graph_figure"]

_DASH = {"Q": "dot", "K": "dash", "V": "solid"}
_BEND = {"Q": 0.35, "K": 0.0, "V": -0.35}
_OTHER_COLOURS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def _kind_colour(kind: str, i: int) -> str:
    return KIND_COLOURS.get(kind, _OTHER_COLOURS[i % len(_OTHER_COLOURS)])


def composition_graph_figure(graph: Any) -> go.Figure:
    """The circuit diagram of a :class:`interp.circuits.CompositionGraph`: heads at (layer, head), one
    curved line per edge (width and opacity grow with the score; Q, K and V each have their colour,
    dash and bend, so edges between the same two heads stay apart)."""
    require_attr(
        graph,
        ("nodes", "edges", "meta", "threshold", "max_edges", "n_heads", "node_value_name", "title"),
        name="graph",
        expected="a CompositionGraph (interp.circuits.composition_edges(scores, ...)); "
        "plots draws graphs, it does not select edges",
    )
    fig = go.Figure()
    pos = {n["label"]: (n["layer"], n["head"]) for n in graph.nodes}
    kinds = list(dict.fromkeys([*graph.meta.get("kinds", []), *(e["kind"] for e in graph.edges)]))
    scores = np.array([e["score"] for e in graph.edges]) if graph.edges else np.zeros(0)
    lo, hi = (float(scores.min()), float(scores.max())) if len(scores) else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0
    for ki, kind in enumerate(kinds):
        _add_kind_edges(fig, [e for e in graph.edges if e["kind"] == kind], kind, ki, pos, lo, span)
    if graph.nodes:
        _add_heads(fig, graph)
    layers = sorted({n["layer"] for n in graph.nodes})
    sub = []
    if graph.threshold is not None:
        sub.append(f"score ≥ {fmt(graph.threshold)}")
    if graph.max_edges is not None:
        sub.append(f"top {graph.max_edges} edges per kind")
    sub.append(f"{len(graph.edges)} edges, {len(graph.nodes)} heads; width/opacity ∝ score")
    fig.update_layout(
        title=f"{esc(graph.title)}<br><sup>{' · '.join(sub)}</sup>",
        xaxis=dict(title="layer", tickmode="array", tickvals=layers, zeroline=False),
        yaxis=dict(title="head", autorange="reversed", zeroline=False, dtick=1 if graph.n_heads <= 20 else None),
        width=1000,
        height=max(450, 40 * (graph.n_heads or 1) + 200),
        template="plotly_white",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
    )
    return fig


def _add_kind_edges(
    fig: go.Figure, edges: list[Any], kind: str, ki: int, pos: dict[str, Any], lo: float, span: float
) -> None:
    """One kind's edges: a curved line each (quadratic Bézier bent the kind's way; width and opacity grow with
    the score, scaled to [lo, lo + span]) and invisible hover targets on their midpoints."""
    colour = _kind_colour(kind, ki)
    t = np.linspace(0.0, 1.0, 16)
    mid_x, mid_y, mid_h = [], [], []
    first = True
    for e in edges:
        (x0, y0), (x1, y1) = pos[e["src"]], pos[e["dst"]]
        w = (e["score"] - lo) / span  # 0..1
        bend = _BEND.get(kind, 0.2 * (ki + 1))
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2 + bend * max(1.0, abs(x1 - x0) ** 0.5)
        xs = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t**2 * x1  # quadratic Bézier
        ys = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t**2 * y1
        hov = f"<b>{kind}</b>-composition {esc(e['src'])} → {esc(e['dst'])}<br>score {fmt(e['score'])}"
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line=dict(color=colour, width=1 + 5 * w, dash=_DASH.get(kind, "solid")),
                opacity=0.35 + 0.6 * w,
                hoverinfo="skip",
                legendgroup=kind,
                showlegend=first,
                name=f"{kind}-composition" if kind in KIND_COLOURS else kind,
            )
        )
        first = False
        mid_x.append(float(xs[8]))
        mid_y.append(float(ys[8]))
        mid_h.append(hov)
    if mid_x:  # hover targets on the edges' midpoints
        fig.add_trace(
            go.Scatter(
                x=mid_x,
                y=mid_y,
                mode="markers",
                marker=dict(size=9, color=colour, opacity=0.0),
                hovertext=mid_h,
                hoverinfo="text",
                legendgroup=kind,
                showlegend=False,
                name=f"{kind} edges",
            )
        )


def _add_heads(fig: go.Figure, graph: Any) -> None:
    """The heads as labelled markers at (layer, head), coloured by their value when the graph has one."""
    vals = [n.get("value") for n in graph.nodes]
    hover = [
        f"head <b>{esc(n['label'])}</b>"
        + (f"<br>{esc(graph.node_value_name)}: {fmt(n['value'])}" if n.get("value") is not None else "")
        for n in graph.nodes
    ]
    marker: dict[str, Any] = dict(size=18, line=dict(color="#333", width=1))
    if any(v is not None for v in vals):
        z = np.array([np.nan if v is None else v for v in vals], dtype=float)
        zmax = float(np.nanmax(np.abs(z))) or 1.0
        marker.update(
            color=np.nan_to_num(z, nan=0.0),
            colorscale=DIVERGING,
            cmid=0.0,
            cmin=-zmax,
            cmax=zmax,
            colorbar=dict(title=graph.node_value_name, x=1.02),
        )
    else:
        marker.update(color="#dddddd")
    fig.add_trace(
        go.Scatter(
            x=[n["layer"] for n in graph.nodes],
            y=[n["head"] for n in graph.nodes],
            mode="markers+text",
            text=[n["label"] for n in graph.nodes],
            textposition="top center",
            textfont=dict(size=10),
            marker=marker,
            hovertext=hover,
            hoverinfo="text",
            name="heads",
            showlegend=False,
        )
    )
