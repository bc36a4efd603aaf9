"""Results of causal analyses: PatchResult (a metric per patched node) and Effects (total/direct/indirect).

A patch replaces one node's activation in a *base* run by its value from a *source* run and
reads the metric M (:mod:`interp.causal._metrics`) again:

    denoise: base = corrupt input, source = clean run        (transformer-lens's ``get_act_patch_*``)
    noise:   base = clean input,   source = the ablation     (corrupt run, zero, mean or resample)

``values`` is M after the patch (not a difference); ``clean`` and ``corrupt`` are M on the
unpatched runs, and ``normalized = (values − corrupt) / (clean − corrupt)`` (0 = corrupt, 1 = clean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, cast

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import GAP_RTOL, Result, metric_gap
from interp._validate import check_index
from interp.errors import LabelError
from interp.labels import Edge, Head, NormBias, Path, parse

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["PatchResult", "Effects", "metric_gap", "patch_result", "GAP_RTOL"]


def _parsed(label: Any) -> Any:
    """``label`` as an :mod:`interp.labels` label, or None if it is not one."""
    try:
        return parse(label)
    except LabelError:
        return None


def _layer_of(label: str) -> int:
    """The layer a node label names (its writer's / source's for an edge or path), −1 for none."""
    lab = _parsed(label)
    lab = lab.writer if isinstance(lab, Edge) else lab.source if isinstance(lab, Path) else lab
    lab = lab.norm if isinstance(lab, NormBias) else lab
    layer = getattr(lab, "layer", None)
    return layer if isinstance(layer, int) else -1


def _head_grid(labels: list[str], v: Tensor, n_layers: int, n_heads: int) -> Tensor:
    grid = torch.full((n_layers, n_heads, *v.shape[1:]), float("nan"), dtype=torch.float64, device=v.device)
    for i, lab in enumerate(labels):
        head = _parsed(lab)
        if isinstance(head, Head):
            grid[head.layer, head.head] = v[i].double()
    return grid


@dataclass(frozen=True, eq=False)
class PatchResult(Result):
    """The metric after patching each node (mean over prompts), with the unpatched baselines.

    ``values`` [n_nodes] (``positions="all"``) or [n_nodes, pos] (``positions="each"``: the node patched
    at one position only); ``per_prompt`` the same with a trailing prompt axis — with ``positions="each"`` NaN at a
    prompt's padding (a shorter prompt of a ragged batch has no token there to patch), and ``values`` the mean over
    the prompts that have the position; ``labels`` the nodes
    (``L3.H5``, ``L3.mlp``, ``embed``, ``blocks.3.hook_resid_pre``, ``L3.attn.q[H5]``, ...);
    ``clean``/``corrupt`` the metric of the clean / corrupt run (mean over prompts; NaN where that run
    does not exist, e.g. noising with zero ablation and no corrupt input); ``baseline`` the base run's.
    ``method`` says how the values were computed ("activation patching", "path patching",
    "attribution patching"); ``details`` holds the method's options (sender, via, ...).

    Contract (:class:`interp._result.Result`): ``result["L3.H5"]`` is that node's value (or its
    row over positions); ``to_dataframe()`` has one row per node; ``top`` ranks by |effect|
    (``value − baseline``).
    """

    label_column: ClassVar[str] = "node"
    default_by: ClassVar[str] = "effect"

    values: Tensor = field(repr=False)
    per_prompt: Tensor = field(repr=False)
    labels: list[str]
    clean: float
    corrupt: float
    clean_per_prompt: Tensor = field(repr=False)
    corrupt_per_prompt: Tensor = field(repr=False)
    metric: str
    method: str
    direction: str
    ablation: str
    positions: str
    n_layers: int
    n_heads: int
    str_tokens: Optional[list[str]] = field(default=None, repr=False)
    details: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def mean_over_prompts(per_prompt: Tensor, positions: str) -> Tensor:
        """``values`` from ``per_prompt`` (prompts last): the mean, or with ``positions="each"`` the mean over the
        prompts that have each position (padding is NaN; NaN where no prompt has it)."""
        return per_prompt.nanmean(-1) if positions == "each" else per_prompt.mean(-1)

    @property
    def baseline(self) -> float:
        """The metric of the unpatched base run (clean when noising, corrupt when denoising)."""
        return self.clean if self.direction == "noise" else self.corrupt

    @property
    def effect(self) -> Tensor:
        """values − baseline: what the patch changed."""
        return self.values - self.baseline

    @property
    def normalized(self) -> Tensor:
        """(values − corrupt) / (clean − corrupt): 0 = the corrupt run's metric, 1 = the clean run's; NaN when the
        two are the same metric (:func:`metric_gap`; the analysis gave an :class:`interp.MetricGapWarning`)."""
        gap = metric_gap(self.clean, self.corrupt)  # NaN when clean ≈ corrupt (the analysis warned then)
        if not math.isfinite(gap):
            return torch.full_like(self.values, float("nan"))
        return (self.values - self.corrupt) / gap

    @property
    def n_prompts(self) -> int:
        return int(self.per_prompt.shape[-1])

    def head_matrix(self, *, normalized: bool = False) -> Float[Tensor, "n_layers n_heads ..."]:
        """Head nodes as a [n_layers, n_heads] grid ([n_layers, n_heads, pos] for positions="each"); NaN elsewhere."""
        v = self.normalized if normalized else self.values
        return _head_grid(list(self.labels), v, self.n_layers, self.n_heads)

    def prompt_values(self, prompt: int) -> Tensor:
        """The values of one prompt ([n_nodes] or [n_nodes, pos])."""
        return self.per_prompt[..., check_index("prompt", prompt, self.n_prompts, what="prompts")]

    def _row(self, index: int) -> Tensor:
        return self.values[index]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per node: layer, value, effect (value − baseline), normalized; for positions="each"
        the values at the position of largest |effect| (column ``pos``) and one column per position."""
        v = self.values.double().cpu()
        nz = self.normalized.double().cpu()
        base = self.baseline
        df = pd.DataFrame({"node": list(self.labels), "layer": [_layer_of(s) for s in self.labels]})
        if v.ndim == 1:
            df["value"], df["effect"], df["normalized"] = v.numpy(), (v - base).numpy(), nz.numpy()
            return df
        eff = (v - base).nan_to_num(0.0)
        arg = eff.abs().argmax(dim=1)
        rows = torch.arange(v.shape[0])
        df["pos"] = arg.numpy()
        df["value"], df["effect"], df["normalized"] = (
            v[rows, arg].numpy(),
            eff[rows, arg].numpy(),
            nz[rows, arg].numpy(),
        )
        for p in range(v.shape[1]):
            df[f"value@{p}"] = v[:, p].numpy()
        return df

    def plot(self, **options: Any) -> "go.Figure":
        """A layer × head heatmap (head nodes), a node × position heatmap (``positions="each"``) or a
        bar per node (a plotly Figure); ``normalized=True`` plots the normalized values."""
        from interp.plots import patch_figure

        return patch_figure(self, **options)

    def __repr__(self) -> str:
        shape = "×".join(map(str, self.values.shape))
        return (
            f"PatchResult({self.method}, {self.direction}, ablation={self.ablation!r}, metric {self.metric}: "
            f"{shape} values, clean={self.clean:.4g}, corrupt={self.corrupt:.4g})"
        )


