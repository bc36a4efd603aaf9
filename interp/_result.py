"""The one contract every public result class follows.

A result is a frozen dataclass of tensors, labels and JSON values — never the model — with:

    result[label]                 the value(s) of one labelled row (a label object or its text)
    result.labels                 the row labels, in order
    result.to_dataframe()         one row per label (long formats: several), a ``label_column`` column naming it
    result.top(k, *, by, absolute)  the k rows with the largest ``by`` (|by| if ``absolute``), a DataFrame
    result.plot(...)              a plotly Figure (built by :mod:`interp.plots`, never shown)
    result.save(path) / Cls.load(path)   one ``.safetensors`` file (tensors + JSON metadata)

``top`` ranks by the class's documented ``default_by`` column; ``absolute`` defaults to the class's
``default_absolute`` (True — rank by magnitude — unless the quantity is signed and "top" means
"largest", e.g. copying scores). ``absolute`` has one meaning everywhere: True ranks by the magnitude of
the quantity, False by its signed value, largest first. Where the default column is itself a magnitude
(``LogitAttribution``'s ``mean_abs``, the mean of |value| over prompts), ``absolute=False`` without ``by``
ranks by the signed column it summarises (``signed_by``: ``mean``), so it never repeats ``top()``.
Results computed from norm-folded or raw weights say which in a typed ``fold_norms`` field. The row
argument that picks one prompt of a batch is called ``prompt`` everywhere.

Placement (one rule): every tensor of a result is on the device the model computed on. A result is built
from the model's tensors and a little host bookkeeping (masks, indices); :func:`place` moves the host ones
to the device of the first tensor that is not on the CPU (a result with no such tensor stays on the CPU).
``result[label]`` and the tensor fields are on that device; ``to_dataframe()``, ``top()``, ``plot()`` and
``save()`` read a host copy themselves (``result.to("cpu")``, one copy per call), so a CUDA result needs no
``.cpu()`` from the caller.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import warnings
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Sequence, TypeVar

import pandas as pd
import torch

from interp._io import SaveLoadMixin
from interp._validate import check_bool, check_positive_int
from interp.errors import ArgumentError, LabelError, MetricGapWarning, warn_user

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "Result",
    "prompt_alias",
    "place",
    "result_device",
    "on_host",
    "metric_gap",
    "faithfulness_areas",
    "faithfulness_curves",
    "GAP_RTOL",
]

_R = TypeVar("_R")
#: the methods that read a host copy of a result (``to_dataframe``, ``top`` via ``_ranked_frame``, ``plot``, ``save``)
HOST_METHODS = ("to_dataframe", "_ranked_frame", "plot", "save")


def _walk(obj: Any) -> Any:
    """Every tensor of a field value: the value itself, or inside dicts, lists, tuples and nested results."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Result):
        for f in dataclasses.fields(obj):  # type: ignore[arg-type]
            yield from _walk(getattr(obj, f.name, None))
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk(v)


