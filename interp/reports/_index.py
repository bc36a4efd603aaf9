"""An index page over several reports (``interp report`` with several prompts): one row per prompt
with its target, the model's number, the closure error and the top head, each linking to its report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence, Union

from interp._io import write_atomic
from interp.errors import ArgumentError
from interp.reports._html import Page, data_table, esc

__all__ = ["report_index"]


def report_index(pages: Sequence[Union[str, Path]], *, out_dir: Union[str, Path]) -> Path:
    """Write ``out_dir/index.html`` linking each report ``pages[i]`` (an index.html written by
    :func:`interp.report`, with its results.json beside it). No plotly.js: the page is a table."""
    if not pages:
        raise ArgumentError("pages is empty: give the index.html paths of the reports to link")
    out = Path(out_dir)
    rows = []
    for i, page in enumerate(map(Path, pages)):
        res_path = page.parent / "results.json"
        try:
            r = json.loads(res_path.read_text())
        except (OSError, ValueError) as e:
            raise ArgumentError(f"pages[{i}]={str(page)!r} has no readable results.json beside it ({e})") from None
        a = r.get("attribution", {})
        heads = r.get("top_heads") or []
        top = heads[0] if heads else None
        top_txt = f"{esc(top['head'])} ({top['value']:+.3g})" if isinstance(top, dict) else "—"
        link = os.path.relpath(page, out)
        rows.append(
            [
                f'<a href="{esc(link)}">{i + 1}</a>',
                f"<code>{esc(r.get('prompt', ''))}</code>",
                esc(a.get("target", "—")),
                f"{a.get('total', float('nan')):.4g}",
                f"{a.get('closure_error', float('nan')):.1e}",
                top_txt,
            ]
        )
    table = data_table(
        ["#", "prompt", "target", "model's number", "closure error (absolute)", "top head"],
        rows,
        numeric=[False, False, False, True, True, False],
    )
    index_page = Page(title="interp reports", subtitle=f"{len(rows)} prompts")
    index_page.parts.append(f"<section>{table}</section>")
    index = out / "index.html"
    write_atomic(index, index_page.render().encode())
    return index
