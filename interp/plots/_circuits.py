"""OV/QK circuit figures: copying-score map, OV eigenvalues in the complex plane, top-token tables.

* Copying score (Elhage et al. 2021 §3 "Copying / primitive in-context learning"; docs/math.md
  §11): for a head's full OV circuit M = W_E W_OV W_U, the nonzero eigenvalues λ of M
  equal those of the d_head × d_head cyclic product, and score = Σλ / Σ|λ| ∈ [−1, 1]
  (1 for a pure copier, −1 for an anti-copier). The map shows it per layer × head.
* Eigenvalue scatter: λ_i of one head's OV circuit (``FactoredMatrix.eigenvalues``) as points
  of the complex plane; mostly-positive-real eigenvalues mean the head copies. When one
  eigenvalue dominates (max|λ| / median|λ| > 20) the radius is log-scaled, ρ = log10(1 + |λ|/s),
  angle kept, so the small ones stay visible.
* Top-token table: rows are chosen input tokens; for each, the ``k`` output tokens with the
  largest entry of the full OV (or QK) circuit, computed from the factors as
  A[rows] @ B[:, cols] so the [d_vocab, d_vocab] matrix is never formed.
"""

from __future__ import annotations

import math

from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import numpy as np
import plotly.graph_objects as go
import torch

from interp._validate import check_positive_int, is_int
from interp.errors import ArgumentError, ShapeError
from interp.labels import Head
from interp.plots._common import as_numpy, diverging_heatmap, esc, fmt, token_label

__all__ = ["copying_score_map", "ov_eigenvalue_figure", "top_token_table", "top_token_values"]


def copying_score_map(scores: Any, *, title: str = "Copying scores") -> go.Figure:
    """Layer × head heatmap of copying scores in [−1, 1] (diverging, centred at 0).

    ``scores``: a HeadScores-like result (``.scores`` [n_layers, n_heads]) or a 2-D tensor.
    """
    arr = scores
    if not isinstance(scores, (torch.Tensor, np.ndarray, list, tuple)):
        arr = getattr(scores, "scores", None)
        if arr is None:
            arr = getattr(scores, "values", scores)
    z = as_numpy(arr, name="scores")
    if z.ndim != 2 or z.size == 0:
        raise ShapeError(f"scores must be a non-empty [n_layers, n_heads] array, got shape {z.shape}")
    n_l, n_h = z.shape
    name = str(getattr(scores, "metric", "") or getattr(scores, "name", "") or "copying score")
    hover = [[f"head <b>{Head(l, h)}</b><br>{esc(name)}: {fmt(z[l, h])}" for h in range(n_h)] for l in range(n_l)]
    zmax = max(1.0, float(np.nanmax(np.abs(z)))) if np.isfinite(z).any() else 1.0
    fig = go.Figure(
        diverging_heatmap(z, hover, zmax, dict(title=name), x=list(range(n_h)), y=list(range(n_l)), name=name)
    )
    flat = np.where(np.isfinite(z), z, -np.inf).ravel()
    best = np.argsort(-flat)[: min(5, flat.size)]
    best_txt = ", ".join(f"{Head(*divmod(int(i), n_h))} {z.flat[i]:.2f}" for i in best)
    fig.update_layout(
        title=f"{esc(title)}<br><sup>Σλ/Σ|λ| of W_E W_OV W_U; highest: {esc(best_txt)}</sup>",
        xaxis=dict(title="head", dtick=1 if n_h <= 20 else None),
        yaxis=dict(title="layer", autorange="reversed", dtick=1 if n_l <= 32 else None),
        width=max(500, 40 * n_h + 300),
        height=max(420, 18 * n_l + 200),
        template="plotly_white",
    )
    return fig


def _eigenvalues(circuit: Any) -> np.ndarray:
    if hasattr(circuit, "eigenvalues"):
        ev = circuit.eigenvalues
    else:
        m = torch.as_tensor(circuit)
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ShapeError(f"circuit must be a FactoredMatrix or a square matrix, got shape {tuple(m.shape)}")
        ev = torch.linalg.eigvals(m.double())
    ev = torch.as_tensor(ev)
    if ev.ndim != 1:
        raise ShapeError(
            f"circuit has leading dimensions (eigenvalues of shape {tuple(ev.shape)}); "
            "index one head first, e.g. circuit[layer, head]"
        )
    return ev.detach().cpu().to(torch.complex128).numpy()


