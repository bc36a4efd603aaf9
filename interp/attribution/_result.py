"""LogitAttribution: a scalar per prompt (a logit, a logit difference, a projection) split by term.

    total[n] = Σ_i values[i, n]        (exact; ``closure_error`` = max_n |Σ_i values[i, n] − total[n]|)

A sweep keeps every prompt's target: its answer and wrong token ids, its target text and its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Optional

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import Result
from interp.errors import ArgumentError, LabelError
from interp._validate import check_index
from interp.labels import Head, HeadSource, parse

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["LogitAttribution"]


def _head_or_none(label: str) -> Optional[Head]:
    """``label`` as a :class:`~interp.labels.Head` (``L3.H5``), or None for any other term."""
    try:
        lab = parse(label)
    except LabelError:
        return None
    return lab if isinstance(lab, Head) else None


@dataclass(frozen=True, eq=False)
class LogitAttribution(Result):
    """Per-term contributions to a scalar target, for each of N prompts.

    ``values`` [n_terms, N]; ``labels`` name the terms (``embed``, ``L3.H5``, ``L3.attn_bias``,
    ``L3.mlp``, ``L3.N17``, ``L3.H5[src=4]``, ``final_bias``, ``unembed_bias``, ``log_partition``...);
    ``total`` [N] is the model's own number (``logit`` is an alias); ``target`` says what it is (for a
    sweep whose prompts have different targets it starts with "per-prompt"; ``prompt_targets[n]`` is
    prompt n's). Convention: value biases are not folded, so a head's term includes b_V W_O
    (transformer-lens's ``fold_value_biases`` would move it into ``attn_bias``; totals are unchanged).

    Per prompt: ``positions`` [N] (where the first answer token is read), ``answer_ids`` ([N], or [N, T]
    for multi-token answers), ``wrong_ids`` (None, [N], [N, W] for sets of wrong tokens, [N, W, T] for
    multi-token ones; −1 pads), ``prompt_str_tokens`` (each prompt's tokens — with a multi-token answer,
    the context its tokens are read in), ``prompt_targets``. ``str_tokens`` is prompt 0's tokens.

    Contract (:class:`interp._result.Result`): ``result["L3.H5"]`` is that term's values [N];
    ``to_dataframe()`` has one row per term (column ``term``); ``top`` ranks by ``mean_abs`` (the mean of
    |value| over prompts; ``absolute=True`` is the same), ``top(absolute=False)`` by the signed ``mean``,
    largest first (the terms that push the target up most).
    """

    label_column: ClassVar[str] = "term"
    default_by: ClassVar[str] = "mean_abs"
    signed_by: ClassVar[Optional[str]] = "mean"

    values: Float[Tensor, "n_terms batch"] = field(repr=False)
    labels: list[str]
    total: Float[Tensor, " batch"] = field(repr=False)
    target: str
    unit: str
    n_layers: int
    n_heads: int
    closure_error: float
    relative_error: float
    positions: Tensor = field(repr=False)
    prompts: Optional[list[str]] = field(default=None, repr=False)
    str_tokens: Optional[list[str]] = field(default=None, repr=False)  # of prompt 0
    answer_ids: Optional[Tensor] = field(default=None, repr=False)
    wrong_ids: Optional[Tensor] = field(default=None, repr=False)
    prompt_str_tokens: Optional[list[list[str]]] = field(default=None, repr=False)
    prompt_targets: Optional[list[str]] = field(default=None, repr=False)
    target_kind: str = "logit"  # "logit" | "logprob" | "direction"
    wrong_agg: Optional[str] = None  # "mean" | "logsumexp" when a wrong set is given
    details: dict = field(default_factory=dict, repr=False)  # how it was run (e.g. a sharded sweep's shards)

    @property
    def logit(self) -> Tensor:
        return self.total

    @property
    def n_prompts(self) -> int:
        return int(self.values.shape[1])

    def mean(self) -> Tensor:
        """Mean contribution of each term over prompts, [n_terms]."""
        return self.values.mean(dim=1)

    def head_matrix(self, *, prompt: Optional[int] = None) -> Float[Tensor, "n_layers n_heads"]:
        """Head terms as a [n_layers, n_heads] grid (mean over prompts unless ``prompt`` is given); with
        ``unit="head_source"`` each head's sources are summed (its whole term)."""
        if self.unit == "head_source":
            return self.source_matrix(prompt=prompt).sum(-1)
        v = self.mean() if prompt is None else self.values[:, self._prompt(prompt)]
        grid = torch.full((self.n_layers, self.n_heads), float("nan"), dtype=v.dtype, device=v.device)
        for i, lab in enumerate(self.labels):
            head = _head_or_none(lab)
            if head is not None:
                grid[head.layer, head.head] = v[i]
        return grid

    def source_matrix(self, *, prompt: Optional[int] = None) -> Float[Tensor, "n_layers n_heads src"]:
        """``unit="head_source"`` terms as [n_layers, n_heads, n_src] (mean over prompts unless ``prompt``)."""
        if self.unit != "head_source":
            raise ArgumentError(f"source_matrix needs unit='head_source'; this attribution has unit={self.unit!r}")
        v = self.mean() if prompt is None else self.values[:, self._prompt(prompt)]
        rows = [(i, lab) for i, lab in enumerate(map(parse, self.labels)) if isinstance(lab, HeadSource)]
        n_src = 1 + max(lab.src for _, lab in rows)
        grid = torch.zeros((self.n_layers, self.n_heads, n_src), dtype=v.dtype, device=v.device)
        for i, lab in rows:
            grid[lab.layer, lab.head, lab.src] = v[i]
        return grid

    def _prompt(self, prompt: int) -> int:
        return check_index("prompt", prompt, self.n_prompts, what="prompts")

    def _row(self, index: int) -> Tensor:
        """The term's value for each prompt, [N]."""
        return self.values[index]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per term: mean and std over prompts, and each prompt's value (columns p0, p1...)."""
        v = self.values.double().cpu()
        df = pd.DataFrame(
            {
                "term": self.labels,
                "mean": v.mean(1).numpy(),
                "std": v.std(1).numpy() if v.shape[1] > 1 else 0.0,
                "mean_abs": v.abs().mean(1).numpy(),
            }
        )
        if v.shape[1] <= 64:
            for n in range(v.shape[1]):
                df[f"p{n}"] = v[:, n].numpy()
        return df

    def plot(self, *, prompt: Optional[int] = None) -> go.Figure:
        """Layer × head heatmap with the non-head terms beside it (a plotly Figure); for
        ``unit="head_source"`` a head × source-token heatmap of one prompt (``prompt``, default 0)."""
        from interp.plots import attribution_heatmap, head_source_heatmap

        if self.unit == "head_source":
            return head_source_heatmap(self, prompt=0 if prompt is None else prompt)
        return attribution_heatmap(self, prompt=prompt)

    def __repr__(self) -> str:
        return (
            f"LogitAttribution({self.target}, unit={self.unit!r}: {len(self.labels)} terms × "
            f"{self.n_prompts} prompts, closure_error={self.closure_error:.2e}, "
            f"relative_error={self.relative_error:.2e})"
        )
