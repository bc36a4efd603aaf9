"""Figures of causal results: patching heatmaps and total / direct / indirect effects.

``patch_figure`` draws a patching result (:class:`interp.causal.PatchResult` or anything with its
attributes): a layer × head heatmap of the head nodes with the other nodes as bars beside it
(``positions="all"``), or a node × position heatmap (``positions="each"``). By default it shows
the normalized value (value − corrupt) / (clean − corrupt) — 0 is the corrupt run's metric, 1 the
clean run's — when both baselines exist, else the effect (value − the base run's metric).

``effects_figure`` draws :class:`interp.causal.Effects`: three panels side by side — total, direct,
indirect — with one bar per node (the ``k`` nodes of largest |total|, in stream order) on a
shared axis, so a node that writes the answer directly (direct ≈ total) stands apart from one
that acts through later nodes (indirect ≈ total).

Both read only the result's attributes; neither runs a model.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp._validate import check_choice, check_positive_int
from interp.errors import ArgumentError
from interp.labels import Head
from interp.plots._common import (
    diverging_heatmap,
    as_numpy,
    esc,
    fmt,
    head_grid,
    head_grid_shape,
    require_attr,
    unique_token_labels,
)

__all__ = ["patch_figure", "effects_figure"]

_WHAT = ("auto", "normalized", "effect", "value")


def _patch_values(result: Any, what: str, prompt: Optional[int]) -> tuple[np.ndarray, str]:
    """(values to draw [n_nodes] or [n_nodes, pos], the colour-bar title)."""
    v = as_numpy(result.values if prompt is None else result.per_prompt[..., prompt], name="result.values")
    clean, corrupt = float(getattr(result, "clean", math.nan)), float(getattr(result, "corrupt", math.nan))
    if prompt is not None:
        clean = float(as_numpy(result.clean_per_prompt, name="clean")[prompt])
        corrupt = float(as_numpy(result.corrupt_per_prompt, name="corrupt")[prompt])
    direction = getattr(result, "direction", "denoise")
    base = clean if direction == "noise" else corrupt
    gap = clean - corrupt
    if what == "auto":
        what = "normalized" if math.isfinite(gap) and gap != 0 else ("effect" if math.isfinite(base) else "value")
    if what == "normalized":
        if not (math.isfinite(gap) and gap != 0):
            raise ArgumentError(
                "what='normalized' needs finite clean and corrupt baselines that differ; "
                f"got clean={clean}, corrupt={corrupt}"
            )
        return (v - corrupt) / gap, "normalized"
    if what == "effect":
        return v - base, "effect (value − base)"
    return v, "metric after patch"


def patch_figure(
    result: Any, *, what: str = "auto", prompt: Optional[int] = None, max_side_nodes: int = 40
) -> go.Figure:
    """A patching result as a layer × head heatmap (+ bars of other nodes) or a node × position heatmap.

    ``what``: "normalized", "effect" (value − the base run's metric), "value" or "auto" (normalized when
    both baselines exist). ``prompt``: one prompt's values instead of the mean over prompts.
    """
    require_attr(
        result, ("values", "labels"), name="result", expected="a PatchResult-like result with .values and .labels"
    )
    check_choice("what", what, _WHAT)
    check_positive_int("max_side_nodes", max_side_nodes)
    labels = list(result.labels)
    v, title = _patch_values(result, what, prompt)
    if v.shape[0] != len(labels) or v.shape[0] == 0:
        raise ArgumentError(f"result has {len(labels)} labels for values of shape {v.shape}")
    heading = f"{esc(getattr(result, 'method', 'patching'))} of {esc(getattr(result, 'metric', 'metric'))}"
    sub = _patch_subtitle(result, prompt)
    if v.ndim == 2:
        return _node_position_figure(result, labels, v, title, f"{heading} (node × position)<br><sup>{sub}</sup>")
    return _head_figure(result, labels, v, title, max_side_nodes, f"{heading}<br><sup>{sub}</sup>")


def _patch_subtitle(result: Any, prompt: Optional[int]) -> str:
    """``direction, ablation … · who · clean …, corrupt …`` (HTML-safe)."""
    direction = esc(getattr(result, "direction", ""))
    ablation = esc(getattr(result, "ablation", ""))
    details = getattr(result, "details", {}) or {}
    extra = "".join(f" · {esc(k)} {esc(details[k])}" for k in ("sender", "via") if k in details)
    who = "mean over prompts" if prompt is None else f"prompt {prompt}"
    return (
        f"{direction}, ablation {ablation}{extra} · {who} · clean {fmt(getattr(result, 'clean', math.nan))}, "
        f"corrupt {fmt(getattr(result, 'corrupt', math.nan))}"
    )


def _node_position_figure(result: Any, labels: list[str], v: np.ndarray, title: str, heading: str) -> go.Figure:
    """Values [n_nodes, pos] as a node × position heatmap (diverging, centred at 0)."""
    toks = getattr(result, "str_tokens", None)
    x = unique_token_labels(toks) if toks and len(toks) == v.shape[1] else list(range(v.shape[1]))
    zmax = float(np.nanmax(np.abs(v))) if np.isfinite(v).any() else 1.0
    hover = [
        [f"node <b>{esc(lab)}</b> at {esc(x[p])}<br>{title}: {fmt(v[i, p])}" for p in range(v.shape[1])]
        for i, lab in enumerate(labels)
    ]
    fig = go.Figure(diverging_heatmap(v, hover, zmax, dict(title=title), x=x, y=labels))
    fig.update_yaxes(autorange="reversed", type="category", title_text="node")
    fig.update_xaxes(type="category", title_text="position")
    fig.update_layout(
        title=heading,
        width=1000,
        height=max(420, min(14 * len(labels), 4000) + 200),
        template="plotly_white",
    )
    return fig


def _head_figure(
    result: Any, labels: list[str], v: np.ndarray, title: str, max_side_nodes: int, heading: str
) -> go.Figure:
    """Values [n_nodes] as a layer × head heatmap of the head nodes, with the other nodes as bars beside it."""
    n_l, n_h = head_grid_shape(labels, result)
    grid, side = head_grid(labels, v, n_l, n_h)
    has_heads = bool(np.isfinite(grid).any())
    cols = (2 if side else 1) if has_heads else 1
    fig = make_subplots(
        rows=1,
        cols=cols,
        column_widths=[0.64, 0.36] if cols == 2 else None,
        horizontal_spacing=0.2,
        subplot_titles=((("heads (layer × head)",) if has_heads else ()) + (("other nodes",) if side else ())),
    )
    if has_heads:
        zmax = float(np.nanmax(np.abs(grid))) or 1.0
        hover = [[f"node <b>{Head(l, h)}</b><br>{title}: {fmt(grid[l, h])}" for h in range(n_h)] for l in range(n_l)]
        fig.add_trace(
            diverging_heatmap(
                grid, hover, zmax, dict(title=title, x=1.02, len=0.9), x=list(range(n_h)), y=list(range(n_l))
            ),
            row=1,
            col=1,
        )
        fig.update_xaxes(title_text="head", dtick=1 if n_h <= 20 else None, row=1, col=1)
        fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if n_l <= 32 else None, row=1, col=1)
    if side:
        shown = sorted(side, key=lambda kv: -abs(kv[1]) if math.isfinite(kv[1]) else 0)[:max_side_nodes]
        order = {lab: i for i, lab in enumerate(labels)}
        shown.sort(key=lambda kv: order[kv[0]])
        fig.add_trace(
            go.Bar(
                x=[x for _, x in shown],
                y=[n for n, _ in shown],
                orientation="h",
                marker_color=["#2166ac" if x >= 0 else "#b2182b" for _, x in shown],
                hovertext=[f"node <b>{esc(n)}</b><br>{title}: {fmt(x)}" for n, x in shown],
                hoverinfo="text",
            ),
            row=1,
            col=cols,
        )
        fig.update_yaxes(autorange="reversed", type="category", row=1, col=cols)
        fig.update_xaxes(title_text=title, row=1, col=cols)
    fig.update_layout(
        title=heading,
        width=1000,
        height=max(420, 18 * n_l + 200, 20 * (min(len(side), max_side_nodes) + 1) + 200),
        template="plotly_white",
        showlegend=False,
    )
    return fig


def effects_figure(effects: Any, *, k: int = 30) -> go.Figure:
    """Total, direct and indirect effect side by side for the ``k`` nodes of largest |total| (stream order)."""
    require_attr(
        effects,
        ("total", "direct", "indirect", "labels"),
        name="effects",
        expected="an Effects-like result with .total, .direct, .indirect and .labels",
    )
    check_positive_int("k", k)
    labels = list(effects.labels)
    vals = {w: as_numpy(getattr(effects, w), name=f"effects.{w}").reshape(-1) for w in ("total", "direct", "indirect")}
    if any(len(x) != len(labels) for x in vals.values()) or not labels:
        raise ArgumentError(f"effects has {len(labels)} labels but values of lengths {[len(x) for x in vals.values()]}")
    top = np.sort(np.argsort(-np.abs(np.nan_to_num(vals["total"])), kind="stable")[:k])
    names = [labels[i] for i in top]
    span = max(float(np.nanmax(np.abs(np.stack([x[top] for x in vals.values()])))), 1e-12)
    fig = make_subplots(
        rows=1, cols=3, shared_yaxes=True, horizontal_spacing=0.03, subplot_titles=("total", "direct", "indirect")
    )
    for c, w in enumerate(("total", "direct", "indirect"), start=1):
        x = vals[w][top]
        fig.add_trace(
            go.Bar(
                x=x,
                y=names,
                orientation="h",
                name=w,
                marker_color=["#2166ac" if xi >= 0 else "#b2182b" for xi in x],
                hovertext=[
                    f"node <b>{esc(n)}</b><br>total {fmt(vals['total'][i])}<br>direct {fmt(vals['direct'][i])}"
                    f"<br>indirect {fmt(vals['indirect'][i])}"
                    for n, i in zip(names, top)
                ],
                hoverinfo="text",
            ),
            row=1,
            col=c,
        )
        fig.update_xaxes(range=[-1.05 * span, 1.05 * span], title_text=f"{w} effect", row=1, col=c)
    fig.update_yaxes(autorange="reversed", type="category")
    metric = esc(getattr(effects, "metric", "metric"))
    fig.update_layout(
        title=(
            f"Effects on {metric}: top {len(top)} of {len(labels)} nodes by |total|<br><sup>ablation "
            f"{esc(getattr(effects, 'ablation', ''))} · clean {fmt(getattr(effects, 'clean', math.nan))} · "
            "direct: later nodes and the final scale frozen; indirect = total − direct</sup>"
        ),
        width=1100,
        height=max(420, 20 * len(top) + 220),
        template="plotly_white",
        showlegend=False,
    )
    return fig
