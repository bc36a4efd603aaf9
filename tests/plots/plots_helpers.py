"""Independent checkers for exported files: a tiny PNG decoder, headless Chromium, net-log parsing.

Nothing here uses interp: the tests judge interp's files with these.
"""

from __future__ import annotations

import contextlib
import html.parser
import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium_path() -> str | None:
    env = os.environ.get("BROWSER_PATH")
    if env and Path(env).is_file():
        return env
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def decode_png(data: bytes) -> np.ndarray:
    """Pixels [height, width, channels] (uint8) of an 8-bit non-interlaced PNG."""
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    w, h, depth, colour, _, _, interlace = ihdr
    assert depth == 8 and interlace == 0, f"unsupported PNG depth={depth} interlace={interlace}"
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    raw = zlib.decompress(idat)
    stride = w * ch
    rows = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1)
        if f == 0:
            cur = line.copy()
        elif f == 1:  # Sub: running sum per channel
            cur = (np.cumsum(line.reshape(-1, ch).astype(np.int64), axis=0) % 256).astype(np.uint8).ravel()
        elif f == 2:  # Up
            cur = (line.astype(np.int32) + prev).astype(np.uint8)
        else:  # Average / Paeth: sequential along the row
            ln, pv = line.tolist(), prev.tolist()
            out = [0] * stride
            for x in range(stride):
                a = out[x - ch] if x >= ch else 0
                b = pv[x]
                if f == 3:
                    pred = (a + b) >> 1
                else:
                    c = pv[x - ch] if x >= ch else 0
                    pp = a + b - c
                    pa, pb, pc = abs(pp - a), abs(pp - b), abs(pp - c)
                    pred = a if (pa <= pb and pa <= pc) else (b if pb <= pc else c)
                out[x] = (ln[x] + pred) & 0xFF
            cur = np.array(out, dtype=np.uint8)
        rows[y] = cur
        prev = cur
    return rows.reshape(h, w, ch)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    w, h = struct.unpack(">II", data[16:24])
    return w, h


class _Scripts(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        a = dict(attrs)
        if tag in ("script", "img", "iframe") and a.get("src"):
            self.srcs.append(a["src"])
        if tag == "link" and a.get("href"):
            self.links.append(a["href"])


def external_resources(text: str) -> list[str]:
    """Every script/img/iframe src and <link href> in an HTML document."""
    p = _Scripts()
    p.feed(text)
    return p.srcs + p.links


def render_in_chromium(
    url: str, *, width: int = 1200, height: int = 2000, timeout: float = 120
) -> tuple[bytes, list[str]]:
    """Screenshot of ``url`` in headless Chromium (fresh profile) and the http(s) URLs the page requested.

    Requests the browser itself makes (update checks, account probes) carry the initiator
    "not an origin" in the net log and are not the page's; every other http(s) request is.
    """
    chrome = chromium_path()
    assert chrome, "no chromium"
    with tempfile.TemporaryDirectory() as d:
        shot, netlog = Path(d) / "shot.png", Path(d) / "net.json"
        cmd = [
            chrome,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--no-default-browser-check",
            f"--user-data-dir={Path(d) / 'profile'}",
            f"--log-net-log={netlog}",
            "--net-log-capture-mode=Default",
            f"--screenshot={shot}",
            f"--window-size={width},{height}",
            "--virtual-time-budget=10000",
            url,
        ]
        subprocess.run(cmd, check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log = json.loads(netlog.read_text())
        types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
        page_urls = []
        for e in log["events"]:
            if types.get(e["type"]) != "URL_REQUEST_START_JOB":
                continue
            p = e.get("params", {})
            u = p.get("url", "")
            if u.startswith(("http://", "https://", "ws://", "wss://")) and p.get("initiator") != "not an origin":
                page_urls.append(u)
        return shot.read_bytes(), page_urls


def probe_in_chromium(
    url: str, init_script: str, *, timeout: float = 120.0, width: int = 1400, height: int = 1000
) -> object:
    """Open ``url`` in headless Chromium (driven over the DevTools protocol by choreographer) with
    ``init_script`` run before the page's own scripts, and return ``window.__probe`` once the page's
    scripts have set it (JSON values only). The measurement is the page's: the script times events with
    ``performance.now()`` inside the page, the polling here only collects the result."""
    import asyncio
    import time as _time

    import choreographer

    chrome = chromium_path()
    assert chrome, "no chromium"

    async def run() -> object:
        async with choreographer.Browser(path=chrome, headless=True) as browser:
            tab = await browser.create_tab("about:blank", width=width, height=height, window=True)
            await tab.send_command("Page.enable")
            await tab.send_command("Page.addScriptToEvaluateOnNewDocument", params={"source": init_script})
            await tab.send_command("Page.navigate", params={"url": url})
            deadline = _time.monotonic() + timeout
            while _time.monotonic() < deadline:
                r = await tab.send_command(
                    "Runtime.evaluate",
                    params={
                        "expression": f"(location.href === {json.dumps(url)} && window.__probe !== undefined) ? "
                        "JSON.stringify(window.__probe) : null",
                        "returnByValue": True,
                    },
                )
                value = r.get("result", {}).get("result", {}).get("value")
                if value is not None:
                    return json.loads(value)
                await asyncio.sleep(0.05)
            raise TimeoutError(f"the page {url} set no window.__probe within {timeout} s")

    return asyncio.run(run())


#: An init script for :func:`probe_in_chromium` that times the first ``Plotly.newPlot`` of a page: it
#: wraps plotly.js's entry point when the page defines ``window.Plotly`` and records, in ms since the
#: navigation started, when ``newPlot`` was called and when the figure emitted ``plotly_afterplot``
#: (plotly.js emits it in a promise callback after drawing, so a listener attached right after the call
#: sees it), plus the number of SVG paths drawn.
TIME_NEWPLOT = """
(function () {
  Object.defineProperty(window, "Plotly", {configurable: true, set: function (P) {
    Object.defineProperty(window, "Plotly", {value: P, writable: true, configurable: true});
    var orig = P.newPlot;
    P.newPlot = function (gd) {
      var el = typeof gd === "string" ? document.getElementById(gd) : gd;
      var start = performance.now();
      var out = orig.apply(this, arguments);
      el.on("plotly_afterplot", function () {
        if (window.__probe === undefined) {
          window.__probe = {start: start, afterplot: performance.now(),
                            paths: el.querySelectorAll("path").length,
                            traces: el.querySelectorAll("g.trace").length};
        }
      });
      return out;
    };
  }});
})();
"""


@contextlib.contextmanager
def offline_page(chrome: str, *, width: int, height: int = 1000) -> Iterator[tuple[Any, list[str], list[str]]]:
    """A Playwright page in the system Chromium (``chrome``) whose every request but the page's own file and inline
    data is refused: yields (page, attempted URLs, page errors); the browser is closed on the way out."""
    from playwright.sync_api import sync_playwright

    attempted: list[str] = []
    errors: list[str] = []

    def refuse(route: Any) -> Any:  # the page may read its own file and inline data, nothing else
        url = route.request.url
        if url.startswith(("file:", "data:", "blob:")):
            return route.continue_()
        attempted.append(url)
        return route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chrome, args=["--no-sandbox"])
        try:
            ctx = browser.new_context(viewport={"width": width, "height": height})
            ctx.route("**/*", refuse)
            page = ctx.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page, attempted, errors
        finally:
            browser.close()