def _move(obj: Any, device: torch.device) -> Any:
    """``obj`` with every tensor (in dicts, lists, tuples and nested results) on ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device == device else obj.to(device)
    if isinstance(obj, Result):
        return obj.to(device)
    if isinstance(obj, dict):
        return type(obj)((k, _move(v, device)) for k, v in obj.items()) if any(True for _ in _walk(obj)) else obj
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_move(v, device) for v in obj) if any(True for _ in _walk(obj)) else obj
    if isinstance(obj, list):
        return [_move(v, device) for v in obj] if any(True for _ in _walk(obj)) else obj
    return obj


def _fields(obj: Any, names: Optional[Sequence[str]] = None) -> list[str]:
    return list(names) if names is not None else [f.name for f in dataclasses.fields(obj)]


def result_device(obj: Any, names: Optional[Sequence[str]] = None) -> torch.device:
    """The device a result's tensors belong on: that of the first tensor (in field order) not on the CPU; the
    CPU if every tensor is there. ``names``: the fields to read (default: every dataclass field)."""
    for name in _fields(obj, names):
        for t in _walk(getattr(obj, name, None)):
            if t.device.type != "cpu":
                return t.device
    return torch.device("cpu")


def place(obj: Any, names: Optional[Sequence[str]] = None) -> None:
    """Move every tensor of the (frozen) dataclass ``obj``'s fields ``names`` to :func:`result_device` — the
    one placement rule (module docstring); called by ``__post_init__``."""
    device = result_device(obj, names)
    for name in _fields(obj, names):
        v = getattr(obj, name, None)
        if any(t.device != device for t in _walk(v)):
            object.__setattr__(obj, name, _move(v, device))


def on_host(method: Callable[..., _R]) -> Callable[..., _R]:
    """``method`` run on ``self.to("cpu")`` (no copy when every tensor is already on the CPU)."""
    if getattr(method, "_on_host", False):
        return method

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> _R:
        return method(self.to("cpu"), *args, **kwargs)

    wrapper._on_host = True  # type: ignore[attr-defined]
    return wrapper


class Result(SaveLoadMixin):
    """Base of every public result class (see the module docstring for the contract).

    Subclasses set ``label_column`` (the DataFrame column holding the label, e.g. ``"term"``),
    ``default_by`` (the column ``top`` ranks by) and ``default_absolute``, and implement ``labels``,
    ``to_dataframe``, ``plot`` and ``_row(index)`` (the value(s) of the i-th label). ``top`` ranks the
    rows of :meth:`_ranked_frame` (``to_dataframe()`` unless a class documents another table).
    """

    label_column: ClassVar[str] = "label"
    default_by: ClassVar[str] = "value"
    default_absolute: ClassVar[bool] = True
    #: the signed column ``top(absolute=False)`` ranks by when ``default_by`` is a magnitude (None: ``default_by``)
    signed_by: ClassVar[Optional[str]] = None

    if TYPE_CHECKING:

        @property
        def labels(self) -> Sequence[str]: ...

    # -- placement (module docstring) ----------------------------------------------------------------

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in HOST_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, on_host(cls.__dict__[name]))

    def __post_init__(self) -> None:
        place(self)

    @property
    def device(self) -> torch.device:
        """The device every tensor of this result is on (the model's; the CPU for a result without tensors)."""
        return result_device(self)

    def to(self: _R, device: Any) -> _R:
        """A copy with every tensor on ``device`` (``self`` when they all are already)."""
        dev = torch.device(device)
        if all(t.device == dev for t in _walk(self)):
            return self
        new = copy.copy(self)
        for k, v in vars(self).items():
            object.__setattr__(new, k, _move(v, dev))
        return new

    @property
    def default_column(self) -> str:
        """The column :meth:`top` ranks by when ``by`` is not given (``default_by`` unless an instance names it)."""
        return self.default_by

    # -- rows by label ------------------------------------------------------------------------------

    def _row(self, index: int) -> Any:
        raise NotImplementedError

    def _index(self, label: Any) -> int:
        """Position of ``label`` (a label object or its text) in :attr:`labels`; LabelError otherwise."""
        text = label if isinstance(label, str) else str(label)
        labels = list(self.labels)
        try:
            return labels.index(text)
        except ValueError:
            ex = labels if len(labels) <= 6 else labels[:3] + ["…"] + labels[-3:]
            raise LabelError(
                f"label={label!r} is not a row of this {type(self).__name__}; "
                f"its {len(labels)} rows look like {ex} (see .labels)"
            ) from None

    def __getitem__(self, label: Any) -> Any:
        return self._row(self._index(label))

    def __contains__(self, label: Any) -> bool:
        try:
            self._index(label)
        except LabelError:
            return False
        return True

    # -- tables ----------------------------------------------------------------------------------------

    @on_host
    def to_dataframe(self) -> pd.DataFrame:
        raise NotImplementedError

    @on_host
    def save(self, path: Any) -> Any:
        """Write the result to one ``.safetensors`` file (tensors + JSON); reads a host copy."""
        return super().save(path)

    @on_host
    def _ranked_frame(self) -> pd.DataFrame:
        """The table :meth:`top` ranks (``to_dataframe()`` unless a class documents another)."""
        return self.to_dataframe()

    def _default_order(self, df: pd.DataFrame) -> Optional[pd.Index]:
        """The row order of ``top()`` called without ``by``/``absolute``, for a class whose documented
        default is not one column (None: rank by ``default_column``)."""
        return None

    def top(self, k: int = 10, *, by: Optional[str] = None, absolute: Optional[bool] = None) -> pd.DataFrame:
        """The ``k`` rows with the largest ``by`` (its magnitude if ``absolute``), largest first.

        ``by`` defaults to :attr:`default_column`, ``absolute`` to :attr:`default_absolute`; with
        ``absolute=False`` and no ``by``, a class whose default column is a magnitude ranks by its signed
        counterpart :attr:`signed_by` (e.g. ``mean`` for ``mean_abs``).
        """
        return self._rank(self._ranked_frame(), k, by=by, absolute=absolute)

    def _rank(self, df: pd.DataFrame, k: int, *, by: Optional[str], absolute: Optional[bool]) -> pd.DataFrame:
        """``df``'s ``k`` top rows by the rule of :meth:`top` (stable: ties keep table order)."""
        check_positive_int("k", k)
        if absolute is not None:
            check_bool("absolute", absolute)
        order = self._default_order(df) if by is None and absolute is None else None
        if order is None:
            if by is not None:
                col = by
            elif absolute is False and self.signed_by is not None:
                col = self.signed_by
            else:
                col = self.default_column
            if not isinstance(col, str) or col not in df.columns:
                numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]
                raise ArgumentError(
                    f"by={col!r} is not a column of {type(self).__name__}'s table; numeric columns: {numeric}"
                )
            use_abs = self.default_absolute if absolute is None else absolute
            key = df[col].abs() if use_abs else df[col]
            order = key.sort_values(ascending=False, kind="stable", na_position="last").index
        return df.loc[order[:k]].reset_index(drop=True)

    # -- figures ---------------------------------------------------------------------------------------

    @on_host
    def plot(self) -> go.Figure:
        """The result's figure (subclasses add keyword options)."""
        raise NotImplementedError


