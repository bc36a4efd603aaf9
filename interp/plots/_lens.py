"""The logit lens as a heatmap: resid points (depth, top to bottom) × positions of one prompt.

Each cell shows the top token read at that point and position (text) and is coloured by its
probability, or by the readout of a chosen token (a logit or logit difference, diverging scale
centred at 0). Reads only the attributes of a :class:`interp.causal.LogitLens`-shaped result:
``labels``, ``top_tokens``, ``top_logits``, ``top_probs``, ``target_values``, ``target``, ``positions``,
``attention_mask``, ``tokens``, ``str_tokens``, ``decoded``, ``scale``, ``closure_error``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from interp.errors import ArgumentError
from interp.plots._common import DIVERGING, as_numpy, check_index, esc, fmt, quoted, require_attr, token_label

__all__ = ["logit_lens_figure"]


def logit_lens_figure(lens: Any, *, prompt: int = 0, value: str = "auto", max_text: int = 40) -> go.Figure:
    """Points × positions heatmap of the top token (text) coloured by its probability (``value="top"``)
    or by the target token's readout (``value="target"``; "auto": target if the lens has one).

    Cell text is the top token (shortened to ``max_text`` characters); hover gives the point, position,
    input token, top tokens with their probabilities, and the target's readout.
    """
    require_attr(
        lens,
        ("labels", "top_tokens", "top_logits", "top_probs", "positions", "attention_mask"),
        name="lens",
        expected="an interp LogitLens (from interp.logit_lens)",
    )
    value, target_values = _value_kind(lens, value)
    tokens = as_numpy(lens.top_tokens, name="lens.top_tokens", ndim=4, dtype=np.int64)
    P, B, S, k = tokens.shape
    b = check_index(prompt, B, name="prompt", what="prompts")
    probs = as_numpy(lens.top_probs, name="lens.top_probs", ndim=4)[:, b]
    logits = as_numpy(lens.top_logits, name="lens.top_logits", ndim=4)[:, b]
    mask = as_numpy(lens.attention_mask, name="lens.attention_mask", ndim=2)[b] > 0
    positions = as_numpy(lens.positions, name="lens.positions", ndim=2, dtype=np.int64)[b]
    cols = [s for s in range(S) if mask[s]]
    if not cols:
        raise ArgumentError(f"prompt {b} has no real tokens among the kept positions")
    decoded = getattr(lens, "decoded", {}) or {}
    name = lambda t: decoded.get(str(int(t)), f"#{int(t)}")
    in_tok = _input_tokens(lens, b, positions, cols)
    x = [f"{int(positions[s])}:{token_label(t)}" for s, t in zip(cols, in_tok)]
    y = list(lens.labels)
    short = lambda s: s if len(s) <= max_text else s[: max_text - 1] + "…"
    text = [[esc(short(token_label(name(tokens[i, b, s, 0])))) for s in cols] for i in range(P)]
    tv = None if target_values is None else as_numpy(target_values, name="lens.target_values", ndim=3)[:, b]
    target = str(getattr(lens, "target", "") or "")
    hover = []
    for i in range(P):
        row = []
        for s, tok in zip(cols, in_tok):
            tops = "<br>".join(
                f"{quoted(name(tokens[i, b, s, j]))}: p={fmt(probs[i, s, j], 3)}, logit={fmt(logits[i, s, j])}"
                for j in range(k)
            )
            extra = f"<br>{esc(target)} = {fmt(tv[i, s])}" if tv is not None else ""
            row.append(f"<b>{esc(y[i])}</b><br>pos {int(positions[s])} {quoted(tok)}<br>{tops}{extra}")
        hover.append(row)
    cells = dict(x=x, y=y, text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text")
    if value == "target" and tv is not None:  # (value "target" was refused above for a lens without one)
        z = tv[:, cols]
        zmax = float(np.nanmax(np.abs(z))) or 1.0
        heat = go.Heatmap(
            z=z, colorscale=DIVERGING, zmid=0.0, zmin=-zmax, zmax=zmax, colorbar=dict(title="readout"), **cells
        )
        what = esc(target)
    else:
        heat = go.Heatmap(
            z=probs[:, cols, 0], colorscale="Blues", zmin=0.0, zmax=1.0, colorbar=dict(title="p(top)"), **cells
        )
        what = "top token and its probability"
    fig = go.Figure(heat)
    scale = getattr(lens, "scale", "")
    err = getattr(lens, "closure_error", None)
    fig.update_layout(
        title=f"logit lens ({esc(scale)} final-norm scale): {what}, prompt {b}"
        + (f"<br><sub>last point vs the model's logits: max |Δ| = {fmt(err, 3)}</sub>" if err is not None else ""),
        width=max(520, 90 + 70 * len(cols)),
        height=max(360, 140 + 22 * P),
        xaxis_title="position",
        yaxis_title="resid point",
    )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category")
    return fig


def _value_kind(lens: Any, value: str) -> tuple[str, Any]:
    """(``value`` with "auto" resolved to "target" or "top", the lens's ``target_values`` or None)."""
    if value not in ("auto", "top", "target"):
        raise ArgumentError(f"value={value!r} must be 'auto', 'top' or 'target'")
    target_values = getattr(lens, "target_values", None)
    if value == "auto":
        value = "target" if target_values is not None else "top"
    if value == "target" and target_values is None:
        raise ArgumentError("value='target' but this lens has no target; call interp.logit_lens(..., answer=...)")
    return value, target_values


def _input_tokens(lens: Any, b: int, positions: np.ndarray, cols: list[int]) -> list[str]:
    """The input token at each kept column of prompt ``b``: its string, else ``#id``, else its position."""
    str_tokens = getattr(lens, "str_tokens", None)
    ids = as_numpy(lens.tokens, name="lens.tokens", ndim=2, dtype=np.int64)[b] if hasattr(lens, "tokens") else None
    return [
        (
            str_tokens[b][int(positions[s])]
            if str_tokens
            else f"#{int(ids[positions[s]])}"
            if ids is not None
            else str(int(positions[s]))
        )
        for s in cols
    ]
