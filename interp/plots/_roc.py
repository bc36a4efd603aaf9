"""The ROC curve of an edge ranking against a circuit known by construction.

Edges are taken in the order of their scores, largest first; after the k-th, the curve is at
(FPR, TPR) = (false edges so far / false edges, true edges so far / true edges). Tied scores are one
step (the curve goes diagonally across a tie), so the area under it is the ranking's ROC AUC.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from interp.plots._common import require_attr

__all__ = ["edge_roc_figure"]


def _roc_points(scores: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(FPR, TPR) after each distinct score, largest first, from (0, 0) to (1, 1); the indices of each step."""
    order = np.argsort(-scores, kind="stable")
    s, t = scores[order], truth[order]
    n_true, n_false = max(int(t.sum()), 1), max(int((~t).sum()), 1)
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])  # last index of each tie group
    tp, fp = np.cumsum(t)[ends], np.cumsum(~t)[ends]
    starts = np.r_[0, ends[:-1] + 1]
    groups = [order[a : b + 1] for a, b in zip(starts, ends)]
    return np.r_[0.0, fp / n_false], np.r_[0.0, tp / n_true], groups


def edge_roc_figure(ranking: Any) -> go.Figure:
    """ROC curve of an EdgeRanking-like result (``scores`` [n_edges], ``truth`` [n_edges] bool, ``edges``,
    ``auc``, ``task``, ``method``, ``ablation``); hover names the edges each step adds."""
    require_attr(
        ranking,
        ("scores", "truth", "edges", "auc", "task", "method", "ablation"),
        name="ranking",
        expected="an EdgeRanking (interp.groundtruth.edge_ranking)",
    )
    scores = ranking.scores.double().cpu().numpy()
    truth = ranking.truth.cpu().numpy().astype(bool)
    fpr, tpr, groups = _roc_points(scores, truth)
    edges = list(ranking.edges)

    def names(g: np.ndarray) -> str:
        shown = [edges[i] + (" ✓" if truth[i] else "") for i in g[:6]]
        return "<br>".join(shown + ([f"… {len(g) - 6} more"] if len(g) > 6 else []))

    hover = ["start"] + [f"score {scores[g[0]]:.3g}: {len(g)} edge(s)<br>{names(g)}" for g in groups]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "grey"}, name="chance", hoverinfo="skip"
        )
    )
    fig.add_trace(
        go.Scatter(
            x=fpr,
            y=tpr,
            mode="lines+markers",
            name=f"{ranking.method} ({ranking.ablation})",
            text=hover,
            hovertemplate="FPR %{x:.3f}, TPR %{y:.3f}<br>%{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"edge ROC — {ranking.task}: {ranking.method}, {ranking.ablation} ablation, "
        f"AUC {ranking.auc:.3f} ({int(truth.sum())} true of {len(edges)} edges)",
        xaxis_title="false-positive rate (false edges kept)",
        yaxis_title="true-positive rate (true edges kept)",
        xaxis={"range": [-0.02, 1.02]},
        yaxis={"range": [-0.02, 1.02]},
    )
    return fig
