"""Figures of a head's term by source position, and of what one head copies from one source.

A head's term at the attributed token splits exactly over the positions it reads,
term(L.H) = Σ_src A[dst, src] · (v_src W_O^h carried to the logits) (docs/math.md §5):
:func:`head_source_heatmap` draws those terms of one prompt as a head × source-token heatmap
(diverging, centred at 0) for the heads with the largest whole terms. :func:`source_ov_figure`
draws the most raised and lowered tokens of one source's copy (:func:`interp.ov_at`).

Both read results by their attributes (``.labels`` with ``L3.H5[src=4]`` terms, ``.values``,
``.prompt_str_tokens`` …; ``.logits``, ``.token_strs`` …) and never run a model.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from interp._validate import check_positive_int
from interp.errors import ArgumentError
from interp.labels import Head, HeadSource, parse
from interp.plots._attribution import _context
from interp.plots._common import (
    diverging_heatmap,
    as_numpy,
    check_index,
    closure_text,
    esc,
    fmt,
    quoted,
    require_attr,
    unique_token_labels,
)

__all__ = ["head_source_heatmap", "source_ov_figure"]


def head_source_heatmap(
    attribution: Any, *, prompt: int = 0, heads: Optional[Sequence[Any]] = None, k: int = 12
) -> go.Figure:
    """Heads (rows) × source tokens of prompt ``prompt`` (columns): each head's per-source terms.

    ``heads``: labels such as ``"L3.H5"`` (or ``Head`` objects) to show; default the ``k`` heads whose
    whole term (Σ over sources) is largest in magnitude for this prompt. Row labels carry that sum.
    """
    require_attr(
        attribution,
        ("values", "labels"),
        name="attribution",
        expected="an attribution with unit='head_source' (terms labelled like 'L3.H5[src=4]')",
    )
    k = check_positive_int("k", k)
    v = as_numpy(attribution.values, name="attribution.values")
    v = v[:, None] if v.ndim == 1 else v
    i = check_index(prompt, v.shape[1], name="prompt", what="prompts")
    cells: dict[tuple[int, int], dict[int, float]] = {}
    for lab, x in zip(attribution.labels, v[:, i]):
        hs = parse(lab) if "[src=" in lab else None
        if isinstance(hs, HeadSource):
            cells.setdefault((hs.layer, hs.head), {})[hs.src] = float(x)
    if not cells:
        raise ArgumentError("attribution has no head × source terms; compute it with unit='head_source'")
    sums = {h: sum(row.values()) for h, row in cells.items()}
    if heads is None:
        chosen = sorted(sums, key=lambda h: -abs(sums[h]))[:k]
    else:
        chosen = []
        for h in heads:
            hl = parse(h) if not isinstance(h, Head) else h
            if not isinstance(hl, Head) or (hl.layer, hl.head) not in cells:
                raise ArgumentError(f"heads contains {h!r}, which is not a head of this attribution (e.g. 'L0.H1')")
            chosen.append((hl.layer, hl.head))
    per_tokens = getattr(attribution, "prompt_str_tokens", None)
    toks = list(per_tokens[i]) if per_tokens and i < len(per_tokens) else None
    n_src = len(toks) if toks else 1 + max(s for row in cells.values() for s in row)
    z = np.array([[cells[h].get(s, 0.0) for s in range(n_src)] for h in chosen])
    xs = unique_token_labels(toks) if toks else [str(s) for s in range(n_src)]
    ys = [f"{Head(l, h)} (Σ {fmt(sums[(l, h)], 3)})" for l, h in chosen]
    target, where = _context(attribution, i)
    hover = [
        [
            f"term <b>{HeadSource(l, h, s)}</b><br>source {quoted(toks[s]) if toks else s} (pos {s})<br>"
            f"value: {fmt(z[r, s])}<br>head total: {fmt(sums[(l, h)])}<br>{esc(target)}"
            for s in range(n_src)
        ]
        for r, (l, h) in enumerate(chosen)
    ]
    zmax = float(np.abs(z).max()) or 1.0
    fig = go.Figure(diverging_heatmap(z, hover, zmax, dict(title="term"), x=xs, y=ys))
    sub = [where]
    ce = getattr(attribution, "closure_error", None)
    if ce is not None:
        sub.append(closure_text(ce, getattr(attribution, "relative_error", None)))
    fig.update_layout(
        title=f"Attribution of {esc(target)} by head × source token<br><sup>{' · '.join(sub)}</sup>",
        xaxis=dict(title="source token (position: token)", type="category", tickangle=-45),
        yaxis=dict(title="head (Σ over sources)", type="category", autorange="reversed"),
        width=max(700, 40 * n_src + 300),
        height=max(380, 28 * len(chosen) + 220),
        template="plotly_white",
    )
    return fig


def source_ov_figure(result: Any, *, k: int = 15) -> go.Figure:
    """Bars of the ``k`` most raised and ``k`` most lowered logits of one head's copy of one source."""
    require_attr(result, ("logits", "weight", "src", "dst"), name="result", expected="an OVAt result (interp.ov_at)")
    k = check_positive_int("k", k)
    lg = as_numpy(result.logits, name="result.logits", ndim=1)
    kk = min(k, lg.shape[0])
    top = np.argsort(-lg, kind="stable")[:kk]
    bottom = np.argsort(lg, kind="stable")[:kk][::-1]
    ids = list(top) + [t for t in bottom if t not in set(top)]
    strs = getattr(result, "token_strs", {}) or {}
    names = [f"{quoted(strs[str(t)]) if str(t) in strs else '#' + str(t)} ({t})" for t in ids]
    vals = [float(lg[t]) for t in ids]
    w = float(result.weight)
    label = getattr(result, "label", "head")
    fig = go.Figure(
        go.Bar(
            x=vals,
            y=names,
            orientation="h",
            marker_color=["#2166ac" if x >= 0 else "#b2182b" for x in vals],
            hovertext=[
                f"{n}<br>logit of the copy: {fmt(x)}<br>× A[dst, src] = {fmt(x * w)}" for n, x in zip(names, vals)
            ],
            hoverinfo="text",
        )
    )
    src_tok = getattr(result, "src_token", None)
    dst_tok = getattr(result, "dst_token", None)
    fig.update_layout(
        title=(
            f"What {esc(label)} copies from src {result.src}{' ' + quoted(src_tok) if src_tok else ''} "
            f"(read at dst {result.dst}{' ' + quoted(dst_tok) if dst_tok else ''})<br><sup>logits of v_src W_O "
            f"through the final norm frozen at dst · A[dst, src] = {w:.3f}</sup>"
        ),
        xaxis_title="logit of the copy",
        yaxis=dict(type="category", autorange="reversed"),
        width=800,
        height=max(380, 22 * len(ids) + 200),
        template="plotly_white",
        showlegend=False,
    )
    return fig
