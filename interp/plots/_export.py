"""export(figure_or_result, path): write a figure as .html, .png, .svg, .pdf or .json, atomically.

* ``.html`` — self-contained: plotly.js is inlined (``include_plotlyjs=True``), no MathJax,
  so the file opens with no network access. ``compact=True`` gzip-compresses plotly.js and the
  figures inside the page (about 2 MB instead of 4.8 MB + the figures; :mod:`interp.plots._compact`).
  HTML views (objects with ``to_html_page()``, e.g. the attention view) are written as their page.
* ``.png`` / ``.svg`` / ``.pdf`` — rendered by kaleido 1.x in a headless Chrome/Chromium. The
  browser is found from ``BROWSER_PATH``, kaleido's own download (``kaleido_get_chrome``) or
  the usual names (``chromium``, ``chromium-browser``, ``google-chrome``) on PATH. Starting it
  takes seconds, so one :class:`Exporter` keeps a single browser open (one asyncio loop in a
  daemon thread, one kaleido tab) and renders every figure through it. ``export`` without an
  ``exporter=`` uses a shared one, started on the first static export and closed at exit;
  use ``with Exporter() as ex:`` to control its lifetime yourself.
* ``.json`` — the plotly figure JSON, or for graph results (:class:`CompositionGraph`,
  anything with ``to_json_dict()``) their nodes and edges.

Every file is written to a temporary file in the target directory and moved into place with
``os.replace``, so a failed export never leaves a partial file. Bad input raises
:class:`~interp.errors.ExportError` (unwritable path, no browser, figure too large for a
static image) or :class:`~interp.errors.ArgumentError` (unknown suffix, empty result).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Optional, Union

import plotly.graph_objects as go

from interp._io import write_atomic
from interp._validate import check_bool, is_real
from interp.errors import ArgumentError, ExportError
from interp.plots._compact import compact_figures_html

__all__ = ["Exporter", "export", "to_figure", "find_browser", "SUFFIXES"]

log = logging.getLogger(__name__)

SUFFIXES = (".html", ".png", ".svg", ".pdf", ".json")
STATIC = (".png", ".svg", ".pdf")
#: Figures whose JSON exceeds this are refused for static export (the browser would take
#: minutes or run out of memory); HTML has no such limit.
MAX_STATIC_JSON_BYTES = 40_000_000
#: Largest static image, in output pixels (width × height × scale²).
MAX_STATIC_PIXELS = 60_000_000
DEFAULT_SIZE = (900, 600)

_INSTALL_HINT = (
    "install one with `sudo apt-get install chromium` (Debian/Ubuntu), or run `kaleido_get_chrome` "
    "(downloads a Chrome for kaleido), or point BROWSER_PATH at a Chrome/Chromium executable; "
    "HTML export (.html) needs no browser"
)


def to_figure(obj: Any, *, name: str = "figure_or_result") -> go.Figure:
    """A plotly Figure from a Figure, a figure dict, or a result with ``.plot()``."""
    if isinstance(obj, go.Figure):
        fig = obj
    elif isinstance(obj, dict) and "data" in obj:
        fig = go.Figure(obj)
    elif callable(getattr(obj, "plot", None)):
        fig = obj.plot()
        if not isinstance(fig, go.Figure):
            raise ArgumentError(f"{name}.plot() returned {type(fig).__name__}, not a plotly Figure")
    else:
        raise ArgumentError(
            f"{name} is a {type(obj).__name__}; expected a plotly Figure, a figure dict, or an interp result "
            "with .plot()"
        )
    if len(fig.data) == 0:
        raise ArgumentError(f"{name} is empty: the figure has no traces, nothing to export")
    return fig


def find_browser(browser_path: Optional[Union[str, Path]] = None) -> str:
    """The Chrome/Chromium executable kaleido will drive; ExportError (with install hints) if none."""
    explicit = browser_path or os.environ.get("BROWSER_PATH") or None
    if explicit:
        p = Path(explicit)
        if not p.is_file() or not os.access(p, os.X_OK):
            src = "browser_path" if browser_path else "BROWSER_PATH"
            raise ExportError(f"{src}={str(explicit)!r} is not an executable file; {_INSTALL_HINT}")
        return str(p)
    try:
        from choreographer.browsers.chromium import Chromium

        found = Chromium.find_browser(skip_local=False)
    except Exception:  # noqa: BLE001 - discovery is best effort; fall back to PATH below
        found = None
    found = found or next(
        (
            shutil.which(n)
            for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
            if shutil.which(n)
        ),
        None,
    )
    if not found:
        raise ExportError(f"no Chrome or Chromium found for static export (.png/.svg/.pdf); {_INSTALL_HINT}")
    return str(found)


class Exporter:
    """One headless browser (kaleido 1.x) reused for many static exports.

    ``with Exporter() as ex: ex.export(fig, "a.png"); ex.export(fig2, "b.svg")``. The browser
    starts on the first static export (a few seconds); later figures take a fraction of a
    second. Thread-safe (renders are serialised); ``close()`` stops the browser.
    """

    def __init__(self, *, browser_path: Optional[Union[str, Path]] = None, timeout: float = 90.0) -> None:
        self._browser_path = browser_path
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._kaleido: Any = None
        self.n_rendered = 0

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._kaleido is not None

    def _start(self) -> asyncio.AbstractEventLoop:
        """Open the browser on a fresh event loop thread; returns that loop."""
        path = find_browser(self._browser_path)
        import kaleido  # noqa: PLC0415 - heavy; only needed for static formats

        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="interp-kaleido", daemon=True)
        thread.start()

        async def open_browser() -> Any:
            # mathjax=False: kaleido's default loads MathJax from a CDN; interp never needs it
            k = kaleido.Kaleido(n=1, timeout=self._timeout, mathjax=False, path=path)
            await k.open()
            return k

        try:
            self._kaleido = asyncio.run_coroutine_threadsafe(open_browser(), loop).result(self._timeout)
        except BaseException as e:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()
            raise ExportError(f"could not start the browser {path!r} for static export: {e}; {_INSTALL_HINT}") from e
        self._loop, self._thread = loop, thread
        log.info("started headless browser %s for static export", path)
        return loop

    def close(self) -> None:
        """Stop the browser (safe to call twice)."""
        with self._lock:
            k, loop, thread = self._kaleido, self._loop, self._thread
            self._kaleido = self._loop = self._thread = None
            if loop is None or thread is None:
                return
            try:
                if k is not None:
                    asyncio.run_coroutine_threadsafe(k.close(), loop).result(30)
            except BaseException as e:  # noqa: BLE001 - closing must not raise
                log.warning("closing the export browser failed: %s", e)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
                if not thread.is_alive():
                    loop.close()

    def __enter__(self) -> "Exporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; close() is the real API
        try:
            if self._kaleido is not None:
                self.close()
        except Exception:  # noqa: BLE001
            pass

    # -- rendering -------------------------------------------------------------------------
    def render(self, fig: go.Figure, fmt: str, *, width: int, height: int, scale: float = 1.0) -> bytes:
        """The bytes of ``fig`` as ``fmt`` ('png' | 'svg' | 'pdf')."""
        failure: Optional[BaseException] = None
        with self._lock:
            loop = self._loop if self._kaleido is not None else None
            if loop is None:
                loop = self._start()
            opts = {"format": fmt, "width": width, "height": height, "scale": scale}
            fut = asyncio.run_coroutine_threadsafe(self._kaleido.calc_fig(fig, opts=opts), loop)
            try:
                data = fut.result(self._timeout + 10)
            except BaseException as e:  # noqa: BLE001 - re-raised below as ExportError
                fut.cancel()
                failure = e
        if failure is not None:
            self.close()  # the tab may be wedged: the next render starts a fresh browser
            if isinstance(failure, KeyboardInterrupt):
                raise failure
            raise ExportError(f"rendering the figure as {fmt} failed: {failure!r}") from failure
        self.n_rendered += 1
        if not data:
            raise ExportError(f"the browser returned an empty {fmt} image")
        return data

    def export(self, figure_or_result: Any, path: Union[str, Path], **kwargs: Any) -> Path:
        """:func:`export` through this browser."""
        return export(figure_or_result, path, exporter=self, **kwargs)


_shared: dict[str, Exporter] = {}
_shared_lock = threading.Lock()


def _shared_exporter() -> Exporter:
    """The process-wide Exporter used when ``export`` gets none (started lazily, closed at exit)."""
    with _shared_lock:
        ex = _shared.get("default")
        if ex is None:
            ex = _shared["default"] = Exporter()
            atexit.register(ex.close)
        return ex


def _check_target(path: Union[str, Path]) -> tuple[Path, str]:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"path={path!r} must be a str or Path")
    p = Path(path).expanduser()
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise ArgumentError(
            f"path={str(path)!r} has suffix {p.suffix or '(none)'!r}; allowed suffixes: {list(SUFFIXES)}"
        )
    if p.is_dir():
        raise ExportError(f"path={str(path)!r} is a directory; give a file name ending in {suffix}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise ExportError(f"cannot write path={str(path)!r}: its directory {str(parent)!r} {what}")
    return p, suffix


def figure_html(fig: go.Figure) -> str:
    """A self-contained HTML page for ``fig`` (plotly.js inlined, no MathJax, no CDN)."""
    return fig.to_html(
        include_plotlyjs=True, include_mathjax=False, full_html=True, config={"displaylogo": False, "responsive": True}
    )


def figures_html(figs: list[go.Figure], *, title: str = "interp figures") -> str:
    """One self-contained HTML page holding several figures that share one inlined plotly.js."""
    import html as _html

    config = {"displaylogo": False, "responsive": True}
    divs = [
        fig.to_html(include_plotlyjs=(i == 0), include_mathjax=False, full_html=False, config=config)
        for i, fig in enumerate(figs)
    ]
    body = "\n".join(f'<div class="interp-figure">{d}</div>' for d in divs)
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{_html.escape(title)}</title></head>'
        f"<body>\n{body}\n</body></html>\n"
    )


def _size(fig: go.Figure, width: Optional[int], height: Optional[int]) -> tuple[int, int]:
    w = width or fig.layout.width or DEFAULT_SIZE[0]
    h = height or fig.layout.height or DEFAULT_SIZE[1]
    for name, v in (("width", w), ("height", h)):
        if not is_real(v) or v <= 0:
            raise ArgumentError(f"{name}={v!r} must be a positive number of pixels")
    return int(w), int(h)


def export(
    figure_or_result: Any,
    path: Union[str, Path],
    *,
    exporter: Optional[Exporter] = None,
    width: Optional[int] = None,
    height: Optional[int] = None,
    scale: float = 1.0,
    compact: bool = False,
) -> Path:
    """Write a figure or result to ``path``; the format comes from the suffix (see module docs).

    ``figure_or_result``: a plotly Figure, a figure dict, or any interp result with
    ``.plot()`` (graph results with ``to_json_dict()`` export their nodes/edges as .json), or an
    HTML view with ``to_html_page()`` (e.g. :class:`interp.plots.AttentionView`; .html only).
    ``width``/``height``/``scale`` apply to static images (default: the figure's own size).
    A list or tuple of figures/results exports to one ``.html`` page that shares a single inlined
    plotly.js (or to one ``.json`` file holding a list of figure JSONs).
    ``compact=True`` (.html): plotly.js and the figures gzip-compressed in the page and decompressed by
    the browser (about 2 MB instead of 4.8 MB + the figure; :mod:`interp.plots._compact`).
    Returns the written path.
    """
    p, suffix = _check_target(path)
    check_bool("compact", compact)
    if callable(getattr(figure_or_result, "to_html_page", None)) and not isinstance(figure_or_result, go.Figure):
        if suffix != ".html":
            raise ArgumentError(
                f"path={str(path)!r}: a {type(figure_or_result).__name__} is an HTML view; export it to .html"
            )
        write_atomic(p, figure_or_result.to_html_page().encode())
        return p
    if isinstance(figure_or_result, (list, tuple)):
        if not figure_or_result:
            raise ArgumentError("figure_or_result is an empty list: give at least one figure")
        figs = [to_figure(f, name=f"figure_or_result[{i}]") for i, f in enumerate(figure_or_result)]
        if suffix == ".html":
            page = compact_figures_html(figs, title=p.stem) if compact else figures_html(figs, title=p.stem)
            write_atomic(p, page.encode())
        elif suffix == ".json":
            write_atomic(p, ("[" + ",".join(f.to_json() for f in figs) + "]").encode())
        else:
            raise ArgumentError(
                f"path={str(path)!r}: a list of {len(figs)} figures exports to .html (one page) or "
                f".json; export each figure to {suffix} separately"
            )
        return p
    if suffix == ".json" and callable(getattr(figure_or_result, "to_json_dict", None)):
        payload = figure_or_result.to_json_dict()
        if not payload.get("nodes") and not payload.get("edges"):
            raise ArgumentError("figure_or_result is empty: the graph has no nodes or edges, nothing to export")
        write_atomic(p, json.dumps(payload, indent=2).encode())
        return p
    fig = to_figure(figure_or_result)
    if suffix == ".json":
        write_atomic(p, fig.to_json().encode())
    elif suffix == ".html":
        write_atomic(p, (compact_figures_html([fig], title=p.stem) if compact else figure_html(fig)).encode())
    else:
        if not is_real(scale) or not 0 < scale <= 10:
            raise ArgumentError(f"scale={scale!r} must be a number in (0, 10]")
        w, h = _size(fig, width, height)
        if w * h * scale * scale > MAX_STATIC_PIXELS:
            raise ExportError(
                f"figure of {w}×{h} px at scale {scale} is too large for static export "
                f"(limit {MAX_STATIC_PIXELS / 1e6:.0f} Mpx); export to .html instead or make it smaller"
            )
        n_bytes = len(fig.to_json())
        if n_bytes > MAX_STATIC_JSON_BYTES:
            raise ExportError(
                f"figure holds {n_bytes / 1e6:.0f} MB of data, too large for static {suffix} export "
                f"(limit {MAX_STATIC_JSON_BYTES / 1e6:.0f} MB); export to .html instead or plot fewer "
                "points"
            )
        ex = exporter if exporter is not None else _shared_exporter()
        data = ex.render(fig, suffix[1:], width=w, height=h, scale=scale)
        write_atomic(p, data)
    log.debug("exported %s", p)
    return p
