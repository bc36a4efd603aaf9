"""The circuit viewer's drawing: |score| bins, the edges as SVG paths, the node markers, the layout and the slider.

Edge width and opacity grow with |score| (``n_bins`` bins of √(|score| / max |score|) — square-root spacing, so that
a heavy-tailed score distribution does not leave all but the largest edge in the faintest bin; ``scale="linear"`` for
even spacing, ``scale="log"`` for bins of equal ratio between the smallest and the largest |score| drawn, for scores
that span decades); colour is the sign (blue positive: the edge supports the metric; red negative: it opposes it —
interp's one sign convention, docs/math.md "Sign convention").

Size and speed: the edges of one (bin, sign) group are one SVG path of quadratic curves (a layout shape: 2 ×
``n_bins`` paths in all, each with its legend entry), and one trace of invisible markers at the curves' midpoints
carries every edge's hover text; plotly draws only one of those markers (``maxdisplayed``) while hovering still finds
them all. Line traces with gaps would draw one SVG element per segment and a marker per edge another, which costs
more than a second for 5,000 edges; this draws a few dozen elements plus the nodes. A slider step restyles the three
traces and swaps the shapes and the subtitle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np
import plotly.graph_objects as go

from interp.plots._circuit_hover import edge_hovers
from interp.plots._circuit_layout import Grid, Node
from interp.plots._common import esc, fmt

__all__ = ["Arcs", "Scene", "add_traces", "build_arcs", "figure_layout", "slider"]


#: Edge colours per |score| bin, weakest first (RdBu's blue and red halves).
_POS = ["#92c5de", "#4393c3", "#2166ac", "#1a4f8a", "#053061"]
_NEG = ["#f4a582", "#d6604d", "#b2182b", "#8c0d25", "#67001f"]
#: above this many columns the axis names layers only and node labels are left to the hover
_DENSE_COLUMNS = 28
#: the plot area's width the marker sizes assume (a 1,400 px window, less the page's and the figure's margins)
_PLOT_PX = 1100.0
#: marker size and symbol per node kind
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


def _bin_colours(n_bins: int, palette: list[str]) -> list[str]:
    if n_bins <= len(palette):
        idx = np.round(np.linspace(0, len(palette) - 1, n_bins)).astype(int)
        return [palette[i] for i in idx]
    return [palette[min(len(palette) - 1, i * len(palette) // n_bins)] for i in range(n_bins)]


@dataclass(frozen=True)
class Arcs:
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


def build_arcs(
    nodes: Mapping[str, Node],
    w_txt: list[str],
    r_txt: list[str],
    s: np.ndarray,
    ex: Optional[np.ndarray],
    keep: np.ndarray,
    score_name: str,
    scale: str,
    n_bins: int,
) -> Arcs:
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
    return Arcs(
        wx,
        wy,
        rx,
        ry,
        cy,
        ss,
        bins,
        edge_hovers(w_txt, r_txt, s, ex, keep, score_name),
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


class Scene:
    """Everything one view is drawn from: the placed nodes, the arcs, the hovers, the marker sizes."""

    def __init__(
        self,
        nodes: dict[str, Node],
        kv_of: dict[str, list[str]],
        arcs: Arcs,
        node_hover: dict[str, str],
        node_value_of: dict[str, float],
        grid: Grid,
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

    def _joins(self, shown_nodes: list[Node], have: set[str]) -> list[dict[str, Any]]:
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

    def _node_trace(self, shown_nodes: list[Node], kind: str) -> dict[str, Any]:
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


def add_traces(fig: go.Figure, traces: list[dict[str, Any]], scene: Scene, node_value: str, *, stepped: bool) -> None:
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


def figure_layout(scene: Scene, title: str, shapes: list[dict[str, Any]], *, stepped: bool) -> dict[str, Any]:
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


def slider(
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


def _short(n: Node) -> str:
    return n.label.split(".", 1)[1] if n.kind in ("head", "neuron", "mlp") and "." in n.label else n.label
