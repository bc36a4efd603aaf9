"""Is a basis privileged? Kurtosis of residual-stream coordinates vs MLP neuron activations.

Elhage et al. 2021 ("A Mathematical Framework …", §"Privileged basis"); docs/math.md §13. Nothing in
a transformer's arithmetic singles out the residual stream's coordinates (any rotation gives an
equivalent model, :func:`rotate_residual`), whereas an elementwise nonlinearity makes MLP
neurons a privileged basis. A privileged basis shows up as heavy-tailed coordinates: features
aligned with basis directions make individual coordinates sparse and spiky. The statistic is the
excess kurtosis of each coordinate over the tokens of ``inputs``:

    κ_i = E[(x_i − μ_i)⁴] / E[(x_i − μ_i)²]² − 3        (0 for a Gaussian)

reported for (a) the residual stream after each block in its own basis, (b) the same stream in a
random orthogonal basis (the control: what "no preferred basis" looks like for this data), and
(c) each MLP's neuron activations (the input of W_out). Real models do have a few outlier
residual dimensions (massive activations, Adam/norm-gain effects); the comparison with (b) shows
how far the residual basis departs from basis-free, and (c) how privileged the neurons are.

It runs the engine's forward once per text (:func:`interp.engine.internal.read_forward`) and streams the
four power sums per coordinate in float64 as each layer produces its tensors, so memory does not grow with
the number of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Sequence, Union

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool
from interp.circuits._common import check_data, check_model
from interp.circuits._rotation import random_rotation
from interp.engine.internal import read_forward
from interp.errors import ArgumentError, ShapeError, UnsupportedOperationError
from interp.labels import Neuron, Resid
from interp.models import describe_block

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model

__all__ = ["PrivilegedBasisReport", "privileged_basis_report"]


class _Moments:
    """Streaming power sums of (x − shift) per coordinate (shift: the first batch's mean)."""

    def __init__(self) -> None:
        self.n = 0
        self.shift: Optional[Tensor] = None
        self.s: list[Tensor] = []  # Σy, Σy², Σy³, Σy⁴ (from the first batch on)

    def add(self, x: Tensor) -> None:  # x [n_tok, k]
        x = x.detach().to("cpu", torch.float64)
        if self.shift is None:
            self.shift = x.mean(0)
            self.s = [torch.zeros_like(self.shift) for _ in range(4)]
        y = x - self.shift
        p = y.clone()
        for i in range(4):
            self.s[i] += p.sum(0)
            if i < 3:
                p = p * y
        self.n += x.shape[0]

    def kurtosis(self) -> Tensor:
        n = self.n
        m1, m2, m3, m4 = (s / n for s in self.s)
        var = m2 - m1**2
        c4 = m4 - 4 * m1 * m3 + 6 * m1**2 * m2 - 3 * m1**4
        return (c4 / var.clamp_min(1e-30) ** 2 - 3).float()


@dataclass(frozen=True, eq=False)
class PrivilegedBasisReport(Result):
    """Excess kurtosis per coordinate: ``resid`` [n_layers, d_model] (residual stream after each block,
    own basis), ``resid_rotated`` [n_layers, d_model] (random orthogonal basis, the control),
    ``neurons`` [n_layers, d_mlp] (MLP activations; None for attention-only models).

    Contract (:class:`interp._result.Result`): rows are the resid points after each block
    (``rep["blocks.3.hook_resid_post"]`` is that layer's kurtosis per coordinate of each group, a
    dict); ``to_dataframe()`` summarises each (column ``point``); ``top`` ranks single coordinates
    (residual dims ``L3.resid[17]`` and neurons ``L3.N42``) by ``kurtosis``, largest first (signed).
    """

    label_column: ClassVar[str] = "point"
    default_by: ClassVar[str] = "kurtosis"
    default_absolute: ClassVar[bool] = False

    resid: Float[Tensor, "n_layers d_model"] = field(repr=False)
    resid_rotated: Float[Tensor, "n_layers d_model"] = field(repr=False)
    neurons: Optional[Float[Tensor, "n_layers d_mlp"]] = field(repr=False)
    n_tokens: int
    model_name: str = ""

    @property
    def labels(self) -> list[str]:
        """The resid point after each block, ``blocks.{l}.hook_resid_post``."""
        return [str(Resid(l, "post")) for l in range(self.resid.shape[0])]

    def _groups(self) -> dict[str, Tensor]:
        groups = {"resid": self.resid, "resid_rotated": self.resid_rotated}
        if self.neurons is not None:
            groups["neurons"] = self.neurons
        return groups

    def _row(self, index: int) -> dict[str, Tensor]:
        """Layer ``index``'s excess kurtosis per coordinate, by group (resid, resid_rotated[, neurons])."""
        return {name: k[index] for name, k in self._groups().items()}

    def to_dataframe(self) -> pd.DataFrame:
        """Per layer (resid point after the block): median / mean / max excess kurtosis of each group,
        and the share of coordinates with κ > 10."""
        rows = []
        groups = self._groups()
        for l, point in enumerate(self.labels):
            row: dict[str, Any] = {"point": point, "layer": l}
            for name, k in groups.items():
                v = k[l].double()
                row[f"{name}_median"] = float(v.median())
                row[f"{name}_mean"] = float(v.mean())
                row[f"{name}_max"] = float(v.max())
                row[f"{name}_frac_gt10"] = float((v > 10).double().mean())
            rows.append(row)
        return pd.DataFrame(rows)

    def _ranked_frame(self) -> pd.DataFrame:
        """One row per coordinate: ``L3.resid[17]`` (kind resid) and ``L3.N42`` (kind neuron), kurtosis."""
        recs = []
        for l in range(self.resid.shape[0]):
            recs += [(f"L{l}.resid[{i}]", "resid", float(v)) for i, v in enumerate(self.resid[l])]
            if self.neurons is not None:
                recs += [(str(Neuron(l, i)), "neuron", float(v)) for i, v in enumerate(self.neurons[l])]
        return pd.DataFrame(recs, columns=["coordinate", "kind", "kurtosis"])

    def plot(self) -> go.Figure:
        """Median excess kurtosis per layer for the three groups (a plotly Figure, log y)."""
        from interp.plots import privileged_basis_figure  # plots reads the result's attributes; imported on use

        return privileged_basis_figure(self)

    def __repr__(self) -> str:
        return f"PrivilegedBasisReport({self.resid.shape[0]} layers, {self.n_tokens} tokens)"


def _token_rows(model: Model, inputs: Union[str, Sequence[str], Tensor]) -> list[Tensor]:
    """One [1, pos] id tensor per prompt (strings run separately, so there is no padding)."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, Tensor):
        check_data(inputs, name="inputs")
        t = inputs[None] if inputs.ndim == 1 else inputs
        if t.ndim != 2 or t.is_floating_point() or t.dtype == torch.bool or t.numel() == 0:
            raise ShapeError(
                f"inputs must be int token ids [batch, pos], got shape {tuple(inputs.shape)} dtype {inputs.dtype}"
            )
        if int(t.min()) < 0 or int(t.max()) >= model.arch.d_vocab:
            raise ArgumentError(f"inputs has token ids outside [0, {model.arch.d_vocab - 1}]")
        return [row[None].to(model.device, torch.long) for row in t]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(s, str) for s in inputs):
        return [model.to_tokens(s) for s in inputs]
    raise ArgumentError(
        f"inputs must be a string, a non-empty list of strings or int token ids [batch, pos]; "
        f"got {type(inputs).__name__}"
    )


def privileged_basis_report(
    model: Model, inputs: Union[str, Sequence[str], Tensor], *, drop_first: bool = True, seed: int = 0
) -> PrivilegedBasisReport:
    """Excess kurtosis of residual coordinates (own and random basis) vs MLP neurons over ``inputs``.

    ``drop_first`` leaves out position 0 of each sequence (BOS/[CLS], whose activations are
    outliers in most models). ``seed`` fixes the random basis of the control.
    """
    check_model(model)
    check_bool("drop_first", drop_first)
    rows = _token_rows(model, inputs)
    a = model.arch
    first = 1 if drop_first else 0
    if sum(max(0, r.shape[1] - first) for r in rows) < 4:
        raise ArgumentError("inputs has fewer than 4 tokens to measure (after dropping position 0); give more text")
    if a.n_experts:
        raise UnsupportedOperationError(
            f"privileged_basis_report: model {model.name!r} has mixture-of-experts MLPs ({a.n_experts} experts, the "
            f"router's top {a.experts_per_token} per token): there is no one MLP whose neurons it could measure"
        )
    Q = random_rotation(a.d_model, seed=seed).to(device=model.device, dtype=torch.float64)
    resid = [_Moments() for _ in range(a.n_layers)]
    rotated = [_Moments() for _ in range(a.n_layers)]
    neurons = [_Moments() for _ in range(a.n_layers)] if describe_block(a).has_mlp else None

    def resid_hook(layer: int) -> Callable[[Tensor], None]:
        def fn(t: Tensor) -> None:
            x = t[0, first:].to(torch.float64)  # [pos, d_model], on the model's device as Q
            resid[layer].add(x)
            rotated[layer].add(x @ Q)

        return fn

    def neuron_hook(layer: int) -> Callable[[Tensor], None]:
        def fn(t: Tensor) -> None:
            neurons[layer].add(t[0, first:])  # type: ignore[index]

        return fn

    hooks = {f"blocks.{l}.hook_resid_post": resid_hook(l) for l in range(a.n_layers)}
    if neurons is not None:
        hooks |= {f"blocks.{l}.mlp.hook_post": neuron_hook(l) for l in range(a.n_layers)}
    n_tokens = 0
    for r in rows:  # one engine walk per text, its moments streamed as each layer produces its tensors
        if r.shape[1] <= first:
            continue
        read_forward(model, r, torch.ones_like(r), hooks)
        n_tokens += r.shape[1] - first
    stack = lambda ms: torch.stack([m.kurtosis() for m in ms])  # noqa: E731
    return PrivilegedBasisReport(
        resid=stack(resid),
        resid_rotated=stack(rotated),
        neurons=None if neurons is None else stack(neurons),
        n_tokens=n_tokens,
        model_name=model.name,
    )