def patch_result(
    model: Any,
    tokens: Tensor,
    per_prompt: Tensor,
    labels: list[str],
    clean_m: Tensor,
    corrupt_m: Tensor,
    *,
    metric: str,
    method: str,
    direction: str,
    ablation: str,
    positions: str,
    details: dict,
    warn: str,
    mask: Optional[Tensor] = None,
) -> PatchResult:
    """The :class:`PatchResult` of ``per_prompt`` [nodes, (pos,) P] with the clean / corrupt runs' metrics [P]
    (their means its ``clean`` / ``corrupt``), ``str_tokens`` the first prompt of ``tokens``. :func:`metric_gap`
    warns, naming ``warn``, when M(clean) ≈ M(corrupt). ``mask`` [P, pos] (``positions="each"``): the patched
    batch's attention mask; its padding is set to NaN in ``per_prompt``."""
    str_tokens = cast(list[str], model.to_str_tokens(tokens[0])) if model.tokenizer is not None else None
    metric_gap(float(clean_m.mean()), float(corrupt_m.mean()), warn=warn)
    if (
        positions == "each"
        and mask is not None
        and per_prompt.ndim == 3
        and tuple(mask.shape) == (per_prompt.shape[2], per_prompt.shape[1])
        and not bool(mask.bool().all())
    ):
        per_prompt = per_prompt.masked_fill(~mask.bool().T.to(per_prompt.device)[None], float("nan"))
    return PatchResult(
        values=PatchResult.mean_over_prompts(per_prompt, positions),
        per_prompt=per_prompt,
        labels=labels,
        clean=float(clean_m.mean()),
        corrupt=float(corrupt_m.mean()),
        clean_per_prompt=clean_m.detach(),
        corrupt_per_prompt=corrupt_m.detach(),
        n_layers=model.arch.n_layers,
        n_heads=model.arch.n_heads,
        metric=metric,
        method=method,
        direction=direction,
        ablation=ablation,
        positions=positions,
        str_tokens=str_tokens,
        details=details,
    )


