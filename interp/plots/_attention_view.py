"""An interactive attention view: hover a token to see where each chosen head attends from it and to it.

For a head's pattern A^h[q, k] (how much the query token at q reads from the key token at k), hovering
token i shows, for every chosen head, the row A^h[i, :] ("from i": where i attends) and the column
A^h[:, i] ("to i": which tokens attend to i), each weight written under its token and shading it.
Heads are switched on and off with check boxes; clicking a token pins it.

The view is a small HTML + JavaScript widget with no dependency: the patterns and tokens are inlined
as JSON and the script (``interp/plots/assets/attention_view.js``) draws them, so it works in Jupyter
(``_repr_html_``, no extension), inside the HTML report, and as a page of its own
(``interp.export(view, "x.html")``), with no network access (unlike CircuitsVis, which loads its code
from a CDN). Tokens are inserted as text, never as HTML, and the JSON is escaped for a ``<script>``
element, so a token such as ``</script>`` stays a token.
"""

from __future__ import annotations

import hashlib
import html
import itertools
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from interp._validate import check_int_range
from interp.errors import ArgumentError
from interp.plots._attention import head_patterns
from interp.plots._view import HtmlView

__all__ = ["AttentionView", "attention_view"]

#: Largest number of tokens the view inlines (the data grows as heads × tokens²).
MAX_TOKENS = 512

_counter = itertools.count()


@dataclass(frozen=True, eq=False)
class AttentionView(HtmlView):
    """A self-contained interactive attention view (HTML + inline JavaScript; see the module docstring).

    ``patterns`` [n_heads, query_pos, key_pos] (the query positions are the last ``query_pos`` tokens),
    ``heads`` a label per pattern, ``str_tokens`` the key tokens. Shown by Jupyter through
    :meth:`_repr_html_`; :meth:`to_html` is the fragment, :meth:`to_html_page` a whole page
    (``interp.export(view, "x.html")`` writes it). Its script and style sheet are
    ``interp/plots/assets/attention_view.js`` and ``.css``.
    """

    patterns: np.ndarray = field(repr=False)
    heads: list[str]
    str_tokens: list[str] = field(repr=False)
    title: str = "Attention"
    digits: int = 4

    def _payload(self) -> dict[str, Any]:
        p = np.round(self.patterns.astype(np.float64), self.digits)
        return {
            "heads": list(self.heads),
            "tokens": list(self.str_tokens),
            "n_query": int(p.shape[1]),
            "patterns": p.tolist(),
        }

    def _body(self) -> str:
        """The widget (a ``<div>``, its ``<style>`` and ``<script>``); no external resource."""
        digest = hashlib.sha1(self.patterns.tobytes() + "\0".join([*self.heads, *self.str_tokens]).encode()).hexdigest()
        uid = f"interp-attn-{digest[:10]}-{next(_counter)}"
        markup = (
            f'<div class="ia-title"><b>{html.escape(self.title)}</b> '
            f'<span class="ia-hint">· {len(self.heads)} heads, {len(self.str_tokens)} tokens · hover a token: where '
            f"each head attends from it (→) and which tokens attend to it (←)</span></div>"
            '<div class="ia-controls"></div><div class="ia-tokens"></div><div class="ia-detail"></div>'
        )
        return self.widget("attention_view", uid, "interp-attention-view", markup, self._payload())


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
