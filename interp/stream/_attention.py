"""Attention patterns of chosen heads for one prompt, kept from one walk of the engine's forward.

A head's pattern A^h[q, k] = softmax_k(x_q W_QK^h x_kᵀ / √d_head) (causally masked for
decoders) is how much the query token at position q reads from the key token at k
(Elhage et al. 2021 §2, "attention heads are independent and additive"; the head's output is
(A^h ⊗ W_OV^h)·x). :func:`attention_patterns` keeps the engine's pattern (``blocks.{l}.attn.hook_pattern`` in
transformer-lens's names) of the requested heads of one prompt as each layer produces it, and stops after the last
layer asked for; the figure is
:func:`interp.plots.attention_pattern_figure` (``AttentionPatterns.plot``). With ``prompt=None`` it
keeps every prompt of a padded batch at once (:class:`AttentionPatternBatch`): weights at padded
query or key positions are set to 0, and ``batch.prompt(i)`` is prompt i's :class:`AttentionPatterns`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence, Union, overload

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import Result
from interp._validate import check_index
from interp.errors import ArgumentError, LabelError
from interp.labels import Head
from interp.engine.internal import read_forward
from interp.stream._inputs import as_batch

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model
    from interp.plots import AttentionView

__all__ = ["AttentionPatterns", "AttentionPatternBatch", "attention_patterns"]


@dataclass(frozen=True, eq=False)
class AttentionPatterns(Result):
    """Patterns [n_heads_selected, query_pos, key_pos] of one prompt, the head labels and tokens.

    Contract (:class:`interp._result.Result`): ``ap["L3.H5"]`` is that head's pattern [query, key];
    ``to_dataframe()`` has one row per (head, query, key) (column ``head``); ``top`` ranks by ``weight``.
    """

    label_column: ClassVar[str] = "head"
    default_by: ClassVar[str] = "weight"

    patterns: Float[Tensor, "head query_pos key_pos"] = field(repr=False)
    labels: list[str]
    str_tokens: list[str] = field(repr=False)

    def _row(self, index: int) -> Tensor:
        """The head's pattern [query_pos, key_pos]."""
        return self.patterns[index]

    def to_dataframe(self) -> pd.DataFrame:
        """Long format: head, query position/token, key position/token, weight."""
        p = self.patterns.detach().cpu().double().numpy()
        h, q, k = np.meshgrid(np.arange(p.shape[0]), np.arange(p.shape[1]), np.arange(p.shape[2]), indexing="ij")
        toks = np.array(self.str_tokens, dtype=object)
        return pd.DataFrame(
            {
                "head": np.array(self.labels, dtype=object)[h.ravel()],
                "query_pos": q.ravel(),
                "query_token": toks[q.ravel()],
                "key_pos": k.ravel(),
                "key_token": toks[k.ravel()],
                "weight": p.ravel(),
            }
        )

    def plot(self, **kwargs: Any) -> go.Figure:
        """One heatmap per head (:func:`interp.plots.attention_pattern_figure`; a plotly Figure)."""
        from interp.plots import attention_pattern_figure  # plots sits above stream: imported on use

        return attention_pattern_figure(self.patterns, self.str_tokens, heads=self.labels, **kwargs)

    def view(self, **kwargs: Any) -> AttentionView:
        """An interactive view: hover a token to see where each head attends from it and to it
        (:func:`interp.plots.attention_view`; self-contained HTML + JavaScript, shown by Jupyter,
        written by ``interp.export(view, "x.html")``)."""
        from interp.plots import attention_view  # plots sits above stream: imported on use

        return attention_view(self, **kwargs)


@dataclass(frozen=True, eq=False)
class AttentionPatternBatch(Result):
    """Patterns [n_heads_selected, prompt, query_pos, key_pos] of every prompt of a padded batch.

    Weights at padding (query or key) are 0; ``attention_mask`` [prompt, pos] marks real tokens and
    ``str_tokens[i]`` are prompt i's real tokens. ``prompt(i)`` is prompt i's
    :class:`AttentionPatterns` (padding dropped) for its figure and interactive view.

    Contract (:class:`interp._result.Result`): ``b["L3.H5"]`` is that head's patterns [prompt, query,
    key]; ``to_dataframe()`` has one row per (head, prompt, real query, real key) (column ``head``);
    ``top`` ranks by ``weight``.
    """

    label_column: ClassVar[str] = "head"
    default_by: ClassVar[str] = "weight"

    patterns: Float[Tensor, "head prompt query_pos key_pos"] = field(repr=False)
    labels: list[str]
    attention_mask: Tensor = field(repr=False)
    str_tokens: list[list[str]] = field(repr=False)

    @property
    def n_prompts(self) -> int:
        return int(self.patterns.shape[1])

    def _row(self, index: int) -> Tensor:
        """The head's patterns [prompt, query_pos, key_pos]."""
        return self.patterns[index]

    def prompt(self, prompt: int) -> AttentionPatterns:
        """Prompt ``prompt``'s patterns with its padding dropped."""
        i = check_index("prompt", prompt, self.n_prompts, what="prompts")
        real = self.attention_mask[i].bool()
        return AttentionPatterns(
            patterns=self.patterns[:, i][:, real][:, :, real],
            labels=list(self.labels),
            str_tokens=list(self.str_tokens[i]),
        )

    def to_dataframe(self) -> pd.DataFrame:
        """Long format over real tokens: head, prompt, query position/token, key position/token, weight."""
        frames = []
        for i in range(self.n_prompts):
            df = self.prompt(i).to_dataframe()
            df.insert(1, "prompt", i)
            frames.append(df)
        return pd.concat(frames, ignore_index=True)

    def plot(self, *, prompt: int = 0, **kwargs: Any) -> go.Figure:
        """Prompt ``prompt``'s heatmaps (:meth:`AttentionPatterns.plot`)."""
        return self.prompt(prompt).plot(**kwargs)

    def __repr__(self) -> str:
        return (
            f"AttentionPatternBatch({len(self.labels)} heads × {self.n_prompts} prompts, "
            f"pos={self.patterns.shape[-1]}: {self.labels[:4]}{' …' if len(self.labels) > 4 else ''})"
        )


