"""The shell of every self-contained HTML view: a view's data, style sheet and script inlined in one fragment.

A view (the attention view, the attribution-graph viewer, a report page) is markup, a style sheet and a script
(package files in ``interp/plots/assets``, read with :mod:`importlib.resources`) and its data as JSON. The shell
inlines all of them, so the same HTML is shown by Jupyter (``_repr_html_``, no extension), embedded in a report and
written as a page of its own (``to_html_page()``, what ``interp.export(view, "x.html")`` writes), and it loads
nothing from the network. An asset names what the shell fills in as ``__INTERP_<NAME>__`` (each exactly once; the
data JSON is escaped for a ``<script>`` element, so a token such as ``</script>`` stays a token) and a widget's style
sheet scopes its rules with ``#ID``, replaced by the widget's element id.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

from interp.plots._common import esc

__all__ = ["HtmlView", "asset", "fill", "script_json"]

_PLACEHOLDER = re.compile(r"__INTERP_([A-Z]+)__")


@functools.lru_cache(maxsize=None)
def asset(name: str) -> str:
    """The text of the package asset ``interp/plots/assets/<name>`` (a .js or .css file)."""
    return resources.files("interp.plots").joinpath("assets", name).read_text(encoding="utf-8")


def fill(text: str, **values: str) -> str:
    """``text`` with each placeholder ``__INTERP_<NAME>__`` replaced by ``values[name]``, in one pass (a value that
    holds a placeholder's text is left as it is); each placeholder must occur exactly once."""
    for name in values:
        key = f"__INTERP_{name.upper()}__"
        if text.count(key) != 1:
            raise RuntimeError(f"an asset must hold the placeholder {key} exactly once, found {text.count(key)}")
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1).lower(), m.group(0)), text)


def script_json(obj: Any) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and the line separators U+2028/U+2029 escaped
    (no ``</script>``, no HTML comment opener)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch in "<>&\u2028\u2029":
        text = text.replace(ch, f"\\u{ord(ch):04x}")
    return text


class HtmlView:
    """A self-contained HTML view: :meth:`to_html` the fragment (Jupyter shows it through :meth:`_repr_html_`),
    :meth:`to_html_page` a whole page (what ``interp.export(view, "x.html")`` writes).

    A view gives its ``title``, its :meth:`_body` and, where the page needs them before the body (a page's style
    sheet, plotly.js), its :meth:`_head`; :meth:`widget` builds the usual body from an asset pair."""

    title: str

    def _head(self) -> str:
        """What a page holds in its ``<head>`` (the fragment puts it before the body)."""
        return ""

    def _body(self) -> str:
        raise NotImplementedError

    def to_html(self) -> str:
        """The view as an HTML fragment; no external resource."""
        return self._head() + self._body()

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_html_page(self) -> str:
        """A whole HTML page holding the view."""
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(self.title)}</title>{self._head()}</head><body>\n{self._body()}\n</body></html>\n"
        )

    @staticmethod
    def widget(name: str, uid: str, css_class: str, markup: str, data: Any) -> str:
        """``<div id=uid class=css_class>``, its style sheet ``assets/<name>.css`` scoped to it and ``markup``, then
        the script ``assets/<name>.js`` with ``data`` (``id`` set to ``uid``) inlined as its ``__INTERP_DATA__``."""
        css = asset(f"{name}.css").replace("#ID", f"#{uid}")
        js = fill(asset(f"{name}.js"), data=script_json(dict(data, id=uid)))
        return f'<div id="{uid}" class="{css_class}"><style>{css}</style>{markup}</div><script>{js}</script>'
