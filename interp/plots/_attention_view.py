"""An interactive attention view: hover a token to see where each chosen head attends from it and to it.

For a head's pattern A^h[q, k] (how much the query token at q reads from the key token at k), hovering
token i shows, for every chosen head, the row A^h[i, :] ("from i": where i attends) and the column
A^h[:, i] ("to i": which tokens attend to i), each weight written under its token and shading it.
Heads are switched on and off with check boxes; clicking a token pins it.

The view is a small HTML + JavaScript widget with no dependency: the patterns and tokens are inlined
as JSON and the script draws them, so it works in Jupyter (``_repr_html_``, no extension), inside the
HTML report, and as a page of its own (``interp.export(view, "x.html")``), with no network access
(unlike CircuitsVis, which loads its code from a CDN). Tokens are inserted as text, never as HTML, and
the JSON is escaped for a ``<script>`` element, so a token such as ``</script>`` stays a token.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from interp._validate import check_int_range
from interp.errors import ArgumentError
from interp.plots._attention import head_patterns

__all__ = ["AttentionView", "attention_view"]

#: Largest number of tokens the view inlines (the data grows as heads × tokens²).
MAX_TOKENS = 512

_counter = itertools.count()

_CSS = """
#ID { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 13px; color: #222; }
#ID .ia-controls { margin: 4px 0 8px 0; }
#ID .ia-controls label { margin-right: 10px; white-space: nowrap; cursor: pointer; }
#ID .ia-tokens { line-height: 2.1; margin-bottom: 8px; }
#ID .ia-tok { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre; padding: 1px 3px; margin: 1px;
              border: 1px solid #ccc; border-radius: 3px; cursor: pointer; background: #fff; }
#ID .ia-tok.ia-active { border-color: #1d3557; box-shadow: 0 0 0 2px #1d3557 inset; }
#ID .ia-tok.ia-pinned { border-color: #b2182b; box-shadow: 0 0 0 2px #b2182b inset; }
#ID .ia-hint { color: #666; }
#ID .ia-head { margin: 6px 0 10px 0; }
#ID .ia-head-name { font-weight: 600; color: #1d3557; }
#ID .ia-row { display: flex; flex-wrap: wrap; align-items: flex-start; margin: 2px 0; }
#ID .ia-dir { width: 88px; color: #555; padding-top: 3px; flex: none; }
#ID .ia-cell { display: inline-flex; flex-direction: column; align-items: center; margin: 1px; padding: 1px 3px;
               border-radius: 3px; border: 1px solid #e3e3e3; min-width: 22px; }
#ID .ia-cell .ia-t { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre; }
#ID .ia-cell .ia-w { font-size: 10px; color: #333; font-variant-numeric: tabular-nums; }
#ID .ia-cell.ia-none { color: #bbb; }
"""

_JS = """
(function () {
  var D = DATA, root = document.getElementById(D.id);
  if (!root) return;
  var nq = D.n_query, nk = D.tokens.length, off = nk - nq, pinned = null, shown = null;
  var on = D.heads.map(function () { return true; });
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function show(tok) { return tok === "" ? "\\u2205" : tok.replace(/\\n/g, "\\\\n"); }
  var controls = root.querySelector(".ia-controls"), strip = root.querySelector(".ia-tokens"),
      detail = root.querySelector(".ia-detail");
  D.heads.forEach(function (h, i) {
    var lab = el("label"), box = el("input");
    box.type = "checkbox"; box.checked = true; box.setAttribute("data-head", i);
    box.addEventListener("change", function () { on[i] = box.checked; render(shown); });
    lab.appendChild(box); lab.appendChild(document.createTextNode(" " + h));
    controls.appendChild(lab);
  });
  var spans = D.tokens.map(function (t, i) {
    var s = el("span", "ia-tok", show(t));
    s.setAttribute("data-pos", i); s.tabIndex = 0; s.title = "position " + i;
    s.addEventListener("mouseover", function () { if (pinned === null) render(i); });
    s.addEventListener("focus", function () { if (pinned === null) render(i); });
    s.addEventListener("click", function () {
      if (pinned !== null) spans[pinned].classList.remove("ia-pinned");
      pinned = pinned === i ? null : i;
      if (pinned !== null) s.classList.add("ia-pinned");
      render(i);
    });
    strip.appendChild(s); strip.appendChild(document.createTextNode(" "));
    return s;
  });
  function cell(tok, w, pos) {
    var c = el("span", "ia-cell");
    c.setAttribute("data-pos", pos);
    c.appendChild(el("span", "ia-t", show(tok)));
    if (w === null) { c.classList.add("ia-none"); c.appendChild(el("span", "ia-w", "\\u00b7")); return c; }
    c.setAttribute("data-weight", w);
    c.appendChild(el("span", "ia-w", w.toFixed(3)));
    c.style.background = "rgba(33, 102, 172, " + Math.min(1, w).toFixed(3) + ")";
    if (w > 0.55) c.style.color = "#fff", c.lastChild.style.color = "#fff";
    return c;
  }
  function render(i) {
    shown = i;
    spans.forEach(function (s, j) { s.classList.toggle("ia-active", j === i); });
    detail.textContent = "";
    if (i === null) { detail.appendChild(el("span", "ia-hint", "Hover a token (click to pin it).")); return; }
    D.heads.forEach(function (h, hi) {
      if (!on[hi]) return;
      var box = el("div", "ia-head"), A = D.patterns[hi];
      box.setAttribute("data-head", hi);
      box.appendChild(el("div", "ia-head-name", h));
      var from = el("div", "ia-row ia-from"), to = el("div", "ia-row ia-to");
      from.appendChild(el("span", "ia-dir", "from " + show(D.tokens[i]) + " \\u2192"));
      to.appendChild(el("span", "ia-dir", "to " + show(D.tokens[i]) + " \\u2190"));
      for (var k = 0; k < nk; k++) {
        from.appendChild(cell(D.tokens[k], i - off >= 0 ? A[i - off][k] : null, k));
      }
      for (var q = 0; q < nk; q++) {
        to.appendChild(cell(D.tokens[q], q - off >= 0 ? A[q - off][i] : null, q));
      }
      box.appendChild(from); box.appendChild(to);
      detail.appendChild(box);
    });
  }
  render(nk - 1);  // start on the last token: where the prediction is made
})();
"""


def _script_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and line separators escaped."""
    text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@dataclass(frozen=True, eq=False)
