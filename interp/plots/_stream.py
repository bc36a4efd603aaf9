"""The residual stream of one token, layer by layer (the residual-stream picture), for pre- and post-norm models.

One token's stream is a d_model vector that every sublayer reads from and writes to
(Elhage et al. 2021 §2: t² = t¹ + x, "the residual connection copies earlier
information forward"). For the token at (prompt, pos) this draws, at every resid point P
(``blocks.{l}.hook_resid_pre/mid/post``):

* ‖x_P‖, the norm of the stream itself;
* ‖w‖ of each sublayer write at the first point after it joins;
* ‖c_g(P)‖ for every write group g (embeddings, ``L{l}.attn`` = heads + b_O (+ post-norm β),
  ``L{l}.mlp``) as a heatmap over points — how much of each write is still in the stream.

Pre-norm (and parallel / attention-only) streams are additive: x_P = Σ_{w before P} w, so
c_g(P) is the raw write for every later P and one decomposition of the last point suffices.
Post-norm streams pass every earlier write through each later norm (docs/math.md §4), so each
point is decomposed on its own (``ResidualTrace.decompose``), with the norm scales frozen
from the forward pass; there c_g(P) shrinks or grows from point to point.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.errors import ArgumentError, LabelError
from interp.labels import Attn, Bias, Head, HeadSource, Mlp, Norm, NormBias, Resid, parse
from interp.plots._common import as_numpy, check_index, closure_text, esc, fmt, quoted, require_attr, token_label

__all__ = ["residual_stream_figure", "residual_stream_norms"]


def write_group(label: str) -> str:
    """The sublayer a write label belongs to: 'embed', 'L{l}.attn' or 'L{l}.mlp'."""
    try:
        lab: Any = parse(label)
    except LabelError:
        return "embed"
    norm = lab.norm if isinstance(lab, NormBias) else None
    layer = norm.layer if isinstance(norm, Norm) else getattr(lab, "layer", None)
    if not isinstance(layer, int):
        return "embed"  # embed, pos_embed, type_embed, embed_ln_bias
    if (
        isinstance(lab, (Head, HeadSource, Attn))
        or (isinstance(lab, Bias) and lab.sublayer == "attn")
        or (norm is not None and norm.which == "ln1")
    ):
        return str(Attn(layer))
    return str(Mlp(layer))  # mlp, N{n}, mlp_bias, ln2_bias


def _point_name(hook: str) -> str:
    """A resid hook's short name, ``blocks.3.hook_resid_pre`` -> ``L3.pre`` (other names unchanged)."""
    try:
        lab = Resid.parse(hook)
    except LabelError:
        return hook
    return f"L{lab.layer}.{lab.where}"  # a display name, not a label of the grammar


def residual_stream_norms(trace: Any, *, prompt: int = 0, pos: int = -1) -> dict[str, Any]:
    """The numbers behind :func:`residual_stream_figure` (float64 numpy arrays).

    ``points`` resid hook names; ``stream`` [n_points] ‖x_P‖ at (prompt, pos); ``stream_all``
    [n_points, pos] the same for every position; ``groups`` write groups in stream order;
    ``group_norms`` [n_groups, n_points] ‖c_g(P)‖ (NaN before g joins); ``closure`` the
    largest closure error of the decompositions used.
    """
    require_attr(
        trace,
        ("resid_points", "decompose", "tokens"),
        name="trace",
        expected="an interp ResidualTrace (from interp.trace)",
    )
    points = list(trace.resid_points)
    if not points:
        raise ArgumentError("trace has no resid points to plot")
    n_b, n_p = trace.tokens.shape
    b = check_index(prompt, n_b, name="prompt", what="prompts")
    p = check_index(pos, n_p, name="pos", what="positions")
    mask = getattr(trace, "attention_mask", None)
    if mask is not None and not bool(mask[b, p]):
        raise ArgumentError(f"pos={pos} of prompt {prompt} is padding; pick a real token")
    block = getattr(trace, "block", None)  # the traced model's block (interp.models.Block)
    additive = block is not None and not block.normed_stream  # no norm on the stream itself: x_P = Σ writes

    def grouped(dec: Any) -> tuple[list[str], np.ndarray]:
        c = as_numpy(dec.contributions[:, b, p], name="contributions")  # [n_terms, d_model]
        groups: dict[str, np.ndarray] = {}
        for lab, vec in zip(dec.labels, c):
            g = write_group(lab)
            groups[g] = groups[g] + vec if g in groups else vec.copy()
        return list(groups), np.stack(list(groups.values()))

    closure = 0.0
    if additive:
        last = trace.decompose(points[-1])
        closure = float(last.closure_error)
        groups, vecs = grouped(last)
        # each group joins at its first point after the write: find it from the program order
        order = {g: i for i, g in enumerate(groups)}
        joined_at = _join_points(points, groups)
        norms = np.full((len(groups), len(points)), np.nan)
        for g, gi in order.items():
            norms[gi, joined_at[g] :] = np.linalg.norm(vecs[gi])
        stream_all = np.stack([np.linalg.norm(as_numpy(trace.activations[P][b], name=P), axis=-1) for P in points])
    else:
        per_point = []
        totals = []
        group_order: list[str] = []
        for P in points:
            dec = trace.decompose(P)
            closure = max(closure, float(dec.closure_error))
            gs, vs = grouped(dec)
            per_point.append(dict(zip(gs, np.linalg.norm(vs, axis=-1))))
            for g in gs:
                if g not in group_order:
                    group_order.append(g)
            totals.append(np.linalg.norm(as_numpy(dec.total[b], name="total"), axis=-1))
        groups = group_order
        norms = np.full((len(groups), len(points)), np.nan)
        for j, d in enumerate(per_point):
            for g, val in d.items():
                norms[groups.index(g), j] = val
        stream_all = np.stack(totals)
    return {
        "points": points,
        "stream": stream_all[:, p],
        "stream_all": stream_all,
        "groups": groups,
        "group_norms": norms,
        "closure": closure,
        "prompt": b,
        "pos": p,
    }


