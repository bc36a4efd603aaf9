"""Logit attribution figures: a layer × head heatmap with the non-head terms beside it, and a waterfall.

With the final norm's scale frozen, a logit (or logit difference) is exactly a sum of terms
(docs/math.md §5; Elhage et al. 2021 §3 "direct path" / direct logit attribution):

    logit = Σ_{l,h} DLA(L{l}.H{h}) + Σ_l DLA(L{l}.mlp) + DLA(embed) + … + biases

The heatmap shows the head terms as a [n_layers, n_heads] grid on a diverging scale centred
at 0; the side bar shows every other term (embeddings, MLPs, biases). The waterfall walks
the top terms in stream order, lumps the rest into one bar, and ends at the total, with the
closure error |Σ terms − logit| in its title.

Both read only ``.values`` [n_terms, batch], ``.labels`` and optionally ``.total``/``.logit``,
``.target``, ``.closure_error``, ``.positions``, ``.str_tokens`` (duck typing), so any result
shaped like :class:`interp.attribution.LogitAttribution` can be drawn.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp._validate import check_positive_int
from interp.errors import ArgumentError
from interp.labels import Head
from interp.plots._common import (
    diverging_heatmap,
    as_numpy,
    closure_text,
    check_index,
    esc,
    fmt,
    head_grid,
    head_grid_shape,
    quoted,
    require_attr,
)

__all__ = ["attribution_heatmap", "attribution_waterfall", "attribution_vector"]


def attribution_vector(
    attribution: Any, *, prompt: Optional[int] = None
) -> tuple[list[str], np.ndarray, Optional[float]]:
    """(labels, values [n_terms], total or None) for one prompt, or the mean over prompts."""
    require_attr(
        attribution,
        ("values", "labels"),
        name="attribution",
        expected="a LogitAttribution-like result with .values [n_terms, batch] and .labels",
    )
    v = as_numpy(attribution.values, name="attribution.values")
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ArgumentError(f"attribution.values must be [n_terms, batch], got shape {v.shape}")
    labels = list(attribution.labels)
    if v.shape[0] == 0 or v.shape[1] == 0:
        raise ArgumentError(f"attribution has no values to plot (values shape {v.shape})")
    if len(labels) != v.shape[0]:
        raise ArgumentError(f"attribution has {len(labels)} labels for {v.shape[0]} terms")
    total = getattr(attribution, "total", None)
    if total is None:
        total = getattr(attribution, "logit", None)
    tot = None if total is None else as_numpy(total, name="attribution.total").reshape(-1)
    if prompt is None:
        return labels, v.mean(axis=1), None if tot is None else float(tot.mean())
    i = check_index(prompt, v.shape[1], name="prompt", what="prompts")
    return labels, v[:, i], None if tot is None else float(tot[i])


def _context(attribution: Any, prompt: Optional[int]) -> tuple[str, str]:
    """(target description, where — HTML-safe, token quoted) for titles and hover.

    One prompt's figure names that prompt's target (``prompt_targets``) and the token it is read at
    (``prompt_str_tokens``; results without them have ``str_tokens`` of prompt 0 only)."""
    target = str(getattr(attribution, "target", "") or "logit")
    n = as_numpy(attribution.values, name="attribution.values").reshape(len(attribution.labels), -1).shape[1]
    i = 0 if (prompt is None and n == 1) else prompt
    per_target = getattr(attribution, "prompt_targets", None)
    if i is not None and per_target and i < len(per_target):
        target = str(per_target[i])
    per_tokens = getattr(attribution, "prompt_str_tokens", None)
    toks = (
        per_tokens[i]
        if (i is not None and per_tokens and i < len(per_tokens))
        else (getattr(attribution, "str_tokens", None) if i == 0 else None)
    )
    positions = getattr(attribution, "positions", None)
    where = "mean over prompts" if i is None else f"prompt {i}"
    if toks and positions is not None and i is not None:
        try:
            p = int(as_numpy(positions, name="positions").reshape(-1)[i])
            at = f"at token {quoted(toks[p])} (pos {p})" if p >= 0 else "mean over tokens"
            where = at if n == 1 else f"prompt {i}, {at}"
        except (IndexError, ValueError):
            pass
    return target, where


def attribution_heatmap(attribution: Any, *, prompt: Optional[int] = None, max_side_terms: int = 30) -> go.Figure:
    """Layer × head heatmap of the head terms (diverging, centred at 0) + bars of the other terms.

    ``prompt``: one prompt's values, or None for the mean over prompts. The side bar shows
    the ``max_side_terms`` largest non-head terms by |value| (the rest summed in one bar).
    """
    labels, v, total = attribution_vector(attribution, prompt=prompt)
    target, where = _context(attribution, prompt)
    n_l, n_h = head_grid_shape(labels, attribution)
    grid, side = head_grid(labels, v, n_l, n_h)
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.64, 0.36],
        horizontal_spacing=0.2,
        subplot_titles=("heads (layer × head)", "other terms"),
    )
    hover_tail = f"{esc(target)}<br>{where}"
    if n_l > 0 and bool(np.isfinite(grid).any()):
        _add_head_heatmap(fig, grid, hover_tail)
    else:
        unit = getattr(attribution, "unit", "")
        fig.add_annotation(
            text=f"no per-head terms{f' (unit={unit!r})' if unit else ''}",
            showarrow=False,
            xref="x domain",
            yref="y domain",
            x=0.5,
            y=0.5,
            row=1,
            col=1,
        )
    fig.update_xaxes(title_text="head", dtick=1 if n_h <= 20 else None, row=1, col=1)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if n_l <= 32 else None, row=1, col=1)
    if side:
        _add_side_bars(fig, side, labels, max_side_terms, hover_tail)
    fig.update_layout(
        title=f"Attribution of {esc(target)}<br><sup>{_subtitle(attribution, where, total)}</sup>",
        width=1000,
        height=max(420, 18 * n_l + 200, 20 * (min(len(side), max_side_terms) + 1) + 200),
        template="plotly_white",
        showlegend=False,
    )
    return fig


def _add_head_heatmap(fig: go.Figure, grid: np.ndarray, hover_tail: str) -> None:
    """The layer × head heatmap in the left panel, on a diverging scale centred at 0."""
    n_l, n_h = grid.shape
    zmax = float(np.nanmax(np.abs(grid))) or 1.0
    hover = [
        [f"term <b>{Head(l, h)}</b><br>value: {fmt(grid[l, h])}<br>{hover_tail}" for h in range(n_h)]
        for l in range(n_l)
    ]
    fig.add_trace(
        diverging_heatmap(
            grid,
            hover,
            zmax,
            dict(title="value", x=1.02, len=0.9),
            x=list(range(n_h)),
            y=list(range(n_l)),
            name="heads",
        ),
        row=1,
        col=1,
    )


def _add_side_bars(
    fig: go.Figure, side: list[tuple[str, float]], labels: list[str], max_side_terms: int, hover_tail: str
) -> None:
    """Bars of the ``max_side_terms`` largest other terms (stream order, the rest summed) in the right panel."""
    side_sorted = sorted(side, key=lambda kv: -abs(kv[1]))
    shown, rest = side_sorted[:max_side_terms], side_sorted[max_side_terms:]
    order = {lab: i for i, lab in enumerate(labels)}
    shown.sort(key=lambda kv: order[kv[0]])  # stream order, top to bottom
    names = [n for n, _ in shown]
    vals = [x for _, x in shown]
    if rest:
        names.append(f"other {len(rest)} terms")
        vals.append(float(sum(x for _, x in rest)))
    fig.add_trace(
        go.Bar(
            x=vals,
            y=names,
            orientation="h",
            name="other terms",
            marker_color=["#2166ac" if x >= 0 else "#b2182b" for x in vals],
            hovertext=[f"term <b>{esc(n)}</b><br>value: {fmt(x)}<br>{hover_tail}" for n, x in zip(names, vals)],
            hoverinfo="text",
        ),
        row=1,
        col=2,
    )
    fig.update_yaxes(autorange="reversed", row=1, col=2, type="category")
    fig.update_xaxes(title_text="value", row=1, col=2)


def _subtitle(attribution: Any, where: str, total: Optional[float]) -> str:
    """``where · total … · closure error …`` (already HTML-safe)."""
    ce = getattr(attribution, "closure_error", None)
    sub = [where]  # already escaped
    if total is not None:
        sub.append(f"total {fmt(total)}")
    if ce is not None:
        sub.append(closure_text(ce, getattr(attribution, "relative_error", None)))
    return " · ".join(sub)


def attribution_waterfall(attribution: Any, *, prompt: Optional[int] = None, k: int = 15) -> go.Figure:
    """Waterfall of the top-``k`` terms (by |value|, in stream order), "other terms", then the total.

    The bars sum to Σ terms; the model's own number (``.total``) and the closure error
    |Σ terms − total| are printed in the title.
    """
    check_positive_int("k", k)
    labels, v, total = attribution_vector(attribution, prompt=prompt)
    target, where = _context(attribution, prompt)
    top = np.sort(np.argsort(-np.abs(v), kind="stable")[:k])  # stream order
    rest = np.setdiff1d(np.arange(len(v)), top)
    names = [labels[i] for i in top]
    vals = [float(v[i]) for i in top]
    if len(rest):
        names.append(f"other {len(rest)} terms")
        vals.append(float(v[rest].sum()))
    s = float(v.sum())
    closure = abs(s - total) if total is not None else float(getattr(attribution, "closure_error", float("nan")))
    cum = np.cumsum(vals)
    hover = [
        f"term <b>{esc(n)}</b><br>value: {fmt(x)}<br>running sum: {fmt(c)}<br>{esc(target)}<br>{where}"
        for n, x, c in zip(names, vals, cum)
    ]
    names.append("total")
    hover.append(f"<b>total</b> Σ terms = {fmt(s)}<br>model: {fmt(total)}<br>{esc(target)}<br>{where}")
    fig = go.Figure(
        go.Waterfall(
            x=names,
            y=vals + [s],
            measure=["relative"] * len(vals) + ["total"],
            orientation="v",
            hovertext=hover,
            hoverinfo="text",
            name=target,
            increasing=dict(marker=dict(color="#2166ac")),
            decreasing=dict(marker=dict(color="#b2182b")),
            totals=dict(marker=dict(color="#555555")),
            connector=dict(line=dict(color="#999", width=1)),
        )
    )
    model_txt = f" (model: {fmt(total, 6)})" if total is not None else ""
    fig.update_layout(
        title=(
            f"{esc(target)}: top {len(top)} of {len(v)} terms sum to {fmt(s, 6)}{model_txt}"
            f"<br><sup>{where} · {closure_text(closure)}</sup>"
        ),
        xaxis=dict(title="term", type="category", tickangle=-45),
        yaxis_title="contribution",
        width=1000,
        height=520,
        template="plotly_white",
        showlegend=False,
    )
    return fig