def _ratio_name(circuit: Any) -> str:
    """What Σλ/Σ|λ| of ``circuit`` is called: the copying score only for a full OV circuit."""
    A, B = (getattr(circuit, "A", None), getattr(circuit, "B", None))
    full_ov = "full OV" in str(getattr(circuit, "label", ""))
    if full_ov and (getattr(circuit, "meta", None) or {}).get("embedding") == "effective":
        return "Σλ/Σ|λ| of W_E,eff W_OV W_U (not the copying score, which starts from the raw W_E)"
    if full_ov and A is not None and B is not None and A.shape[0] == B.shape[-1]:
        return "copying score Σλ/Σ|λ| (of W_E W_OV W_U, as copying_scores)"
    return "Σλ/Σ|λ| of this matrix (not the copying score, which uses the full OV circuit W_E W_OV W_U)"


#: ``scale="auto"`` switches to the log-radius scale when max|λ| / median|λ| exceeds this (the median
#: eigenvalue would sit within 5 % of the plot's radius on a linear scale).
LOG_SCALE_RATIO = 20.0


def _log_radius(mags: np.ndarray) -> tuple[np.ndarray, float]:
    """(ρ, s): ρ = log10(1 + |λ|/s) with s a power of ten a decade below the smallest eigenvalue that
    is not a numerical zero (|λ| > 1e-6 max|λ|), so every such eigenvalue plots at ρ ≥ log10(11)."""
    top = float(mags.max())
    live = mags[mags > 1e-6 * top]
    s = 10.0 ** (math.floor(math.log10(float(live.min()))) - 1)
    return np.log10(1.0 + mags / s), s


def ov_eigenvalue_figure(circuit: Any, *, label: Optional[str] = None, scale: str = "auto") -> go.Figure:
    """Eigenvalues of one head's (Factored) OV circuit in the complex plane.

    ``circuit``: a transformer-lens FactoredMatrix (its ``.eigenvalues``: the nonzero ones,
    via the small cyclic product) or a square matrix. The title gives Σλ/Σ|λ| *of this matrix*;
    only for a full OV circuit W_E W_OV W_U (``ov_circuit(..., full=True)``) is that the head's
    copying score (``copying_scores``) — the title says which. ``label`` defaults to the
    circuit's own ``.label``.

    ``scale``: ``"linear"`` plots λ itself; ``"log"`` keeps each eigenvalue's angle arg λ and plots
    it at radius ρ = log10(1 + |λ|/s) (s: a power of ten a decade below the smallest nonzero |λ|,
    stated on the axes, with circles at round |λ|), so one dominant eigenvalue does not squash the
    rest into a dot; ``"auto"`` (default) picks ``"log"`` when max|λ| / median|λ| > 20
    (:data:`LOG_SCALE_RATIO`). The hover always shows the true λ.
    """
    if scale not in ("auto", "linear", "log"):
        raise ArgumentError(f"scale={scale!r}; allowed: 'auto', 'linear', 'log'")
    label = label or getattr(circuit, "label", "") or "OV circuit"
    ev = _eigenvalues(circuit)
    if ev.size == 0:
        raise ArgumentError(f"{label} has no eigenvalues to plot")
    mags = np.abs(ev)
    score = float(ev.real.sum() / mags.sum()) if mags.sum() > 0 else float("nan")
    hover = [
        f"λ<sub>{i}</sub> = {fmt(z.real)} {'+' if z.imag >= 0 else '−'} {fmt(abs(z.imag))}i<br>|λ| = {fmt(m)}"
        f"<br>{esc(label)}"
        for i, (z, m) in enumerate(zip(ev, mags))
    ]
    pl = _plane(ev, mags, scale)
    fig = go.Figure(
        go.Scatter(
            x=pl.x,
            y=pl.y,
            mode="markers",
            name="eigenvalues",
            marker=dict(size=8, color=np.where(ev.real >= 0, "#2166ac", "#b2182b"), line=dict(color="#333", width=0.5)),
            hovertext=hover,
            hoverinfo="text",
            customdata=np.stack([ev.real, ev.imag], axis=1),
        )
    )
    if pl.scale == "log":  # circles at round |λ| = s·10^k so the log radius can be read
        _add_log_circles(fig, float(mags.max()), pl.s)
    r = pl.r
    fig.add_shape(type="line", x0=-r, x1=r, y0=0, y1=0, line=dict(color="#aaa", width=1))
    fig.add_shape(type="line", x0=0, x1=0, y0=-r, y1=r, line=dict(color="#aaa", width=1))
    fig.update_layout(
        title=f"Eigenvalues of {esc(label)}<br><sup>{ev.size} eigenvalues · {esc(_ratio_name(circuit))} = {score:.3f}"
        f"{esc(pl.note)}</sup>",
        xaxis=dict(title=pl.x_title, range=[-r, r], zeroline=False),
        yaxis=dict(title=pl.y_title, range=[-r, r], scaleanchor="x", scaleratio=1, zeroline=False),
        width=620,
        height=620,
        template="plotly_white",
        showlegend=False,
        meta=dict(scale=pl.scale),
    )
    return fig


