"""Attention patterns of chosen heads, with token labels.

A head's pattern A^h[q, k] = softmax_k(x_q W_QK^h x_kᵀ / √d_head) (causally masked for
decoders) is how much the query token at position q reads from the key token at k
(Elhage et al. 2021 §2, "attention heads are independent and additive"; the head's output is
(A^h ⊗ W_OV^h)·x). :func:`attention_patterns` captures ``blocks.{l}.attn.hook_pattern`` in one
hooked forward pass (:func:`interp.stream.capture`, keeping only the requested heads of one
prompt); :func:`attention_pattern_figure` draws one heatmap per head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from interp._io import SaveLoadMixin
from interp.errors import ArgumentError, ShapeError
from interp.plots._common import as_numpy, check_index, esc, fmt, parse_head, unique_token_labels

__all__ = ["AttentionPatterns", "attention_pattern_figure", "attention_patterns"]


@dataclass(frozen=True, eq=False)
class AttentionPatterns(SaveLoadMixin):
    """Patterns [n_heads_selected, query_pos, key_pos] of one prompt, the head labels and tokens."""

    patterns: Float[Tensor, "head query_pos key_pos"] = field(repr=False)
    labels: list[str]
    str_tokens: list[str] = field(repr=False)

    def __getitem__(self, label: str) -> Tensor:
        try:
            return self.patterns[self.labels.index(label)]
        except ValueError:
            from interp.errors import LabelError

            raise LabelError(f"label={label!r} is not one of the captured heads {self.labels}") from None

    def to_dataframe(self) -> pd.DataFrame:
        """Long format: head, query position/token, key position/token, weight."""
        p = as_numpy(self.patterns, name="patterns")
        h, q, k = np.meshgrid(np.arange(p.shape[0]), np.arange(p.shape[1]), np.arange(p.shape[2]), indexing="ij")
        toks = np.array(self.str_tokens, dtype=object)
        return pd.DataFrame({"head": np.array(self.labels, dtype=object)[h.ravel()], "query_pos": q.ravel(),
                             "query_token": toks[q.ravel()], "key_pos": k.ravel(), "key_token": toks[k.ravel()],
                             "weight": p.ravel()})

    def top(self, k: int = 10) -> pd.DataFrame:
        """The ``k`` largest (head, query, key) weights."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ArgumentError(f"k={k!r} must be a positive int")
        return self.to_dataframe().sort_values("weight", ascending=False).head(k).reset_index(drop=True)

    def plot(self, **kwargs: Any) -> go.Figure:
        return attention_pattern_figure(self.patterns, self.str_tokens, heads=self.labels, **kwargs)