#: M(clean) and M(corrupt) closer than this fraction of the larger |M| are the same metric: no normalisation
GAP_RTOL = 1e-5


def faithfulness_areas(f: "torch.Tensor", x: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """CPR = ∫ f dx and CMD = ∫ |1 − f| dx of faithfulness curves f [..., k] over the axis x [k], by trapezoids along
    the last axis — the areas edge circuits and pruned attribution graphs both report."""
    return torch.trapezoid(f, x, dim=-1), torch.trapezoid((1 - f).abs(), x, dim=-1)


def metric_gap(
    high: float,
    low: float,
    *,
    warn: Optional[str] = None,
    names: tuple[str, str] = ("M(clean)", "M(corrupt)"),
    undefined: str = "normalized values (value − M(corrupt)) / (M(clean) − M(corrupt))",
) -> float:
    """``high − low``, the denominator of every normalised result (M(clean) − M(corrupt) for patching, M(all) − M(∅)
    for faithfulness of edge circuits and of attribution graphs), or NaN when it is not finite or |high − low| ≤
    :data:`GAP_RTOL` · max(|high|, |low|) (the two runs give the same metric). ``warn``: the analysis to name in a
    :class:`interp.MetricGapWarning` given then, with the two values (``names``) and what is ``undefined``. Here, in
    the bottom layer, so that every analysis package normalises by this one definition."""
    gap = high - low
    if math.isfinite(gap) and abs(gap) > GAP_RTOL * max(abs(high), abs(low)):
        return gap
    if warn is not None and math.isfinite(high) and math.isfinite(low):
        warn_user(
            f"{warn}: {names[0]} = {high:.6g} and {names[1]} = {low:.6g} are the same (difference {gap:.3g}), so "
            f"{undefined} are undefined (NaN); the two runs must give different metrics — e.g. corrupt prompts "
            "that change what the metric reads, not the clean prompts again",
            MetricGapWarning,
        )
    return math.nan


def faithfulness_curves(
    values: "torch.Tensor",
    full: "torch.Tensor",
    empty: "torch.Tensor",
    x: "torch.Tensor",
    *,
    warn: Optional[Sequence[str]] = None,
    names: tuple[str, str] = ("M(all)", "M(none)"),
    undefined: str = "faithfulness values (M(C) − M(∅)) / (M(all) − M(∅))",
) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """(f, CPR, CMD) of n curves: f [n, k] = (M(C) − M(∅)) / (M(all) − M(∅)) from the means ``values`` [n, k] and
    ``full``, ``empty`` [n] (each curve's gap by :func:`metric_gap`: NaN where M(all) ≈ M(∅); ``warn``: the analysis
    to name for each curve in that warning), and their areas over ``x`` [k] (:func:`faithfulness_areas`). The one
    computation of an in-process curve and of a curve merged from shards."""
    f = torch.empty_like(values)
    for i in range(values.shape[0]):
        gap = metric_gap(
            float(full[i]), float(empty[i]), warn=None if warn is None else warn[i], names=names, undefined=undefined
        )
        f[i] = (values[i] - empty[i]) / gap
    cpr, cmd = faithfulness_areas(f, x)
    return f, cpr, cmd


def prompt_alias(prompt: Any, batch: Any, *, default: Any = 0, owner: str = "") -> tuple[Any, str]:
    """The prompt row from ``prompt=`` or its deprecated spelling ``batch=``, and the name that was used
    (so error messages name the argument the caller wrote)."""
    if batch is None:
        return (default if prompt is None else prompt), "prompt"
    if prompt is not None:
        raise ArgumentError(f"{owner}: give prompt= (batch= is its deprecated spelling), not both")
    warnings.warn(f"{owner}(batch=...) is deprecated; use prompt=", DeprecationWarning, stacklevel=3)
    return batch, "batch"
