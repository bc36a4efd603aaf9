"""The figures of an edge circuit's evaluation: M(circuit), M(all edges) and M(no edges) with the circuit's
faithfulness (M(C) − M(∅)) / (M(all) − M(∅)), and the faithfulness of the top-k circuits over k per ablation with
its CPR and CMD (docs/math.md §25).

Each reads its result by its attributes and ``to_dataframe()`` (a ``CircuitEvaluation`` or ``FaithfulnessCurve`` of
:mod:`interp.edges`, or anything shaped like one).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

__all__ = ["circuit_evaluation_figure", "circuit_faithfulness_figure"]


def circuit_evaluation_figure(evaluation: Any) -> go.Figure:
    """Bars of the metric on the circuit, on all edges and on no edges, each with its faithfulness."""
    df = evaluation.to_dataframe()
    fig = go.Figure(
        go.Bar(
            x=df["run"],
            y=df["value"],
            text=[f"{f:.2f}" for f in df["faithfulness"]],
            hovertemplate="%{x}: %{y:.4g}<br>faithfulness %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"circuit of {evaluation.n_edges:,} edges ({evaluation.ablation} ablation): faithfulness "
        f"{evaluation.faithfulness:.3f}",
        yaxis_title=evaluation.metric,
    )
    return fig


def circuit_faithfulness_figure(curve: Any) -> go.Figure:
    """Faithfulness of the top-k circuits against k (log axis), one line per ablation named with its CPR and CMD;
    a dotted line at 1 (the whole graph)."""
    fig = go.Figure()
    for i, a in enumerate(curve.ablations):
        fig.add_trace(
            go.Scatter(
                x=list(curve.sizes),
                y=curve.faithfulness[i].tolist(),
                mode="lines+markers",
                name=f"{a} (CPR {float(curve.cpr[i]):.2f}, CMD {float(curve.cmd[i]):.2f})",
                hovertemplate="k=%{x:.3g}<br>faithfulness %{y:.3f}<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_layout(
        title=f"faithfulness of the top-k {curve.method} circuits ({curve.model_name}, {curve.metric})",
        xaxis=dict(title="fraction of edges k", type="log"),
        yaxis_title="faithfulness",
    )
    return fig
