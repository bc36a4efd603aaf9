"""Attention patterns of chosen heads as heatmaps, with token labels.

A head's pattern A^h[q, k] = softmax_k(x_q W_QK^h x_kᵀ / √d_head) (causally masked for
decoders) is how much the query token at position q reads from the key token at k
(Elhage et al. 2021 §2, "attention heads are independent and additive"; the head's output is
(A^h ⊗ W_OV^h)·x). The patterns are captured by :func:`interp.stream.attention_patterns`;
:func:`attention_pattern_figure` draws one heatmap per head from them (or from a raw tensor).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp._validate import check_positive_int
from interp.errors import ArgumentError, ShapeError
from interp.plots._common import as_numpy, esc, fmt, unique_token_labels

__all__ = ["attention_pattern_figure", "head_patterns"]


def head_patterns(
    patterns: Any, str_tokens: Optional[Sequence[str]], heads: Optional[Sequence[str]]
) -> tuple[Any, list[str], list[str]]:
    """(weights [n_heads, query_pos, key_pos] as numpy, the key tokens, a label per head) of ``patterns``: an
    :class:`interp.stream.AttentionPatterns` (its ``patterns``, ``str_tokens`` and ``labels``, unless given) or a
    [n_heads, query_pos, key_pos] (or one [query_pos, key_pos]) tensor; the query positions are the last ones."""
    if all(hasattr(patterns, a) for a in ("patterns", "str_tokens", "labels")):
        str_tokens = patterns.str_tokens if str_tokens is None else str_tokens
        heads = patterns.labels if heads is None else heads
        patterns = patterns.patterns
    p = as_numpy(patterns, name="patterns")
    if p.ndim == 2:
        p = p[None]
    if p.ndim != 3 or 0 in p.shape:
        raise ShapeError(f"patterns must be [n_heads, query_pos, key_pos] with at least one of each, got {p.shape}")
    n, nq, nk = p.shape
    if nq > nk:
        raise ShapeError(f"patterns has {nq} query positions but only {nk} key positions")
    toks = [str(i) for i in range(nk)] if str_tokens is None else list(str_tokens)
    if len(toks) != nk or not all(isinstance(t, str) for t in toks):
        raise ArgumentError(f"str_tokens must be {nk} strings (one per key position), got {len(toks)} items")
    labels = [f"head {i}" for i in range(n)] if heads is None else [str(h) for h in heads]
    if len(labels) != n:
        raise ArgumentError(f"heads has {len(labels)} labels for {n} patterns")
    return p, toks, labels


def attention_pattern_figure(
    patterns: Any,
    str_tokens: Optional[Sequence[str]] = None,
    *,
    heads: Optional[Sequence[str]] = None,
    cols: int = 3,
) -> go.Figure:
    """One heatmap per head: rows = query tokens, columns = key tokens, colour = attention weight.

    ``patterns``: [n_heads, query_pos, key_pos] (or one [query_pos, key_pos]) tensor, or a
    result with ``patterns``, ``str_tokens`` and ``labels`` (an
    :class:`interp.stream.AttentionPatterns`); ``str_tokens``: the tokens (len = key_pos);
    ``heads``: a label per pattern.
    """
    p, toks, heads = head_patterns(patterns, str_tokens, heads)
    n, nq, nk = p.shape
    check_positive_int("cols", cols)
    kl = unique_token_labels(toks)
    ql = kl[nk - nq :]  # query positions are the last nq positions
    c = min(cols, n)
    r = math.ceil(n / c)
    fig = make_subplots(
        rows=r,
        cols=c,
        subplot_titles=[esc(h) for h in heads],
        horizontal_spacing=0.12 / c + 0.04,
        vertical_spacing=min(0.12, 0.3 / r),
    )
    for i in range(n):
        hover = [
            [
                f"<b>{esc(heads[i])}</b><br>query {esc(ql[a])} → key {esc(kl[bb])}<br>weight {fmt(p[i, a, bb])}"
                for bb in range(nk)
            ]
            for a in range(nq)
        ]
        fig.add_trace(
            go.Heatmap(
                z=p[i],
                x=kl,
                y=ql,
                colorscale="Blues",
                zmin=0.0,
                zmax=1.0,
                hovertext=hover,
                hoverinfo="text",
                name=heads[i],
                showscale=(i == 0),
                colorbar=dict(title="weight", len=0.6),
            ),
            row=i // c + 1,
            col=i % c + 1,
        )
    fig.update_xaxes(type="category", tickangle=-60, tickfont=dict(size=9))
    fig.update_yaxes(type="category", autorange="reversed", tickfont=dict(size=9))
    side = max(260, 16 * nk + 120)
    fig.update_layout(
        title="Attention patterns<br><sup>rows: query token · columns: key token (attended to)</sup>",
        width=min(1600, side * c + 120),
        height=min(4000, side * r + 120),
        template="plotly_white",
    )
    return fig