def _join_points(points: list[str], groups: list[str]) -> dict[str, int]:
    """Index of the first resid point at which each group's write is in the stream (pre-norm)."""
    out: dict[str, int] = {}
    for g in groups:
        if g == "embed":
            out[g] = 0
            continue
        l, sub = g[1:].split(".")
        # attn joins before resid_mid (or resid_post for parallel/attn-only); mlp before resid_post
        cands = [f"blocks.{l}.hook_resid_mid"] if sub == "attn" else []
        cands.append(f"blocks.{l}.hook_resid_post")
        out[g] = next(points.index(c) for c in cands if c in points)
    return out


def _log10(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isfinite(a) & (a > 0), np.log10(np.where(a > 0, a, 1.0)), np.nan)


def _log_colorbar(a: np.ndarray, title: str, domain: Any) -> dict[str, Any]:
    """A colour bar for log10 data, ticked with the underlying values (1, 2, 5 × powers of ten)."""
    finite = a[np.isfinite(a) & (a > 0)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 10.0)
    ticks = [
        m * 10.0**e
        for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
        for m in (1, 2, 5)
        if lo <= m * 10.0**e <= hi
    ]
    if len(ticks) > 8:
        ticks = [t for t in ticks if str(t).lstrip("0.").startswith("1")] or ticks
    d0, d1 = domain
    return dict(
        title=title,
        tickvals=[float(np.log10(t)) for t in ticks],
        ticktext=[f"{t:g}" for t in ticks],
        len=d1 - d0,
        y=(d0 + d1) / 2,
        yanchor="middle",
    )


def residual_stream_figure(trace: Any, *, prompt: int = 0, pos: int = -1) -> go.Figure:
    """One token's residual stream: ‖stream‖ and ‖each write‖ per resid point, and what remains of each write.

    Top: line of ‖x_P‖ with bars of the attention / MLP write that joined just before P.
    Middle: heatmap write group × point of ‖c_g(P)‖. Bottom: ‖x_P‖ for every position. The
    heatmaps colour log10 of the norm (attention-sink tokens are orders of magnitude larger);
    their ``customdata`` holds the norms themselves.
    """
    r = residual_stream_norms(trace, prompt=prompt, pos=pos)
    names = [_point_name(P) for P in r["points"]]
    b, p = r["prompt"], r["pos"]
    toks = getattr(trace, "str_tokens", None)
    row_toks = toks[b] if toks else [str(i) for i in range(trace.tokens.shape[1])]
    tok = token_label(row_toks[p])
    # row heights in pixels: the heatmaps get a fixed height per row so labels stay legible
    h1, h2, h3, gap, top = 380, max(160, 13 * len(r["groups"])), max(120, 18 * len(row_toks)), 120, 130
    total_h = h1 + h2 + h3 + 2 * gap + top + 90
    fig = make_subplots(
        rows=3,
        cols=1,
        row_heights=[h1, h2, h3],
        vertical_spacing=gap / (total_h - top - 90),
        subplot_titles=(
            f"token {quoted(tok)} (pos {p}): stream norm and write norms",
            "norm of each write's contribution at each point (log colour scale)",
            "stream norm at every position (log colour scale)",
        ),
    )
    _add_token_norms(fig, r, names, tok)  # row 1
    _add_write_heatmap(fig, r, names, tok)  # row 2
    _add_position_heatmap(fig, trace, r, names, row_toks)  # row 3
    for row in (1, 2, 3):
        fig.update_xaxes(type="category", tickangle=-60, categoryorder="array", categoryarray=names, row=row, col=1)
    fig.update_yaxes(title_text="norm", row=1, col=1)
    arch, block = getattr(trace, "arch", None), getattr(trace, "block", None)
    kind = (
        "" if arch is None or block is None else block.layout if arch.norm == "none" else f"{block.layout} {arch.norm}"
    )
    fig.update_layout(
        title=(
            f"Residual stream of token {quoted(tok)} (pos {p}, prompt {b})"
            f"<br><sup>{esc(getattr(arch, 'name', ''))} {esc(kind)} · {closure_text(r['closure'])}</sup>"
        ),
        width=1100,
        height=total_h,
        template="plotly_white",
        margin=dict(t=top, b=90),
        barmode="group",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
    )
    return fig


