"""The model's next-token prediction as a bar chart: one prompt's top-k tokens by probability.

Reads only the attributes of an :class:`interp.Predictions`-shaped result: ``top_ids``, ``top_probs``,
``top_logits``, ``token_label``, ``prompts``, ``positions``, ``model_name``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from interp.plots._common import as_numpy, check_index, esc, require_attr, token_label

__all__ = ["predictions_figure"]


def predictions_figure(pred: Any, *, prompt: int = 0) -> go.Figure:
    """Horizontal bars of prompt ``prompt``'s k most likely next tokens (most likely on top), their
    probability on the x axis; hover gives the token id, probability, log-probability and logit."""
    require_attr(
        pred,
        ("top_ids", "top_probs", "top_logits", "token_label"),
        name="pred",
        expected="an interp Predictions (from interp.predict)",
    )
    ids = as_numpy(pred.top_ids, name="pred.top_ids", ndim=2, dtype=np.int64)
    B, k = ids.shape
    b = check_index(prompt, B, name="prompt", what="prompts")
    probs = as_numpy(pred.top_probs, name="pred.top_probs", ndim=2)[b]
    logits = as_numpy(pred.top_logits, name="pred.top_logits", ndim=2)[b]
    names = [token_label(pred.token_label(int(t))) for t in ids[b]]
    y = [f"{r + 1}. {n}" for r, n in enumerate(names)]
    hover = [
        f"<b>{esc(n)}</b> (id {int(t)})<br>p = {p:.4g}<br>log p = {np.log(p):.4g}<br>logit = {z:.4g}"
        for n, t, p, z in zip(names, ids[b], probs, logits)
    ]
    fig = go.Figure(
        go.Bar(
            x=probs,
            y=y,
            orientation="h",
            hovertext=hover,
            hoverinfo="text",
            text=[f"{p:.3f}" for p in probs],
            textposition="auto",
            marker_color="#4c78a8",
        )
    )
    prompts = list(getattr(pred, "prompts", []) or [])
    title = f"{getattr(pred, 'model_name', '')}: next token"
    if b < len(prompts):
        p = prompts[b]
        title += f" after “{esc(p if len(p) <= 80 else '…' + p[-79:])}”"
    fig.update_layout(
        title=title,
        xaxis_title="probability (softmax over the whole vocabulary)",
        yaxis=dict(autorange="reversed"),
        height=max(260, 28 * k + 120),
        margin=dict(l=160),
    )
    return fig
