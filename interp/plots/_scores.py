"""Figures of the circuit results: head scores, composition scores, virtual-weight norms, OV self-ranks,
path-expansion terms, write-subspace overlaps, erasure candidates and the privileged-basis report.

Each builder reads the result by its attributes (the result classes live in :mod:`interp.circuits`;
their ``.plot()`` calls these) and returns a plotly ``go.Figure`` without showing it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import plotly.graph_objects as go

from interp.labels import Head

__all__ = [
    "composition_score_map",
    "erasure_figure",
    "head_score_map",
    "path_expansion_figure",
    "privileged_basis_figure",
    "self_rank_histogram",
    "subspace_overlap_map",
    "virtual_weight_map",
]


def _of(result: Any) -> str:
    name = getattr(result, "model_name", None)
    return f" — {name}" if name else ""


def head_score_map(scores: Any) -> go.Figure:
    """Layer × head heatmap of a HeadScores-like result (``scores`` [n_layers, n_heads], ``metric``)."""
    z = scores.scores.double().cpu().numpy()
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"H{h}" for h in range(scores.n_heads)],
            y=[f"L{l}" for l in range(scores.n_layers)],
            colorscale="RdBu",
            zmid=0,
            colorbar={"title": scores.metric},
            hovertemplate="%{y}.%{x}: %{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"{scores.metric}{_of(scores)}", xaxis_title="head", yaxis_title="layer", yaxis={"autorange": "reversed"}
    )
    return fig


def composition_score_map(scores: Any) -> go.Figure:
    """Heatmap of all [src head, dst head] scores of a CompositionScores-like result (rows: dst)."""
    L, H = scores.n_layers, scores.n_heads
    z = scores.scores.reshape(L * H, L * H).T.double().cpu().numpy()  # rows: dst, columns: src
    labels = [str(Head(l, h)) for l in range(L) for h in range(H)]
    heads = getattr(scores, "heads", None)
    if heads is not None:  # only the chosen heads' rows and columns
        keep = [labels.index(lab) for lab in heads]
        z, labels = z[keep][:, keep], list(heads)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=labels,
            colorscale="Blues",
            zmin=0,
            colorbar={"title": "score"},
            hovertemplate="src %{x} → dst %{y}: %{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"{scores.kind}-composition scores{_of(scores)}",
        xaxis_title="source head (writes)",
        yaxis_title="destination head (reads)",
        yaxis={"autorange": "reversed"},
    )
    return fig


def virtual_weight_map(norms: Any) -> go.Figure:
    """Heatmap of ‖W_O W_I‖_F, writes × reads, of a VirtualWeightNorms-like result."""
    fig = go.Figure(
        go.Heatmap(
            z=norms.values.double().cpu().numpy(),
            x=norms.reads,
            y=norms.writes,
            colorscale="Viridis",
            colorbar={"title": "‖W_O W_I‖_F"},
            hovertemplate="%{y} → %{x}: %{z:.3g}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"virtual weight norms{_of(norms)}",
        xaxis_title="read",
        yaxis_title="write",
        yaxis={"autorange": "reversed"},
    )
    return fig


def self_rank_histogram(stats: Any) -> go.Figure:
    """Histogram of each token's rank in its own full-OV row (log-spaced if the ranks are exact)."""
    r = stats.ranks.double().cpu().numpy()
    x = np.log10(r + 1) if stats.ranks_exact else r
    fig = go.Figure(go.Histogram(x=x, nbinsx=60 if stats.ranks_exact else stats.k + 1))
    fig.update_layout(
        title=f"{stats.label}: rank of each token in its own full-OV row "
        f"(top-1 {stats.top1:.1%}, top-{stats.k} {stats.topk:.1%})",
        xaxis_title="log10(rank + 1)" if stats.ranks_exact else f"rank (capped at {stats.k})",
        yaxis_title="tokens",
    )
    return fig


def path_expansion_figure(expansion: Any, *, k: int = 20, prompt: Optional[int] = None) -> go.Figure:
    """Horizontal bars of a PathExpansion's ``k`` largest |contributions| (the mean over prompts unless
    ``prompt``), coloured by path order."""
    top = expansion.top(k, prompt=prompt, absolute=True)
    colours = {0: "#7f7f7f", 1: "#1f77b4", 2: "#d62728"}
    fig = go.Figure(
        go.Bar(
            x=list(top["value"])[::-1],
            y=list(top["label"])[::-1],
            orientation="h",
            marker_color=[colours.get(int(o), "#9467bd") for o in top["order"]][::-1],
            hovertemplate="%{y}: %{x:.4f}<extra></extra>",
        )
    )
    which = "mean over prompts" if prompt is None else f"prompt {prompt}"
    answers = expansion.answer_str
    ans = answers[0] if answers and len(set(answers)) == 1 else "answer"
    fig.update_layout(
        title=f"Path expansion (order ≤ {expansion.order}): contributions to logit[{ans}] ({which})",
        xaxis_title="contribution to logit",
        yaxis_title="path (grey: direct/bias, blue: one head, red: virtual head)",
        height=max(300, 22 * len(top) + 120),
        template="plotly_white",
    )
    return fig


def subspace_overlap_map(overlap: Any) -> go.Figure:
    """Heatmap of the write-subspace overlap (mean cos²) of all head pairs."""
    L, H = overlap.overlap.shape[:2]
    lab = [str(Head(l, h)) for l in range(L) for h in range(H)]
    fig = go.Figure(
        go.Heatmap(
            z=overlap.overlap.reshape(L * H, L * H).double().cpu().numpy(),
            x=lab,
            y=lab,
            colorscale="Blues",
            zmin=0,
            zmax=1,
            colorbar={"title": "mean cos²"},
        )
    )
    fig.update_layout(
        title=f"write-subspace overlap (random baseline {overlap.baseline:.3f}){_of(overlap)}",
        yaxis={"autorange": "reversed"},
    )
    return fig


def erasure_figure(table: Any) -> go.Figure:
    """Bars of the strongest erasure candidates' mean gains (red: negative-definite)."""
    df = table.top(min(30, max(1, len(table.table))))
    fig = go.Figure(
        go.Bar(
            x=[f"{s} → {d}" for s, d in zip(df["src"], df["dst"])],
            y=df["mean_gain"],
            marker_color=["crimson" if n else "grey" for n in df["negative_definite"]],
        )
    )
    fig.update_layout(title=f"erasure candidates (red: negative-definite){_of(table)}", yaxis_title="mean gain tr(E)/k")
    return fig


def privileged_basis_figure(report: Any) -> go.Figure:
    """Median excess kurtosis per layer: residual (own and random basis) and MLP neurons, log y."""
    df = report.to_dataframe()
    fig = go.Figure()
    for name, label in (
        ("resid", "residual stream (own basis)"),
        ("resid_rotated", "residual stream (random basis)"),
        ("neurons", "MLP neurons"),
    ):
        if f"{name}_median" in df:
            fig.add_trace(
                go.Scatter(x=df["layer"], y=df[f"{name}_median"].clip(lower=1e-3), mode="lines+markers", name=label)
            )
    fig.update_layout(
        title=f"privileged basis: median excess kurtosis per coordinate{_of(report)} ({report.n_tokens} tokens)",
        xaxis_title="layer",
        yaxis_title="excess kurtosis (median)",
        yaxis_type="log",
    )
    return fig
