"""Figures of a dictionary evaluation: per dictionary its FVU, spliced-in loss recovered and dead fraction, and
each dictionary's feature-density histogram (log10 of the fraction of tokens a feature is active on).

Built from a :class:`interp.features.DictionaryEvaluation`-like result, read by its attributes.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["dictionary_density_figure", "dictionary_evaluation_figure"]


def _values(t: Any) -> list[float]:
    return [float(x) for x in t.double().cpu().tolist()]


def dictionary_evaluation_figure(ev: Any) -> go.Figure:
    """FVU, loss recovered and dead fraction against the dictionary, one panel each (each on its own scale; hover
    names the row)."""
    labels = list(ev.labels)
    panels = (("FVU", "fvu"), ("loss recovered", "loss_recovered"), ("dead fraction", "dead_fraction"))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=[p[0] for p in panels])
    for row, (name, col) in enumerate(panels, start=1):
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=_values(getattr(ev, col)),
                mode="lines+markers",
                name=name,
                hovertemplate=f"%{{x}}: {name} %{{y:.4f}}<extra></extra>",
            ),
            row=row,
            col=1,
        )
    fig.update_layout(
        title=f"dictionary scores — {ev.model_name} ({ev.n_tokens} held-out tokens)",
        height=620,
        showlegend=False,
    )
    fig.update_xaxes(title_text="dictionary", row=3, col=1)
    return fig


def dictionary_density_figure(ev: Any, labels: Optional[Sequence[str]] = None, *, bins: int = 40) -> go.Figure:
    """Histogram of log10(activation frequency) of each dictionary's live features (``labels``: the rows; default
    every row with features), the dead ones counted in the title; the dense threshold marked."""
    rows = [lab for lab, n in zip(ev.labels, ev.n_features) if n] if labels is None else list(labels)
    fig = go.Figure()
    lo = math.log10(1.0 / max(ev.n_tokens, 1))
    for lab in rows:
        d = np.asarray(ev.densities(lab).double().cpu().tolist(), dtype=np.float64)
        live = d[d > 0]
        fig.add_trace(
            go.Histogram(
                x=np.log10(live).tolist(),
                name=f"{lab} ({int((d == 0).sum())} dead)",
                xbins={"start": lo, "end": 0.0, "size": (0.0 - lo) / bins},
                opacity=0.6,
                hovertemplate="log10 density %{x}: %{y} features<extra></extra>",
            )
        )
    fig.add_vline(x=math.log10(ev.dense_threshold), line_dash="dash", annotation_text="dense")
    fig.update_layout(
        barmode="overlay",
        title=f"feature density — {ev.model_name}",
        xaxis_title="log10(fraction of tokens active)",
        yaxis_title="features",
    )
    return fig
