"""The faithfulness curve of a pruned attribution graph over its node threshold.

For each node threshold t the graph pruned at t keeps some feature and error nodes; with every other one ablated
the replacement model recovers f(t) = (M(K_t) − M(∅)) / (M(all) − M(∅)) of the metric (docs/math.md §32). The
figure draws f against t (1 = the full graph, 0 = every node ablated), the fraction of nodes kept beside it, and
names CPR = ∫ f dt and CMD = ∫ |1 − f| dt.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from interp.plots._common import require_attr

__all__ = ["graph_faithfulness_figure"]


def graph_faithfulness_figure(curve: Any, *, width: int = 760, height: int = 440) -> go.Figure:
    """Faithfulness f(t) of a GraphFaithfulness-like result (``thresholds``, ``faithfulness``, ``values``,
    ``n_features``, ``n_errors``, ``n_features_total``, ``n_errors_total``, ``full``, ``empty``, ``cpr``, ``cmd``,
    ``ablation``, ``target``, ``model_name``) against the node threshold, with the fraction of nodes kept (right
    axis); hover gives each point's metric and node counts."""
    require_attr(
        curve,
        (
            "thresholds",
            "faithfulness",
            "values",
            "n_features",
            "n_errors",
            "n_features_total",
            "n_errors_total",
            "full",
            "empty",
            "cpr",
            "cmd",
            "ablation",
            "target",
            "model_name",
        ),
        name="curve",
        expected="a GraphFaithfulness (AttributionGraph.faithfulness)",
    )
    ts = [float(t) for t in curve.thresholds]
    f = curve.faithfulness.double().cpu().tolist()
    v = curve.values.double().cpu().tolist()
    nf, ne = curve.n_features.cpu().tolist(), curve.n_errors.cpu().tolist()
    total = max(int(curve.n_features_total) + int(curve.n_errors_total), 1)
    frac = [(a + b) / total for a, b in zip(nf, ne)]
    hover = [
        f"node threshold {t:g}<br>faithfulness {fi:.3f}<br>metric {vi:.4g} (full {curve.full:.4g}, none "
        f"{curve.empty:.4g})<br>{a} of {curve.n_features_total} features, {b} of {curve.n_errors_total} error "
        f"nodes kept"
        for t, fi, vi, a, b in zip(ts, f, v, nf, ne)
    ]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=ts,
            y=f,
            mode="lines+markers",
            name=f"faithfulness ({curve.ablation} ablation)",
            text=hover,
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=ts,
            y=frac,
            mode="lines",
            name="fraction of nodes kept",
            yaxis="y2",
            line={"dash": "dash", "color": "grey"},
            hoverinfo="skip",
        )
    )
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.add_hline(y=0.0, line_dash="dot", line_color="lightgrey")
    lo, hi, ticks = _shared_axis(f)
    fig.update_layout(
        title=f"faithfulness of the pruned graph — {curve.model_name}, {curve.target}: CPR {curve.cpr:.3f}, "
        f"CMD {curve.cmd:.3f}",
        xaxis_title="node threshold (fraction of influence kept)",
        yaxis={"title": "faithfulness", "range": [lo, hi], "tickvals": ticks},
        yaxis2={
            "title": "fraction of nodes kept",
            "overlaying": "y",
            "side": "right",
            "range": [lo, hi],
            "tickvals": [t for t in ticks if 0.0 <= t <= 1.0],
            "showgrid": False,
        },
        width=width,
        height=height,
        legend={"x": 0.01, "y": 0.99},
    )
    return fig


def _shared_axis(values: list[float]) -> tuple[float, float, list[float]]:
    """One range and one set of evenly spaced ticks for both axes: the faithfulness values with 0 and 1 (the
    fraction of nodes kept lies in [0, 1]), padded by 5 %; ticks every 0.1, 0.2, 0.25, 0.5, 1, 2, … (the first
    step giving at most 8 ticks), so each right-axis tick sits on a left-axis gridline with the same value."""
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = min([0.0, *finite]), max([1.0, *finite])
    pad = 0.05 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    step = next(s * 10**e for e in range(-1, 12) for s in (1.0, 2.0, 2.5, 5.0) if (hi - lo) / (s * 10**e) <= 8)
    first = math.ceil(lo / step)
    ticks = [round(k * step, 10) for k in range(first, math.floor(hi / step) + 1)]
    return lo, hi, ticks
