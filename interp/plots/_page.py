"""A self-contained HTML page of figures and tables (the reports' index.html), on the view shell.

plotly.js is inlined once in the page's head (``plotly.offline.get_plotlyjs()``) when the page has a figure, each
figure is a ``<div>`` drawn by an inline ``Plotly.newPlot`` call (``assets/figure.js``), and the style sheet
(``assets/page.css``) is inline too: the page loads nothing from the network (no CDN, no MathJax, no web fonts).
Links to the PNG/SVG copies are relative, so the folder can be moved or zipped as a whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional, Sequence

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from interp.plots._common import esc
from interp.plots._compact import compact_figure, compact_runtime, compact_status
from interp.plots._view import HtmlView, asset, fill

__all__ = ["Page"]

_CONFIG = {"displaylogo": False, "responsive": True}


@dataclass
class Page(HtmlView):
    """Sections of HTML (figures, tables, text) assembled into one self-contained page (:meth:`render`).

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
        js = fill(asset("figure.js"), spec=spec, id=json.dumps(div_id), config=json.dumps(_CONFIG))
        w, h = fig.layout.width or 900, fig.layout.height or 500
        return (
            f'<div id="{div_id}" style="width:{int(w)}px;max-width:100%;height:{int(h)}px"></div>'
            f"<script>{js}</script>{self._links(files)}"
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

    def _head(self) -> str:
        """The style sheet, and plotly.js when a figure is drawn by it."""
        css = asset("page.css") + (asset("page_wide.css") if self.wide else "")
        plotly_js = (
            f'<script type="text/javascript">{get_plotlyjs()}</script>' if self._n_fig and not self.compact else ""
        )
        return f"<style>{css}</style>{plotly_js}"

    def _body(self) -> str:
        links = " ".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in self.toc)
        nav = f"<nav>{links}</nav>" if self.toc else ""
        status, runtime = (compact_status(), compact_runtime()) if self.compact and self._n_fig else ("", "")
        return (
            f"<header><h1>{esc(self.title)}</h1><p>{self.subtitle}</p>{nav}</header>"
            f"<main>{status}{''.join(self.parts)}</main>{runtime}"
        )

    def render(self) -> str:
        """The whole page (:meth:`to_html_page`)."""
        return self.to_html_page()