class _Plane(NamedTuple):
    """Where the eigenvalues are drawn: the scale used, the points, the axes' half-range and titles, the scale note
    for the title and the log scale's unit s (NaN on the linear scale)."""

    scale: str
    x: np.ndarray
    y: np.ndarray
    r: float
    x_title: str
    y_title: str
    note: str
    s: float


def _plane(ev: np.ndarray, mags: np.ndarray, scale: str) -> _Plane:
    """The points of λ on the ``scale`` asked for ("auto" resolved: log when max|λ| / median|λ| is large)."""
    top = float(mags.max())
    if scale == "auto":
        med = float(np.median(mags))
        scale = "log" if top > 0 and (med == 0 or top / med > LOG_SCALE_RATIO) else "linear"
    if scale == "log" and top > 0:
        rho, s = _log_radius(mags)
        unit = np.divide(ev, mags, out=np.zeros_like(ev), where=mags > 0)  # e^{i arg λ}
        how = f"log10(1 + |λ|/s), s = {fmt(s)}"
        note = (
            f" · log radial scale: radius = {how}, angle = arg λ; |λ| spans "
            f"{fmt(float(mags[mags > 0].min()))}…{fmt(top)}"
        )
        return _Plane(
            "log",
            rho * unit.real,
            rho * unit.imag,
            float(rho.max()) * 1.1,
            f"Re λ/|λ| · {how}",
            f"Im λ/|λ| · {how}",
            note,
            s,
        )
    return _Plane("linear", ev.real, ev.imag, top * 1.1 or 1.0, "Re λ", "Im λ", "", math.nan)


def _add_log_circles(fig: go.Figure, top: float, s: float) -> None:
    """Dotted circles at |λ| = s·10^k (k ≥ 1, up to max|λ|), labelled, so a log radius can be read."""
    for k in range(1, int(math.log10(top / s)) + 1):
        rk = math.log10(1.0 + 10.0**k)
        fig.add_shape(type="circle", x0=-rk, x1=rk, y0=-rk, y1=rk, line=dict(color="#ddd", width=1, dash="dot"))
        fig.add_annotation(
            x=rk * 0.7071,
            y=rk * 0.7071,
            text=f"|λ|={fmt(s * 10.0**k)}",
            showarrow=False,
            font=dict(size=9, color="#888"),
            xanchor="left",
            yanchor="bottom",
        )


