"""Decomposition of one read point as a bar chart of its top writes.

For a read point R at (prompt b, position p) with terms c_i (``Decomposition.contributions``)
and total t = Σ_i c_i, each term is drawn by its projection on the total,

    proj_i = c_i · t / ‖t‖,        Σ_i proj_i = ‖t‖,

(the share of the read each write is responsible for; Elhage et al. 2021 §2, "the residual
stream as a communication channel") and its norm ‖c_i‖ (how much it writes at all, including
directions that later cancel). The top ``k`` terms by |proj| are shown; the rest are summed
into one "other terms" bar so that the bars still add up to ‖t‖.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from interp._validate import check_positive_int
from interp.errors import ArgumentError
from interp.plots._common import as_numpy, check_index, closure_text, esc, fmt, quoted, require_attr

__all__ = ["decomposition_figure", "decomposition_table"]


def decomposition_table(decomposition: Any, *, prompt: int = 0, pos: Any = -1) -> dict[str, np.ndarray]:
    """Per-term ``projection`` and ``norm`` at (prompt, pos) — ``pos="mean"``: averaged over the prompt's
    real tokens (``pos`` is then reported as −1) — the terms themselves [n_terms, k] and the total's
    norm (float64)."""
    require_attr(
        decomposition,
        ("labels", "contributions", "total"),
        name="decomposition",
        expected="an interp Decomposition (from ResidualTrace.decompose)",
    )
    c = as_numpy(decomposition.contributions, name="decomposition.contributions", ndim=4)
    t = as_numpy(decomposition.total, name="decomposition.total", ndim=3)
    n_terms, n_b, n_p, _ = c.shape
    if n_terms == 0:
        raise ArgumentError(f"decomposition of {getattr(decomposition, 'point', '?')!r} has no terms to plot")
    b = check_index(prompt, n_b, name="prompt", what="prompts")
    mask = getattr(decomposition, "attention_mask", None)
    if pos == "mean":  # the mean over the prompt's real tokens (a mean-pooled sentence embedding)
        real = np.ones(n_p, dtype=bool) if mask is None else as_numpy(mask, name="attention_mask")[b].astype(bool)
        cv, tv, p = c[:, b, real].mean(axis=1), t[b, real].mean(axis=0), -1
    else:
        p = check_index(pos, n_p, name="pos", what="positions")
        if mask is not None and not bool(mask[b, p]):
            raise ArgumentError(f"pos={pos} of prompt {prompt} is padding; pick a real token")
        cv, tv = c[:, b, p], t[b, p]
    tnorm = float(np.linalg.norm(tv))
    proj = cv @ tv / max(tnorm, 1e-30)
    return {
        "labels": np.array(decomposition.labels, dtype=object),
        "projection": proj,
        "norm": np.linalg.norm(cv, axis=-1),
        "terms": cv,
        "total_norm": np.array(tnorm),
        "prompt": np.array(b),
        "pos": np.array(p),
    }


def decomposition_figure(decomposition: Any, *, prompt: int = 0, pos: Any = -1, k: int = 20) -> go.Figure:
    """Horizontal bars of the top-``k`` writes' projections on the read's total at (prompt, pos).

    Bars (projection, signed) and diamonds (norm) per term; the remaining terms are one
    "other terms" bar; hover names the term, both numbers, and the token at ``pos``.
    """
    check_positive_int("k", k)
    tab = decomposition_table(decomposition, prompt=prompt, pos=pos)
    labels, proj, norm = tab["labels"], tab["projection"], tab["norm"]
    b, p = int(tab["prompt"]), int(tab["pos"])
    order = np.argsort(-np.abs(proj), kind="stable")
    top, rest = order[:k], order[k:]
    names = [str(labels[i]) for i in top]
    vals = [float(proj[i]) for i in top]
    norms = [float(norm[i]) for i in top]
    if len(rest):
        names.append(f"other {len(rest)} terms")
        vals.append(float(proj[rest].sum()))
        norms.append(float(np.linalg.norm(tab["terms"][rest].sum(0))))
    str_tokens = getattr(decomposition, "str_tokens", None)
    point = getattr(decomposition, "point", "read point")
    if pos == "mean":
        where = "mean over the prompt's tokens"
    else:
        tok = quoted(str_tokens[b][p]) if str_tokens else f"#{p}"  # quoted + escaped
        where = f"token {tok} (pos {p})"
    hover = [
        f"term <b>{esc(n)}</b><br>projection on total: {fmt(v)}<br>norm: {fmt(m)}<br>"
        f"read: {esc(point)} at {where}, prompt {b}"
        for n, v, m in zip(names, vals, norms)
    ]
    y = names[::-1]  # largest at the top
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            name="projection on total",
            y=y,
            x=vals[::-1],
            orientation="h",
            marker_color=["#2166ac" if v >= 0 else "#b2182b" for v in vals[::-1]],
            hovertext=hover[::-1],
            hoverinfo="text",
        )
    )
    fig.add_trace(
        go.Scatter(
            name="norm",
            y=y,
            x=norms[::-1],
            mode="markers",
            marker=dict(symbol="diamond", color="#444", size=7),
            hovertext=hover[::-1],
            hoverinfo="text",
        )
    )
    ce = getattr(decomposition, "closure_error", float("nan"))
    fig.update_layout(
        title=(
            f"{esc(point)} at {where}: top {min(k, len(labels))} of {len(labels)} writes"
            f"<br><sup>bars sum to ‖total‖ = {fmt(float(tab['total_norm']))}; "
            f"{closure_text(ce, getattr(decomposition, 'relative_error', None))}</sup>"
        ),
        xaxis_title="projection on the total (bars) / norm (diamonds)",
        yaxis_title="write",
        width=900,
        height=max(380, 26 * len(y) + 140),
        template="plotly_white",
        barmode="overlay",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
    )
    return fig
