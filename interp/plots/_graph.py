"""The circuit diagram: heads as nodes placed by layer, composition edges between them.

A head B in a later layer *composes* with a head A in an earlier layer when B's Q, K or V
input reads what A's OV circuit writes (Elhage et al. 2021 §4 "Composition"). With
TL's row-vector convention (DESIGN "Math" 7)

    score_Q(A→B) = ‖W_OV^A W_QK^B‖_F   / (‖W_OV^A‖_F ‖W_QK^B‖_F)
    score_K(A→B) = ‖W_OV^A W_QK^Bᵀ‖_F  / (‖W_OV^A‖_F ‖W_QK^B‖_F)
    score_V(A→B) = ‖W_OV^A W_OV^B‖_F   / (‖W_OV^A‖_F ‖W_OV^B‖_F)

The input is one or several [n_layers, n_heads, n_layers, n_heads] score tensors indexed
``[src_layer, src_head, dst_layer, dst_head]`` (``CompositionScores.scores`` from
:func:`interp.circuits.composition_scores`), or a table of virtual-weight norms ‖W_O^A W_I^B‖
(:func:`interp.circuits.virtual_weight_norms`; its head reads ``L2.attn.q/k/v[H…]`` become
Q/K/V edges, a KV head's edge going to every query head of its GQA group). An edge
A→B is kept when A's layer is earlier than B's and the score passes ``threshold`` (or is
among the ``max_edges`` largest of its kind). Edge width and opacity grow with the score;
each kind has its own colour and line style, and bends its own way so that Q, K and V edges
between the same two heads stay apart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from interp.errors import ArgumentError, ShapeError
from interp.plots._common import DIVERGING, KIND_COLOURS, as_numpy, esc, fmt, parse_head

__all__ = ["CompositionGraph", "composition_edges", "composition_graph", "composition_graph_json"]

_DASH = {"Q": "dot", "K": "dash", "V": "solid"}
_BEND = {"Q": 0.35, "K": 0.0, "V": -0.35}
_OTHER_COLOURS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


@dataclass(frozen=True)
class CompositionGraph:
    """Nodes (heads) and edges (src → dst, kind, score) of a composition circuit.

    ``nodes``: dicts with ``label`` ('L3.H5'), ``layer``, ``head`` and optional ``value``
    (e.g. the head's logit attribution); ``edges``: dicts with ``src``, ``dst``, ``kind``
    ('Q'|'K'|'V'|other) and ``score``. ``.to_json()`` is what ``export(graph, 'x.json')`` writes.
    """

    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    threshold: Optional[float] = None
    max_edges: Optional[int] = None
    n_layers: int = 0
    n_heads: int = 0
    node_value_name: str = "value"
    title: str = "Composition graph"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "edges": self.edges, "threshold": self.threshold,
                "max_edges": self.max_edges, "n_layers": self.n_layers, "n_heads": self.n_heads,
                "node_value_name": self.node_value_name, "meta": self.meta}

    def to_json(self, *, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_json_dict(), indent=indent)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per edge: src, dst, kind, score (sorted by score, largest first)."""
        df = pd.DataFrame(self.edges, columns=["src", "dst", "kind", "score"])
        return df.sort_values("score", ascending=False).reset_index(drop=True)

    def top(self, k: int = 10) -> pd.DataFrame:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ArgumentError(f"k={k!r} must be a positive int")
        return self.to_dataframe().head(k)

    def plot(self) -> go.Figure:
        return _draw(self)


_READ = re.compile(r"^L(\d+)\.attn\.([qkv])\[H(\d+)\]$")


def _from_virtual_weights(vw: Any) -> dict[str, np.ndarray]:
    """Head-to-head Q/K/V edges from a VirtualWeightNorms-like table (``values`` [writes, reads]).

    A read ``L2.attn.k[H1]`` is a KV head; under GQA every query head of its group gets the edge
    (query head h reads KV head h // (n_heads / n_kv_heads)).
    """
    vals = as_numpy(vw.values, name="values", ndim=2)
    writes = {i: parse_head(w) for i, w in enumerate(vw.writes)}
    writes = {i: lh for i, lh in writes.items() if lh is not None}
    reads = {j: _READ.match(r) for j, r in enumerate(vw.reads)}
    reads = {j: (int(m.group(1)), m.group(2).upper(), int(m.group(3))) for j, m in reads.items() if m}
    if not writes or not reads:
        raise ArgumentError("the virtual-weight table has no head writes ('L3.H5') or head reads ('L3.attn.q[H5]')")
    n_l = 1 + max([l for l, _ in writes.values()] + [l for l, _, _ in reads.values()])
    n_h = 1 + max([h for _, h in writes.values()] + [g for _, k, g in reads.values() if k == "Q"])
    n_kv = 1 + max([g for _, k, g in reads.values() if k != "Q"], default=n_h - 1)
    group = max(1, n_h // n_kv)
    out = {k: np.full((n_l, n_h, n_l, n_h), np.nan) for k in ("Q", "K", "V")}
    for j, (l2, k, g) in reads.items():
        dst_heads = [g] if k == "Q" else list(range(g * group, (g + 1) * group))
        for i, (l1, h1) in writes.items():
            for h2 in dst_heads:
                out[k][l1, h1, l2, h2] = vals[i, j]
    return out


def _as_score_dict(scores: Any, kind: Optional[str]) -> dict[str, np.ndarray]:
    """{kind: [L, H, L, H] array} from a result, a tensor, or a mapping / list of them."""
    if all(hasattr(scores, a) for a in ("values", "writes", "reads")):
        return _from_virtual_weights(scores)
    def one(obj: Any, k: Optional[str]) -> tuple[str, np.ndarray]:
        arr = getattr(obj, "scores", obj)
        k = k or getattr(obj, "kind", None) or "score"
        a = as_numpy(arr, name="scores")
        if a.ndim != 4 or a.shape[0] != a.shape[2] or a.shape[1] != a.shape[3]:
            raise ShapeError(f"scores (kind {k!r}) must be [n_layers, n_heads, n_layers, n_heads], got shape {a.shape}")
        return str(k).upper() if str(k).upper() in KIND_COLOURS else str(k), a

    if isinstance(scores, Mapping):
        out = dict(one(v, str(k)) for k, v in scores.items())
    elif isinstance(scores, (list, tuple)):
        out = dict(one(v, None) for v in scores)
    else:
        out = dict([one(scores, kind)])
    if not out:
        raise ArgumentError("scores is empty; pass CompositionScores (or [L,H,L,H] tensors) for at least one kind")
    shapes = {a.shape for a in out.values()}
    if len(shapes) != 1:
        raise ShapeError(f"score tensors of different kinds have different shapes {sorted(shapes)}")
    return out


def _head_set(heads: Optional[Sequence[Any]], n_l: int, n_h: int) -> Optional[set[tuple[int, int]]]:
    if heads is None:
        return None
    out = set()
    for h in heads:
        lh = parse_head(h) if isinstance(h, str) else (tuple(int(x) for x in h) if isinstance(h, (tuple, list)) else None)
        if lh is None or len(lh) != 2 or not (0 <= lh[0] < n_l and 0 <= lh[1] < n_h):
            raise ArgumentError(f"heads contains {h!r}; give labels like 'L3.H5' or (layer, head) pairs "
                                f"with layer < {n_l} and head < {n_h}")
        out.add(lh)
    return out


def composition_edges(
    scores: Any,
    *,
    kind: Optional[str] = None,
    heads: Optional[Sequence[Any]] = None,
    threshold: Optional[float] = None,
    max_edges: Optional[int] = 40,
    node_values: Optional[Mapping[str, float]] = None,
    node_value_name: str = "value",
    title: str = "Composition graph",
) -> CompositionGraph:
    """The edges of the circuit diagram (see module docstring) as a :class:`CompositionGraph`.

    ``scores``: CompositionScores / [L,H,L,H] tensor, or a mapping kind -> those (e.g.
    ``{"Q": q, "K": k, "V": v}``); ``heads``: keep only edges between these heads (labels or
    (layer, head)); ``threshold``: keep scores ≥ threshold; ``max_edges``: at most this many
    edges per kind (largest first; None for no cap); ``node_values``: e.g. each head's logit
    attribution, shown as node colour.
    """
    by_kind = _as_score_dict(scores, kind)
    n_l, _, _, n_h = next(iter(by_kind.values())).shape
    keep = _head_set(heads, n_l, n_h)
    if threshold is not None and not np.isfinite(threshold):
        raise ArgumentError(f"threshold={threshold!r} must be a finite number")
    if max_edges is not None and (isinstance(max_edges, bool) or not isinstance(max_edges, int) or max_edges < 1):
        raise ArgumentError(f"max_edges={max_edges!r} must be a positive int or None")
    # earlier layer -> later layer only
    lsrc = np.arange(n_l)[:, None, None, None]
    ldst = np.arange(n_l)[None, None, :, None]
    valid = np.broadcast_to(lsrc < ldst, (n_l, n_h, n_l, n_h)).copy()
    if keep is not None:
        sel = np.zeros((n_l, n_h), dtype=bool)
        for l, h in keep:
            sel[l, h] = True
        valid &= sel[:, :, None, None] & sel[None, None, :, :]
    edges: list[dict[str, Any]] = []
    for k, a in by_kind.items():
        ok = valid & np.isfinite(a)
        if threshold is not None:
            ok &= a >= threshold
        idx = np.argwhere(ok)
        vals = a[ok]
        order = np.argsort(-vals, kind="stable")
        if max_edges is not None:
            order = order[:max_edges]
        for i in order:
            l1, h1, l2, h2 = (int(x) for x in idx[i])
            edges.append({"src": f"L{l1}.H{h1}", "dst": f"L{l2}.H{h2}", "kind": k, "score": float(vals[i])})
    labels = set()
    for e in edges:
        labels.update((e["src"], e["dst"]))
    if keep is not None:
        labels.update(f"L{l}.H{h}" for l, h in keep)
    nodes = []
    for lab in sorted(labels, key=lambda s: parse_head(s)):
        l, h = parse_head(lab)
        node = {"label": lab, "layer": l, "head": h}
        if node_values is not None and lab in node_values:
            node["value"] = float(node_values[lab])
        nodes.append(node)
    return CompositionGraph(nodes=nodes, edges=edges, threshold=threshold, max_edges=max_edges, n_layers=n_l,
                            n_heads=n_h, node_value_name=node_value_name, title=title,
                            meta={"kinds": list(by_kind)})


def _kind_colour(kind: str, i: int) -> str:
    return KIND_COLOURS.get(kind, _OTHER_COLOURS[i % len(_OTHER_COLOURS)])


def _draw(graph: CompositionGraph) -> go.Figure:
    """Plot a CompositionGraph: nodes at (layer, head), one curved line per edge."""
    fig = go.Figure()
    pos = {n["label"]: (n["layer"], n["head"]) for n in graph.nodes}
    kinds = list(dict.fromkeys([*graph.meta.get("kinds", []), *(e["kind"] for e in graph.edges)]))
    scores = np.array([e["score"] for e in graph.edges]) if graph.edges else np.zeros(0)
    lo, hi = (float(scores.min()), float(scores.max())) if len(scores) else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0
    t = np.linspace(0.0, 1.0, 16)
    for ki, kind in enumerate(kinds):
        colour = _kind_colour(kind, ki)
        mid_x, mid_y, mid_h = [], [], []
        first = True
        for e in (e for e in graph.edges if e["kind"] == kind):
            (x0, y0), (x1, y1) = pos[e["src"]], pos[e["dst"]]
            w = (e["score"] - lo) / span  # 0..1
            bend = _BEND.get(kind, 0.2 * (ki + 1))
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2 + bend * max(1.0, abs(x1 - x0) ** 0.5)
            xs = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t ** 2 * x1  # quadratic Bézier
            ys = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t ** 2 * y1
            hov = f"<b>{kind}</b>-composition {esc(e['src'])} → {esc(e['dst'])}<br>score {fmt(e['score'])}"
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", line=dict(color=colour, width=1 + 5 * w, dash=_DASH.get(kind, "solid")),
                opacity=0.35 + 0.6 * w, hoverinfo="skip", legendgroup=kind, showlegend=first,
                name=f"{kind}-composition" if kind in KIND_COLOURS else kind,
            ))
            first = False
            mid_x.append(float(xs[8]))
            mid_y.append(float(ys[8]))
            mid_h.append(hov)
        if mid_x:  # hover targets on the edges' midpoints
            fig.add_trace(go.Scatter(x=mid_x, y=mid_y, mode="markers", marker=dict(size=9, color=colour, opacity=0.0),
                                     hovertext=mid_h, hoverinfo="text", legendgroup=kind, showlegend=False,
                                     name=f"{kind} edges"))
    if graph.nodes:
        vals = [n.get("value") for n in graph.nodes]
        has_vals = any(v is not None for v in vals)
        hover = [f"head <b>{esc(n['label'])}</b>" + (f"<br>{esc(graph.node_value_name)}: {fmt(n['value'])}"
                                                     if n.get("value") is not None else "") for n in graph.nodes]
        marker: dict[str, Any] = dict(size=18, line=dict(color="#333", width=1))
        if has_vals:
            z = np.array([np.nan if v is None else v for v in vals], dtype=float)
            zmax = float(np.nanmax(np.abs(z))) or 1.0
            marker.update(color=np.nan_to_num(z, nan=0.0), colorscale=DIVERGING, cmid=0.0, cmin=-zmax, cmax=zmax,
                          colorbar=dict(title=graph.node_value_name, x=1.02))
        else:
            marker.update(color="#dddddd")
        fig.add_trace(go.Scatter(
            x=[n["layer"] for n in graph.nodes], y=[n["head"] for n in graph.nodes], mode="markers+text",
            text=[n["label"] for n in graph.nodes], textposition="top center", textfont=dict(size=10),
            marker=marker, hovertext=hover, hoverinfo="text", name="heads", showlegend=False,
        ))
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
        width=1000, height=max(450, 40 * (graph.n_heads or 1) + 200), template="plotly_white",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
    )
    return fig


def composition_graph(scores: Any, **kwargs: Any) -> go.Figure:
    """The circuit diagram as a plotly Figure; keyword options as :func:`composition_edges`.

    Also accepts a :class:`CompositionGraph` directly.
    """
    graph = scores if isinstance(scores, CompositionGraph) else composition_edges(scores, **kwargs)
    return _draw(graph)


def composition_graph_json(scores: Any, **kwargs: Any) -> str:
    """The circuit diagram's nodes and edges as a JSON string (see :class:`CompositionGraph`)."""
    graph = scores if isinstance(scores, CompositionGraph) else composition_edges(scores, **kwargs)
    return graph.to_json()
