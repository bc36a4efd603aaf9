"""Compact self-contained HTML: plotly.js and the figures gzip-compressed inside the page.

plotly.js alone is 4.8 MB, so a page that inlines it as text can never be small. A compact page holds
plotly.js and each figure's JSON gzip-compressed and base64-encoded in ``<script type="application/gzip">``
blocks (about 2.0 MB for plotly.js); a short inline script decompresses them with the browser's own
``DecompressionStream('gzip')`` (Chrome/Edge 80+, Firefox 113+, Safari 16.4+), runs plotly.js and draws
each figure (``interp/plots/assets/compact.js``). Nothing is fetched: no CDN, no MathJax, no fonts. Where the
browser lacks ``DecompressionStream`` the page says so instead of staying blank (export without ``compact`` then).
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import json
from typing import Sequence

import plotly.graph_objects as go

from interp.plots._view import asset, fill

__all__ = ["compact_figure", "compact_figures_html", "compact_runtime", "compact_status", "gzip_b64"]

_CONFIG = {"displaylogo": False, "responsive": True}


def gzip_b64(data: bytes) -> str:
    """``data`` gzip-compressed (mtime 0, so the output is reproducible) and base64-encoded."""
    return base64.b64encode(gzip.compress(data, compresslevel=9, mtime=0)).decode("ascii")


@functools.lru_cache(maxsize=1)
def _plotlyjs_block() -> str:
    from plotly.offline import get_plotlyjs

    return gzip_b64(get_plotlyjs().encode())


def compact_figure(fig: go.Figure, key: str) -> str:
    """A figure's ``<div>`` and its gzip-compressed JSON block (drawn by :func:`compact_runtime`'s script).

    ``key`` must be unique in the page (it names the div and the data block)."""
    w, h = fig.layout.width, fig.layout.height
    style = (f"width:{int(w)}px;max-width:100%;" if w else "") + f"height:{int(h) if h else 500}px"
    return (
        f'<div class="interp-figure" id="interp-fig-{key}" data-spec="interp-spec-{key}" style="{style}"></div>'
        f'<script type="application/gzip" id="interp-spec-{key}">{gzip_b64(fig.to_json().encode())}</script>'
    )


def compact_status() -> str:
    """The line that says the figures are being drawn (or why they cannot be); place it before them."""
    return '<p id="interp-status" style="font-family:sans-serif;color:#555">Drawing the figures…</p>'


def compact_runtime() -> str:
    """plotly.js (compressed) and the script that draws every compact figure of the page; place it last."""
    loader = fill(asset("compact.js"), config=json.dumps(_CONFIG))
    return f'<script type="application/gzip" id="interp-plotlyjs">{_plotlyjs_block()}</script><script>{loader}</script>'


def compact_figures_html(figs: Sequence[go.Figure], *, title: str = "interp figures") -> str:
    """One self-contained page drawing ``figs`` from gzip-compressed plotly.js and figure JSON."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head><body>\n{compact_status()}\n"
        + "\n".join(compact_figure(fig, str(i)) for i, fig in enumerate(figs))
        + f"\n{compact_runtime()}\n</body></html>\n"
    )