def _parse_heads(heads: Sequence[Any], n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    if isinstance(heads, (str, tuple)) and not (isinstance(heads, tuple) and heads and isinstance(heads[0], (tuple, str))):
        heads = [heads]
    out = []
    for h in heads:
        lh = parse_head(h) if isinstance(h, str) else (tuple(int(x) for x in h) if isinstance(h, (tuple, list)) else None)
        if lh is None or len(lh) != 2 or not (0 <= lh[0] < n_layers and 0 <= lh[1] < n_heads):
            raise ArgumentError(f"heads contains {h!r}; give labels like 'L3.H5' or (layer, head) pairs with "
                                f"layer in [0, {n_layers - 1}] and head in [0, {n_heads - 1}]")
        out.append(lh)
    if not out:
        raise ArgumentError("heads is empty; give at least one head such as 'L0.H0'")
    return out


def attention_patterns(
    model: Any, inputs: Union[str, Sequence[str], Tensor], heads: Sequence[Any], *, batch: int = 0,
) -> AttentionPatterns:
    """Capture the patterns of ``heads`` (labels 'L3.H5' or (layer, head)) for one prompt.

    One hooked forward pass; only the chosen heads of prompt ``batch`` are kept, and padding
    positions are dropped.
    """
    from interp.stream import as_batch, capture  # plots reads stream results; the import is local by design

    arch = model.arch
    hl = _parse_heads(heads, arch.n_layers, arch.n_heads)
    b = as_batch(model, inputs)
    bi = check_index(batch, b.tokens.shape[0], name="batch", what="prompts")
    layers = sorted({l for l, _ in hl})
    names = [f"blocks.{l}.attn.hook_pattern" for l in layers]
    acts, _ = capture(model, b, names, reducers={n: (lambda x: x[bi]) for n in names})
    real = b.attention_mask[bi].bool()
    pats = torch.stack([acts[f"blocks.{l}.attn.hook_pattern"][h][real][:, real] for l, h in hl]).float()
    toks = model.to_str_tokens(b.tokens[bi][real]) if model.tokenizer is not None else [
        str(int(t)) for t in b.tokens[bi][real]]
    return AttentionPatterns(patterns=pats, labels=[f"L{l}.H{h}" for l, h in hl], str_tokens=list(toks))


def attention_pattern_figure(
    patterns: Any,
    str_tokens: Optional[Sequence[str]] = None,
    *,
    heads: Optional[Sequence[str]] = None,
    cols: int = 3,
) -> go.Figure:
    """One heatmap per head: rows = query tokens, columns = key tokens, colour = attention weight.

    ``patterns``: [n_heads, query_pos, key_pos] (or one [query_pos, key_pos]) tensor, or an
    :class:`AttentionPatterns`; ``str_tokens``: the tokens (len = key_pos); ``heads``: a
    label per pattern.
    """
    if isinstance(patterns, AttentionPatterns):
        str_tokens = patterns.str_tokens if str_tokens is None else str_tokens
        heads = patterns.labels if heads is None else heads
        patterns = patterns.patterns
    p = as_numpy(patterns, name="patterns")
    if p.ndim == 2:
        p = p[None]
    if p.ndim != 3 or p.shape[0] == 0 or p.shape[1] == 0:
        raise ShapeError(f"patterns must be [n_heads, query_pos, key_pos] with at least one head, got {p.shape}")
    n, nq, nk = p.shape
    heads = list(heads) if heads is not None else [f"head {i}" for i in range(n)]
    if len(heads) != n:
        raise ArgumentError(f"heads has {len(heads)} labels for {n} patterns")
    toks = list(str_tokens) if str_tokens is not None else [str(i) for i in range(nk)]
    if len(toks) != nk:
        raise ArgumentError(f"str_tokens has {len(toks)} tokens but the patterns have {nk} key positions")
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise ArgumentError(f"cols={cols!r} must be a positive int")
    kl = unique_token_labels(toks)
    ql = kl[nk - nq:]  # query positions are the last nq positions
    c = min(cols, n)
    r = math.ceil(n / c)
    fig = make_subplots(rows=r, cols=c, subplot_titles=[esc(h) for h in heads],
                        horizontal_spacing=0.12 / c + 0.04, vertical_spacing=min(0.12, 0.3 / r))
    for i in range(n):
        hover = [[f"<b>{esc(heads[i])}</b><br>query {esc(ql[a])} → key {esc(kl[bb])}<br>weight {fmt(p[i, a, bb])}"
                  for bb in range(nk)] for a in range(nq)]
        fig.add_trace(go.Heatmap(
            z=p[i], x=kl, y=ql, colorscale="Blues", zmin=0.0, zmax=1.0, hovertext=hover, hoverinfo="text",
            name=heads[i], showscale=(i == 0), colorbar=dict(title="weight", len=0.6),
        ), row=i // c + 1, col=i % c + 1)
    fig.update_xaxes(type="category", tickangle=-60, tickfont=dict(size=9))
    fig.update_yaxes(type="category", autorange="reversed", tickfont=dict(size=9))
    side = max(260, 16 * nk + 120)
    fig.update_layout(
        title="Attention patterns<br><sup>rows: query token · columns: key token (attended to)</sup>",
        width=min(1600, side * c + 120), height=min(4000, side * r + 120), template="plotly_white",
    )
    return fig
