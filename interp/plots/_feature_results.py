"""The figures of the feature results' ``.plot()``: an attribution graph drawn statically, an aggregate's features, a
generation's KL per step, an intervention's logit changes and a QK attribution's terms.

Each reads its result by its attributes and ``to_dataframe()`` (an ``AttributionGraph``, ``AggregateGraph``,
``GenerationResult``, ``InterventionResult``, ``QKAttribution`` of :mod:`interp.features`, or anything shaped like
one); the interactive graph viewer is :func:`interp.plots.feature_graph_view`.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from interp import labels as L
from interp._validate import check_choice, check_index, check_positive_int

__all__ = [
    "aggregate_graph_figure",
    "attribution_graph_figure",
    "generation_figure",
    "intervention_figure",
    "qk_attribution_figure",
]


def attribution_graph_figure(graph: Any, *, max_edges: int = 200) -> go.Figure:
    """An attribution graph's nodes at (position, layer) — embeddings at layer −1, the output above the last layer —
    and its ``max_edges`` largest edges (``graph.edges()``) as lines (blue positive, red negative)."""
    fig = go.Figure()
    e = graph.edges().head(max_edges)
    at = {lab: (p, l) for lab, p, l in zip(graph.node_labels, graph.node_pos, graph.node_layer)}
    for sign, colour in ((1, "rgba(31,119,180,0.5)"), (-1, "rgba(214,39,40,0.5)")):
        xs: list[Any] = []
        ys: list[Any] = []
        for s, t, wt in zip(e["source"], e["target"], e["weight"]):
            if (wt > 0) == (sign > 0):
                xs += [at[s][0], at[t][0], None]
                ys += [at[s][1], at[t][1], None]
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines", line={"color": colour, "width": 1}, hoverinfo="skip", showlegend=False)
        )
    for kind in ("token", "feature", "error", "logit"):
        ids = [i for i, k in enumerate(graph.node_kind) if k == kind]
        fig.add_trace(
            go.Scatter(
                x=[graph.node_pos[i] for i in ids],
                y=[graph.node_layer[i] for i in ids],
                mode="markers",
                name=kind,
                text=[graph.node_labels[i] for i in ids],
            )
        )
    fig.update_layout(
        title=f"attribution graph of {graph.target} ({graph.model_name})", xaxis_title="position", yaxis_title="layer"
    )
    return fig


def aggregate_graph_figure(aggregate: Any, *, n: int = 30, by: str = "direct") -> go.Figure:
    """The ``n`` feature identities of an aggregate of graphs with the largest mean ``by`` ("direct": direct effect
    on the answer; "influence") by magnitude (bars), hover with both and their counts."""
    check_choice("by", by, ("direct", "influence"))
    check_positive_int("n", n)
    df = aggregate.to_dataframe()
    df = df[df["kind"] == "feature"].sort_values(by, key=abs, ascending=False, kind="stable").head(n)
    hover = [
        f"{lab}: direct effect {d:.3g}, influence {v:.3g} (means over {aggregate.n_prompts} prompts)<br>active in "
        f"{a}, kept in {k}, {p} positions"
        for lab, d, v, a, k, p in zip(
            df["node"], df["direct"], df["influence"], df["n_active"], df["n_kept"], df["n_positions"]
        )
    ]
    fig = go.Figure(go.Bar(x=df["node"], y=df[by], hovertext=hover, hoverinfo="text"))
    what = "direct effect on the answer" if by == "direct" else "influence on the answer"
    fig.update_layout(
        title=f"features by mean {what} over {aggregate.n_prompts} prompts ({aggregate.model_name})",
        xaxis_title="feature",
        yaxis_title=f"mean {what}",
    )
    return fig


def generation_figure(result: Any, *, prompt: int = 0) -> go.Figure:
    """KL(intervened ‖ baseline) per generated step of prompt ``prompt``, each bar labelled with the two tokens
    (red where they differ)."""
    b = check_index("prompt", prompt, result.n_prompts, what="prompts")
    df = result.to_dataframe()
    df = df[df["prompt"] == b]
    text = [f"{t!r} / {bt!r}" for t, bt in zip(df["token"], df["baseline_token"])]
    fig = go.Figure(
        go.Bar(x=df["step"], y=df["kl"], hovertext=text, marker_color=["#888" if s else "#d62728" for s in df["same"]])
    )
    fig.update_layout(
        title=f"{result.model_name}: {'; '.join(result.interventions) or 'no intervention'} "
        f"({result.regime}) — KL(intervened ‖ baseline) per step, red: the tokens differ",
        xaxis_title="step",
        yaxis_title="KL (nats)",
    )
    return fig


def intervention_figure(result: Any) -> go.Figure:
    """The change of each token's logit in an intervention's table (bars), largest |change| first; beside it, in
    another regime than the live one, the live model's change."""
    df = result.to_dataframe().sort_values("change", key=abs, ascending=False)
    fig = go.Figure(go.Bar(x=df["token"], y=df["change"], hovertext=df["label"], name=result.regime or "change"))
    live = result.regime != "live" and result.live_logits_after is not None
    if live:
        fig.add_trace(go.Bar(x=df["token"], y=df["live_change"], hovertext=df["label"], name="live"))
    fig.update_layout(
        title=f"logit change after {'; '.join(result.interventions)} ({result.model_name}; metric "
        f"{result.target}: {result.metric_before:.4g} → {result.metric_after:.4g}"
        + (f", live {result.live_metric_after:.4g})" if live else ")"),
        xaxis_title="token",
        yaxis_title="Δ logit",
        barmode="group",
        showlegend=live,
    )
    return fig


def qk_attribution_figure(result: Any, *, max_nodes: int = 30) -> go.Figure:
    """Heatmap of a QK attribution's terms between the ``max_nodes`` query-side and key-side nodes with the largest
    shares (``matrix`` [query-side, key-side], ``q_labels``, ``k_labels``)."""
    M = result.matrix
    qi = M.sum(1).abs().argsort(descending=True)[:max_nodes]
    ki = M.sum(0).abs().argsort(descending=True)[:max_nodes]
    sub = M[qi][:, ki]
    lim = float(sub.abs().max()) or 1.0
    fig = go.Figure(
        go.Heatmap(
            z=sub.tolist(),
            x=[result.k_labels[j] for j in ki.tolist()],
            y=[result.q_labels[i] for i in qi.tolist()],
            colorscale="RdBu",
            zmin=-lim,
            zmax=lim,
            hovertemplate="query %{y}<br>key %{x}<br>term %{z:.4g}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"QK attribution of {L.Head(result.layer, result.head)}, query {result.query_pos} → key "
        f"{result.key_pos} (score {result.score:.4g}; {result.model_name})",
        xaxis_title="key-side node",
        yaxis_title="query-side node",
    )
    return fig