def _factors(circuit: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) with circuit = A @ B; a plain matrix M gives (M, I) lazily as (M, None)."""
    if hasattr(circuit, "A") and hasattr(circuit, "B"):
        A, B = circuit.A, circuit.B
    else:
        A, B = torch.as_tensor(circuit), None
    if A.ndim != 2 or (B is not None and B.ndim != 2):
        raise ShapeError(
            f"circuit must be 2-D (one head); got factors of shape {tuple(A.shape)}"
            + ("" if B is None else f" and {tuple(B.shape)}")
            + "; index one head first"
        )
    return A, B


def _ids(tokens: Any, n: int, name: str) -> list[int]:
    ids = torch.as_tensor(tokens).flatten().tolist() if not isinstance(tokens, (list, tuple)) else list(tokens)
    if not ids:
        raise ArgumentError(f"{name} is empty; give at least one token id")
    bad = [t for t in ids if not is_int(t) or not 0 <= int(t) < n]
    if bad:
        raise ArgumentError(f"{name} has {bad[:5]}; token ids must be ints in [0, {n - 1}]")
    return [int(t) for t in ids]


def top_token_values(
    circuit: Any,
    tokens: Sequence[int],
    *,
    targets: Union[None, str, Sequence[int]] = None,
    k: int = 5,
) -> tuple[list[int], list[int], np.ndarray, np.ndarray]:
    """(row ids, target ids, values [n_tokens, k], indices into target ids [n_tokens, k]): top-k per row.

    ``targets``: None = the same ``tokens`` (the circuit restricted to them), ``"all"`` = the
    whole output vocabulary, or a list of ids.
    """
    check_positive_int("k", k)
    A, B = _factors(circuit)
    n_rows = A.shape[0]
    n_cols = A.shape[1] if B is None else B.shape[1]
    rows = _ids(tokens, n_rows, "tokens")
    if targets is None:
        cols = _ids(tokens, n_cols, "tokens")
    elif isinstance(targets, str):
        if targets != "all":
            raise ArgumentError(f"targets={targets!r}; allowed: None (same tokens), 'all', or a list of token ids")
        cols = list(range(n_cols))
    else:
        cols = _ids(targets, n_cols, "targets")
    with torch.no_grad():
        if B is None:
            sub = A[rows][:, cols]
        else:
            whole = cols == list(range(n_cols))
            sub = A[rows] @ (B if whole else B[:, cols])  # [n_rows, m] @ [m, n_cols]
        sub = sub.double()
        kk = min(k, len(cols))
        vals, idx = sub.topk(kk, dim=1)
    return rows, cols, vals.cpu().numpy(), idx.cpu().numpy()


def _table_row_height(texts: Sequence[str], col_px: Sequence[int], *, font_px: int) -> int:
    """Pixel height of a table row whose cells wrap ``texts`` into columns ``col_px`` wide."""
    per_char = 0.56 * font_px  # a generous average glyph width (Open Sans), so estimates err taller
    lines = max(max(1, math.ceil(len(t) * per_char / max(w - 16, 1))) for t, w in zip(texts, col_px))
    return int(lines * (font_px + 5) + 10)


def top_token_table(
    circuit: Any,
    tokens: Sequence[int],
    *,
    targets: Union[None, str, Sequence[int]] = None,
    k: int = 5,
    decode: Optional[Callable[[int], str]] = None,
    kind: str = "OV",
    label: Optional[str] = None,
    caption: str = "",
) -> go.Figure:
    """Table: for each chosen input token, the top-``k`` tokens of a full OV or QK circuit.

    OV (W_E W_OV W_U): row = token attended to, columns = output tokens whose logits it raises.
    QK (W_E W_QK W_Eᵀ): row = query token, columns = key tokens it attends to most.
    ``decode`` maps a token id to its string (e.g. ``lambda i: model.tokenizer.decode([i])``).
    ``caption``: a line under the title (e.g. which token embedding the rows start from).
    """
    if kind not in ("OV", "QK"):
        raise ArgumentError(f"kind={kind!r}; allowed: 'OV', 'QK'")
    label = label if label is not None else getattr(circuit, "label", "")
    rows, cols, vals, idx = top_token_values(circuit, tokens, targets=targets, k=k)

    def name(t: int) -> str:
        return token_label(decode(t)) if decode is not None else str(t)

    row_head = "source token (attended to)" if kind == "OV" else "query token"
    col_head = "output logit" if kind == "OV" else "key"
    header = [row_head] + [f"{col_head} #{j + 1}" for j in range(vals.shape[1])]
    cells = [[name(t) for t in rows]]
    for j in range(vals.shape[1]):
        cells.append([f"{name(cols[idx[i, j]])}  ({vals[i, j]:.3g})" for i in range(len(rows))])
    # Size the table to its content: a static export shows a plotly table only within its height
    # (the rest would need scrolling), so every row's wrapped lines are counted up front.
    n_cols = len(header)
    col_px = [150] + [170] * (n_cols - 1)
    row_h = [_table_row_height([c[i] for c in cells], col_px, font_px=11) for i in range(len(rows))]
    head_h = _table_row_height(header, col_px, font_px=12)
    margin = dict(t=110 if caption else 90, b=20, l=20, r=20)
    fig = go.Figure(
        go.Table(
            columnwidth=col_px,
            header=dict(values=header, fill_color="#e8eef7", align="left", font=dict(size=12), height=head_h),
            cells=dict(values=cells, align="left", font=dict(size=11), height=24),
        )
    )
    scope = (
        "the chosen tokens"
        if targets is None
        else ("the whole vocabulary" if targets == "all" else f"{len(cols)} tokens")
    )
    fig.update_layout(
        title=f"Top tokens: {esc(label or f'full {kind} circuit')}<br><sup>restricted to {esc(scope)}"
        + (f"<br>{esc(caption)}" if caption else "")
        + "</sup>",
        width=sum(col_px) + margin["l"] + margin["r"],
        height=margin["t"] + margin["b"] + head_h + sum(row_h) + 8,
        margin=margin,
        template="plotly_white",
    )
    return fig
