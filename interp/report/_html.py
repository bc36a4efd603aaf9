"""A self-contained HTML page of figures and tables (the report's index.html).

plotly.js is inlined once in a ``<script>`` element (``plotly.offline.get_plotlyjs()``), each
figure is a ``<div>`` drawn by an inline ``Plotly.newPlot`` call, and the style sheet is
inline too: the page loads nothing from the network (no CDN, no MathJax, no web fonts).
Links to the PNG/SVG copies are relative, so the folder can be moved or zipped as a whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from interp.plots import compact_figure, compact_runtime, compact_status, esc

__all__ = ["Page", "data_table", "kv_table"]

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; color: #222;
       background: #fafafa; }
header { background: #1d3557; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header p { margin: 2px 0; opacity: 0.95; }
header .tok { background: rgba(255, 255, 255, 0.16); color: #fff; }
header nav a { color: #cfe3ff; }
main { max-width: 1200px; margin: 0 auto; padding: 12px 32px 48px 32px; }
section { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; padding: 14px 20px; margin: 18px 0;
          overflow-x: auto; }
h2 { font-size: 18px; margin: 4px 0 8px 0; color: #1d3557; }
p.note { color: #555; font-size: 14px; margin: 4px 0 10px 0; }
table.kv, table.data { border-collapse: collapse; font-size: 14px; margin: 6px 0; }
table.kv td, table.data td, table.data th { border: 1px solid #ddd; padding: 3px 10px; text-align: left; }
table.data th { background: #eef2f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; font-family: ui-monospace, Menlo, monospace; }
code, .tok { font-family: ui-monospace, Menlo, Consolas, monospace; background: #f2f2f2; padding: 0 3px; }
.files { font-size: 13px; color: #555; }
.grid2 { display: flex; flex-wrap: wrap; gap: 18px; }
.bad { color: #b2182b; } .good { color: #2166ac; }
nav a { margin-right: 12px; font-size: 13px; }
"""

#: a wide page: the column fills the window (figures without a fixed width resize to it)
_WIDE = "main { max-width: none; padding: 12px 24px 48px 24px; }\n"


@dataclass
class Page:
    """Sections of HTML (figures, tables, text) assembled into one self-contained page.

    ``compact=True``: plotly.js and each figure are gzip-compressed in the page and drawn by the browser
    (:mod:`interp.plots._compact`; ~2 MB instead of 4.8 MB + the figures' JSON). ``wide=True``: the page's
    column takes the window's whole width (for figures with many layers) instead of at most 1,200 px."""

    title: str
    subtitle: str = ""
    parts: list[str] = field(default_factory=list)
    toc: list[tuple[str, str]] = field(default_factory=list)
    compact: bool = False
    wide: bool = False
    _n_fig: int = 0

    def section(
        self, title: str, body: str, *, anchor: Optional[str] = None, note: str = "", note_below: bool = False
    ) -> None:
        """Append a section; ``note_below`` puts the note after the body (a figure that must open in view)."""
        anchor = anchor or f"s{len(self.parts)}"
        self.toc.append((anchor, title))
        note_html = f'<p class="note">{note}</p>' if note else ""
        above, below = ("", note_html) if note_below else (note_html, "")
        self.parts.append(f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{above}{body}{below}</section>')

    def figure(self, fig: go.Figure, *, files: Sequence[str] = ()) -> str:
        """A figure's div + inline script (no plotly.js; the page inlines it once)."""
        self._n_fig += 1
        div_id = f"fig{self._n_fig}"
        if self.compact:
            return compact_figure(fig, div_id) + self._links(files)
        # "</" could close the <script> element early if a token contains "</script>"
        spec = fig.to_json().replace("</", "<\\/")
        config = json.dumps({"displaylogo": False, "responsive": True})
        w, h = fig.layout.width or 900, fig.layout.height or 500
        return (
            f'<div id="{div_id}" style="width:{int(w)}px;max-width:100%;height:{int(h)}px"></div>'
            f'<script>(function(){{var s={spec};Plotly.newPlot("{div_id}", s.data, s.layout, {config});}})();'
            "</script>"
            f"{self._links(files)}"
        )

    @staticmethod
    def _links(files: Sequence[str]) -> str:
        if not files:
            return ""
        return (
            '<div class="files">download: '
            + " · ".join(f'<a href="{esc(f)}">{esc(f.rsplit(".", 1)[-1].upper())}</a>' for f in files)
            + "</div>"
        )

    def render(self) -> str:
        nav = " ".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in self.toc)
        head_js = "" if self.compact else f'<script type="text/javascript">{get_plotlyjs()}</script>'
        status, runtime = (compact_status(), compact_runtime()) if self.compact and self._n_fig else ("", "")
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(self.title)}</title><style>{_CSS}{_WIDE if self.wide else ''}</style>{head_js}</head><body>"
            f"<header><h1>{esc(self.title)}</h1><p>{self.subtitle}</p><nav>{nav}</nav></header>"
            f"<main>{status}{''.join(self.parts)}</main>{runtime}</body></html>\n"
        )


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