class AttentionView:
    """A self-contained interactive attention view (HTML + inline JavaScript; see the module docstring).

    ``patterns`` [n_heads, query_pos, key_pos] (the query positions are the last ``query_pos`` tokens),
    ``heads`` a label per pattern, ``str_tokens`` the key tokens. Shown by Jupyter through
    :meth:`_repr_html_`; :meth:`to_html` is the fragment, :meth:`to_html_page` a whole page
    (``interp.export(view, "x.html")`` writes it).
    """

    patterns: np.ndarray = field(repr=False)
    heads: list[str]
    str_tokens: list[str] = field(repr=False)
    title: str = "Attention"
    digits: int = 4

    def _payload(self, uid: str) -> dict[str, Any]:
        p = np.round(self.patterns.astype(np.float64), self.digits)
        return {
            "id": uid,
            "heads": list(self.heads),
            "tokens": list(self.str_tokens),
            "n_query": int(p.shape[1]),
            "patterns": p.tolist(),
        }

    def to_html(self) -> str:
        """The widget as an HTML fragment (a ``<div>``, its ``<style>`` and ``<script>``); no external resource."""
        digest = hashlib.sha1(self.patterns.tobytes() + "\0".join([*self.heads, *self.str_tokens]).encode()).hexdigest()
        uid = f"interp-attn-{digest[:10]}-{next(_counter)}"
        css = _CSS.replace("#ID", f"#{uid}")
        js = _JS.replace("DATA", _script_json(self._payload(uid)), 1)
        n = len(self.str_tokens)
        return (
            f'<div id="{uid}" class="interp-attention-view"><style>{css}</style>'
            f'<div class="ia-title"><b>{html.escape(self.title)}</b> '
            f'<span class="ia-hint">· {len(self.heads)} heads, {n} tokens · hover a token: where each head '
            f"attends from it (→) and which tokens attend to it (←)</span></div>"
            '<div class="ia-controls"></div><div class="ia-tokens"></div><div class="ia-detail"></div>'
            f"</div><script>{js}</script>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_html_page(self) -> str:
        """A whole HTML page holding the view (what ``interp.export(view, "x.html")`` writes)."""
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title></head><body>\n{self.to_html()}\n</body></html>\n"
        )


def attention_view(
    patterns: Any,
    str_tokens: Optional[Sequence[str]] = None,
    *,
    heads: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    digits: int = 4,
) -> AttentionView:
    """An interactive attention view of ``patterns`` (see the module docstring).

    ``patterns``: an :class:`interp.stream.AttentionPatterns` (its ``patterns``, ``labels`` and
    ``str_tokens`` are read) or a [n_heads, query_pos, key_pos] (or [query_pos, key_pos]) tensor;
    ``str_tokens``: the key tokens; ``heads``: a label per pattern; ``digits``: decimals kept per weight.
    """
    p, toks, labels = head_patterns(patterns, str_tokens, heads)
    n, nq, nk = p.shape
    if nk > MAX_TOKENS:
        raise ArgumentError(
            f"patterns has {nk} key positions; the view inlines at most {MAX_TOKENS} tokens "
            "(slice the prompt, or use attention_pattern_figure)"
        )
    if not np.isfinite(p).all():
        raise ArgumentError("patterns holds NaN or infinite weights")
    check_int_range("digits", digits, 1, 8)
    if title is not None and not isinstance(title, str):
        raise ArgumentError(f"title={title!r} must be a str")
    return AttentionView(patterns=p, heads=labels, str_tokens=toks, title=title or "Attention", digits=digits)