@dataclass(frozen=True, eq=False)
class Effects(Result):
    """Per node: ``total`` (the node noised, everything downstream recomputed), ``direct`` (the node noised,
    every later node and the final norm's scale frozen at their clean values), ``indirect = total − direct``;
    all as changes of the metric from the clean run, mean over prompts ([n_nodes]).

    ``per_prompt`` [3, n_nodes, batch] holds (total, direct, indirect) per prompt; ``clean`` the clean run's metric,
    ``corrupt`` the corrupt run's (NaN unless ``ablation`` is "corrupt"); ``details`` how it was run (e.g. the shards of
    a sharded sweep). Contract: ``result["L3.H5"]`` is (total, direct, indirect); ``top`` ranks by |total|.
    """

    label_column: ClassVar[str] = "node"
    default_by: ClassVar[str] = "total"

    total: Tensor = field(repr=False)
    direct: Tensor = field(repr=False)
    indirect: Tensor = field(repr=False)
    per_prompt: Tensor = field(repr=False)
    labels: list[str]
    clean: float
    clean_per_prompt: Tensor = field(repr=False)
    metric: str
    ablation: str
    n_layers: int
    n_heads: int
    corrupt: float = math.nan
    details: dict = field(default_factory=dict, repr=False)

    @property
    def n_prompts(self) -> int:
        return int(self.per_prompt.shape[-1])

    def head_matrix(self, which: str = "total") -> Float[Tensor, "n_layers n_heads"]:
        """``which`` ("total" | "direct" | "indirect") of the head nodes as a [n_layers, n_heads] grid."""
        from interp._validate import check_choice

        check_choice("which", which, ("total", "direct", "indirect"))
        return _head_grid(list(self.labels), getattr(self, which), self.n_layers, self.n_heads)

    def _row(self, index: int) -> Tensor:
        return torch.stack([self.total[index], self.direct[index], self.indirect[index]])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per node: layer, total, direct, indirect."""
        return pd.DataFrame(
            {
                "node": list(self.labels),
                "layer": [_layer_of(s) for s in self.labels],
                "total": self.total.double().cpu().numpy(),
                "direct": self.direct.double().cpu().numpy(),
                "indirect": self.indirect.double().cpu().numpy(),
            }
        )

    def plot(self, **options: Any) -> "go.Figure":
        """Total, direct and indirect effect side by side per node (a plotly Figure)."""
        from interp.plots import effects_figure

        return effects_figure(self, **options)

    def __repr__(self) -> str:
        return (
            f"Effects(metric {self.metric}, ablation={self.ablation!r}: {len(self.labels)} nodes × "
            f"{self.n_prompts} prompts, clean={self.clean:.4g})"
        )
