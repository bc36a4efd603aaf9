"""The tables of the report pages; the page itself is :class:`interp.plots.Page` (self-contained: plotly.js, the
style sheet and every figure inline, nothing loaded from the network)."""

from __future__ import annotations

from typing import Any, Sequence

from interp.plots import Page
from interp.plots.internal import esc

__all__ = ["Page", "data_table", "kv_table"]


def kv_table(rows: Sequence[tuple[str, Any]]) -> str:
    """A two-column key/value table (both escaped)."""
    return '<table class="kv">' + "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows) + "</table>"


def data_table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[bool] = ()) -> str:
    """A table; numeric columns are escaped and right-aligned, others are inserted as given HTML."""
    numeric = list(numeric) + [False] * (len(header) - len(numeric))
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{esc(c)}</td>' if numeric[i] else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<table class="data"><tr>{head}</tr>{body}</table>'
