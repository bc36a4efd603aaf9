"""Shared helpers of the figure builders: array conversion, label parsing, colour scales, hover text.

Nothing here draws a whole figure; every builder in :mod:`interp.plots` returns a plotly
``go.Figure`` and never shows it. Figures get an explicit width and height so that static
exports (PNG/SVG/PDF) are the same size on every machine.
"""

from __future__ import annotations

import html
import math
from typing import Any, Optional, Sequence

import numpy as np
import torch

from interp._validate import check_index as _check_index
from interp.errors import ArgumentError, LabelError, ShapeError
from interp.labels import Head

__all__ = [
    "DIVERGING",
    "KIND_COLOURS",
    "as_numpy",
    "check_index",
    "closure_text",
    "esc",
    "fmt",
    "head_grid",
    "head_grid_shape",
    "parse_head",
    "quoted",
    "require_attr",
    "token_label",
    "unique_token_labels",
]

#: Diverging colour scale used for signed quantities (centred at 0 with ``zmid=0``):
#: negative red, positive blue, as in transformer-lens / Neel Nanda's plots.
DIVERGING = "RdBu"


def diverging_heatmap(z: Any, hover: Any, zmax: float, colorbar: dict, **kw: Any) -> Any:
    """A ``go.Heatmap`` of signed values on :data:`DIVERGING`, centred at 0 over [−zmax, zmax], hover text per cell;
    ``kw`` (x, y, name, ...) passed through."""
    import plotly.graph_objects as go

    return go.Heatmap(
        z=z,
        colorscale=DIVERGING,
        zmid=0.0,
        zmin=-zmax,
        zmax=zmax,
        hovertext=hover,
        hoverinfo="text",
        colorbar=colorbar,
        **kw,
    )


#: Colours of the Q/K/V composition kinds (also used for their legend entries).
KIND_COLOURS = {"Q": "#1f77b4", "K": "#d62728", "V": "#2ca02c"}


def parse_head(label: Any) -> Optional[tuple[int, int]]:
    """``'L3.H5'`` (or a :class:`~interp.labels.Head`) -> (3, 5); any other label -> None."""
    if not isinstance(label, (str, Head)):
        return None
    try:
        head = Head.parse(label)
    except LabelError:
        return None
    return head.layer, head.head


def as_numpy(x: Any, *, name: str, ndim: Optional[int] = None, dtype: Any = np.float64) -> np.ndarray:
    """A tensor / array / nested list as a numpy array (detached, on CPU), shape-checked."""
    if torch.is_tensor(x):
        t = x.detach().cpu()
        if t.is_complex():
            arr = t.resolve_conj().numpy()
        else:
            arr = t.to(torch.float64 if dtype is np.float64 else t.dtype).numpy()
    else:
        try:
            arr = np.asarray(x)
        except Exception as e:  # noqa: BLE001 - anything that is not array-like
            raise ShapeError(f"{name} must be a tensor or array, got {type(x).__name__}") from e
    if ndim is not None and arr.ndim != ndim:
        raise ShapeError(f"{name} must have {ndim} dimensions, got shape {tuple(arr.shape)}")
    if arr.dtype.kind in "fc" or dtype is None:
        return arr if dtype is None or arr.dtype.kind == "c" else arr.astype(dtype, copy=False)
    if arr.dtype.kind in "iub":
        return arr.astype(dtype, copy=False)
    raise ShapeError(f"{name} must hold numbers, got dtype {arr.dtype}")


def require_attr(obj: Any, attrs: Sequence[str], *, name: str, expected: str) -> None:
    """Raise ArgumentError unless ``obj`` has every attribute in ``attrs`` (duck typing)."""
    missing = [a for a in attrs if not hasattr(obj, a)]
    if missing:
        raise ArgumentError(f"{name} is a {type(obj).__name__} without {missing}; expected {expected}")


def check_index(value: Any, size: int, *, name: str, what: str) -> int:
    """A python int in [-size, size) normalised to [0, size) (:func:`interp._validate.check_index`)."""
    return _check_index(name, value, size, what=what)


def head_grid_shape(labels: Sequence[str], obj: Any = None) -> tuple[int, int]:
    """(n_layers, n_heads) from ``obj.n_layers/.n_heads`` if present, else from the head labels."""
    n_l = getattr(obj, "n_layers", None)
    n_h = getattr(obj, "n_heads", None)
    if isinstance(n_l, int) and isinstance(n_h, int) and n_l > 0 and n_h > 0:
        return n_l, n_h
    heads = [p for p in map(parse_head, labels) if p is not None]
    if not heads:
        return 0, 0
    return max(l for l, _ in heads) + 1, max(h for _, h in heads) + 1


def head_grid(labels: Sequence[str], values: Any, n_l: int, n_h: int) -> tuple[np.ndarray, list[tuple[str, float]]]:
    """The head terms as a [n_layers, n_heads] grid (NaN where absent) and every other term as (label, value)."""
    grid = np.full((n_l, n_h), np.nan)
    side: list[tuple[str, float]] = []
    for lab, val in zip(labels, values):
        lh = parse_head(lab)
        if lh is not None and lh[0] < n_l and lh[1] < n_h:
            grid[lh] = val
        else:
            side.append((lab, float(val)))
    return grid, side


def token_label(tok: str) -> str:
    """A token as it reads on an axis: spaces made visible, newlines escaped."""
    return tok.replace("\n", "\\n").replace(" ", "␣") if tok.strip() == "" else tok.replace("\n", "\\n")


def quoted(tok: str) -> str:
    """A token for titles and hover text: quoted, so leading spaces show (“ Mary”), HTML-escaped."""
    return "“" + esc(tok.replace("\n", "\\n")) + "”"


def unique_token_labels(tokens: Sequence[str]) -> list[str]:
    """Axis labels ``'i:tok'``: categorical axes merge equal strings, so positions are prefixed."""
    return [f"{i}:{token_label(t)}" for i, t in enumerate(tokens)]


def fmt(x: Optional[float], digits: int = 4) -> str:
    """A number for hover text and tables (no 'nan' surprises; None and NaN show as —)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}g}"


def closure_text(absolute: Any, relative: Any = None) -> str:
    """``closure error 2.9e-03 absolute (|Σ terms − total|), 1.2e-07 relative`` for figure titles."""
    txt = f"closure error {float(absolute):.1e} absolute (|Σ terms − total|)"
    if relative is not None:
        txt += f", {float(relative):.1e} relative"
    return txt


def esc(s: Any) -> str:
    """HTML-escape a value for hover text / report tables."""
    return html.escape(str(s), quote=False)