def _add_token_norms(fig: go.Figure, r: dict[str, Any], names: list[str], tok: str) -> None:
    """Row 1: the line of ‖x_P‖ at the token, and bars of each write's norm at the first point it joined."""
    points, groups, norms, p = r["points"], r["groups"], r["group_norms"], r["pos"]
    fig.add_trace(
        go.Scatter(
            x=names,
            y=r["stream"],
            mode="lines+markers",
            name="‖stream‖",
            line=dict(color="#222"),
            hovertext=[
                f"<b>{esc(P)}</b><br>‖stream‖ = {fmt(v)}<br>token {quoted(tok)} (pos {p})"
                for P, v in zip(points, r["stream"])
            ],
            hoverinfo="text",
        ),
        row=1,
        col=1,
    )
    # the write that joined just before each point: its norm at that first point
    for kind, colour in (("attn", "#1f77b4"), ("mlp", "#ff7f0e"), ("embed", "#7f7f7f")):
        xs, ys, hs = [], [], []
        for gi, g in enumerate(groups):
            if (g == "embed") != (kind == "embed") or (kind != "embed" and not g.endswith("." + kind)):
                continue
            finite = np.flatnonzero(np.isfinite(norms[gi]))
            if not len(finite):
                continue
            j = int(finite[0])
            xs.append(names[j])
            ys.append(float(norms[gi, j]))
            hs.append(f"write <b>{esc(g)}</b><br>‖write‖ = {fmt(ys[-1])} at {esc(points[j])}<br>token {quoted(tok)}")
        if xs:
            fig.add_trace(
                go.Bar(
                    x=xs,
                    y=ys,
                    name=f"‖{kind} write‖",
                    marker_color=colour,
                    opacity=0.75,
                    hovertext=hs,
                    hoverinfo="text",
                ),
                row=1,
                col=1,
            )


def _add_write_heatmap(fig: go.Figure, r: dict[str, Any], names: list[str], tok: str) -> None:
    """Row 2: write group × point heatmap of ‖c_g(P)‖ (log10 colour, the norms as ``customdata``)."""
    points, groups, norms = r["points"], r["groups"], r["group_norms"]
    hover = [
        [
            f"write <b>{esc(g)}</b> at {esc(P)}<br>‖contribution‖ = {fmt(norms[gi, j])}<br>token {quoted(tok)}"
            for j, P in enumerate(points)
        ]
        for gi, g in enumerate(groups)
    ]
    fig.add_trace(
        go.Heatmap(
            z=_log10(norms),
            customdata=norms,
            x=names,
            y=groups,
            colorscale="Viridis",
            hovertext=hover,
            hoverinfo="text",
            colorbar=_log_colorbar(norms, "‖c‖", fig.layout.yaxis2.domain),
            name="write norms",
        ),
        row=2,
        col=1,
    )
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=groups, tickfont=dict(size=9), row=2, col=1)


def _add_position_heatmap(fig: go.Figure, trace: Any, r: dict[str, Any], names: list[str], row_toks: list[str]) -> None:
    """Row 3: position × point heatmap of ‖x_P‖ over the prompt's real tokens (padding blank)."""
    points, b = r["points"], r["prompt"]
    sa = r["stream_all"].T  # [pos, n_points]
    real = np.ones(len(row_toks), dtype=bool)
    mask = getattr(trace, "attention_mask", None)
    if mask is not None:
        real = as_numpy(mask[b], name="mask").astype(bool)
    ylabels = [f"{i}:{token_label(t)}" for i, t in enumerate(row_toks)]
    hover_all = [
        [f"‖stream‖ = {fmt(sa[i, j])}<br>{esc(P)}<br>token {esc(ylabels[i])}" for j, P in enumerate(points)]
        for i in range(len(ylabels))
    ]
    sa = np.where(real[:, None], sa, np.nan)
    fig.add_trace(
        go.Heatmap(
            z=_log10(sa),
            customdata=sa,
            x=names,
            y=ylabels,
            colorscale="Cividis",
            hovertext=hover_all,
            hoverinfo="text",
            colorbar=_log_colorbar(sa, "‖x‖", fig.layout.yaxis3.domain),
            name="stream norms",
        ),
        row=3,
        col=1,
    )
    fig.update_yaxes(
        autorange="reversed", type="category", tickmode="array", tickvals=ylabels, tickfont=dict(size=9), row=3, col=1
    )