def _head_label(h: Any) -> Optional[Head]:
    """``h`` as a head label (``'L3.H5'`` or a :class:`~interp.labels.Head`), or None."""
    if not isinstance(h, (str, Head)):
        return None
    try:
        return Head.parse(h)
    except LabelError:
        return None


def _parse_heads(heads: Sequence[Any], n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    if isinstance(heads, (str, tuple)) and not (
        isinstance(heads, tuple) and heads and isinstance(heads[0], (tuple, str))
    ):
        heads = [heads]
    out = []
    for h in heads:
        lab = _head_label(h)
        lh = (
            (lab.layer, lab.head)
            if lab is not None
            else (tuple(int(x) for x in h) if isinstance(h, (tuple, list)) else None)
        )
        if lh is None or len(lh) != 2 or not (0 <= lh[0] < n_layers and 0 <= lh[1] < n_heads):
            raise ArgumentError(
                f"heads contains {h!r}; give labels like 'L3.H5' or (layer, head) pairs with "
                f"layer in [0, {n_layers - 1}] and head in [0, {n_heads - 1}]"
            )
        out.append(lh)
    if not out:
        raise ArgumentError("heads is empty; give at least one head such as 'L0.H0'")
    return out


@overload
def attention_patterns(
    model: Model, inputs: Union[str, Sequence[str], Tensor], heads: Sequence[Any], *, prompt: int = 0
) -> AttentionPatterns: ...
@overload
def attention_patterns(
    model: Model, inputs: Union[str, Sequence[str], Tensor], heads: Sequence[Any], *, prompt: None
) -> AttentionPatternBatch: ...


def attention_patterns(
    model: Model,
    inputs: Union[str, Sequence[str], Tensor],
    heads: Sequence[Any],
    *,
    prompt: Optional[int] = 0,
) -> Union[AttentionPatterns, AttentionPatternBatch]:
    """Capture the patterns of ``heads`` (labels 'L3.H5' or (layer, head)) for one prompt, or for
    every prompt with ``prompt=None`` (an :class:`AttentionPatternBatch`, padding zeroed).

    One engine walk up to the last chosen layer; only the chosen heads (of prompt ``prompt``) are kept, and padding
    positions are dropped (one prompt) or masked to 0 (all prompts).
    """
    b = as_batch(model, inputs)
    arch = model.arch
    hl = _parse_heads(heads, arch.n_layers, arch.n_heads)
    if prompt is None:
        return _all_prompts(model, b, hl)
    bi = check_index("prompt", prompt, b.tokens.shape[0], what="prompts")
    acts = _patterns(model, b, {l: (lambda x: x[bi]) for l, _ in hl})
    real = b.attention_mask[bi].bool()
    pats = torch.stack([acts[l][h][real][:, real] for l, h in hl]).float()
    ids = b.tokens[bi][real]  # one row: to_str_tokens gives one string per token
    toks = [str(t) for t in model.to_str_tokens(ids)] if model.tokenizer is not None else [str(int(t)) for t in ids]
    return AttentionPatterns(patterns=pats, labels=[str(Head(l, h)) for l, h in hl], str_tokens=toks)


def _patterns(model: Model, b: Any, keep: dict[int, Any]) -> dict[int, Tensor]:
    """{layer: keep[layer](its pattern [prompt, H, q, k])} from one engine walk up to the last of the layers."""
    names = {l: f"blocks.{l}.attn.hook_pattern" for l in keep}
    kept, _ = read_forward(model, b.tokens, b.attention_mask, {names[l]: fn for l, fn in keep.items()})
    return {l: kept[n] for l, n in names.items()}


def _all_prompts(model: Model, b: Any, hl: list[tuple[int, int]]) -> AttentionPatternBatch:
    """Every prompt's patterns of heads ``hl`` from one pass, padding zeroed."""
    keep = {l: sorted({h for ll, h in hl if ll == l}) for l in {l for l, _ in hl}}
    acts = _patterns(model, b, {l: (lambda x, heads=heads: x[:, heads]) for l, heads in keep.items()})
    mask = b.attention_mask.bool()
    real = (mask[:, :, None] & mask[:, None, :])[None]  # [1, prompt, q, k]
    pats = torch.stack([acts[l][:, keep[l].index(h)] for l, h in hl]).float()
    pats = torch.where(real, pats, torch.zeros((), dtype=pats.dtype, device=pats.device))
    toks = []
    for i in range(b.tokens.shape[0]):
        ids = b.tokens[i][mask[i]]
        toks.append(
            [str(t) for t in model.to_str_tokens(ids)] if model.tokenizer is not None else [str(int(t)) for t in ids]
        )
    return AttentionPatternBatch(
        patterns=pats,
        labels=[str(Head(l, h)) for l, h in hl],
        attention_mask=b.attention_mask,
        str_tokens=toks,
    )
