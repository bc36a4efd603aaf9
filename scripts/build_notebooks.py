"""Execute the notebooks' jupytext sources and write the paired ``.ipynb`` files with their outputs.

``python scripts/build_notebooks.py [notebooks/01_residual_stream.py ...]`` (default: every
``notebooks/[0-9]*.py``; ``make notebooks`` runs it). For each source:

1. read the ``py:percent`` file with jupytext (the one source of the cells);
2. run it top to bottom in a fresh ``python3`` kernel with ``notebooks/`` as the working directory;
3. normalise what changes from run to run, so a rebuild only diffs where results changed: execution
   timestamps and the kernel's Python version are dropped, wall-clock timings and temporary paths in
   printed text become ``…``, a tqdm progress widget becomes its final text line (no rate, no ETA;
   bars of one-time cache fills are left out) and the widget state is dropped, consecutive prints
   to one stream become one output, cell ids become ``cell-00``, ``cell-01``, …;
4. write ``notebooks/<name>.ipynb`` next to the source (jupytext keeps the pair's metadata).

A cell that raises stops the build with the error, and the ``.ipynb`` is left as it was.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# Progress bars shown only on a machine's first run (a one-time cache fill), dropped from the outputs.
FIRST_RUN_ONLY = ("Converting and de-quantizing GGUF",)

# (pattern, replacement) applied to printed text and text/plain outputs: only values that differ
# between two runs of an unchanged notebook (timings, temporary paths, object addresses).
_TMP = re.escape(tempfile.gettempdir().rstrip("/"))
VOLATILE = [
    (re.compile(r"(notebook runtime: )\d+(?:\.\d+)?( s)"), r"\1…\2"),
    (re.compile(r"((?:exported|written) in )\d+(?:\.\d+)?( s)"), r"\1…\2"),
    (re.compile(_TMP + r"/([A-Za-z_-]*?)[A-Za-z0-9_]{8}(?=[/\s'\"]|$)", re.M), r"/tmp/\1…"),
    (re.compile(r" at 0x[0-9a-fA-F]{6,}"), " at 0x…"),
    # tqdm's text bar (stderr, or a widget's text): elapsed<remaining and rate
    (re.compile(r" ?\[\d+:\d\d(?::\d\d)?<[^\]]*\]"), ""),
]


def scrub_text(text: str) -> str:
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return text


def _widget_text(model_id: str, state: dict) -> str | None:
    """The final text of a tqdm bar widget (HBox of HTML, progress, HTML) from the stored widget state."""
    models = state.get("state", {})
    box = models.get(model_id, {}).get("state", {})
    parts: list[str] = []
    for ref in box.get("children", []):
        child = models.get(str(ref).removeprefix("IPY_MODEL_"), {})
        kind, s = child.get("model_name", ""), child.get("state", {})
        if kind == "HTMLModel":
            text = html.unescape(re.sub(r"<[^>]+>", " ", s.get("value", "")))
            parts.append(re.sub(r"[\s\u2007]+", " ", text).strip())
        elif kind in ("IntProgressModel", "FloatProgressModel") and s.get("max"):
            filled = round(10 * s.get("value", 0) / s["max"])
            parts.append("|" + "█" * filled + " " * (10 - filled) + "|")
    return " ".join(p for p in parts if p) or None


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    widget_state = nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {})
    nb.metadata.get("language_info", {}).pop("version", None)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.outputs:
            if out.output_type == "stream":
                out.text = scrub_text(out.text)
                if out.name == "stderr" and not out.text.strip():
                    continue
                if outputs and outputs[-1].output_type == "stream" and outputs[-1].name == out.name:
                    outputs[-1].text += out.text  # where the kernel split a stream depends on timing
                    continue
            elif out.output_type in ("display_data", "execute_result"):
                data = out.get("data", {})
                if WIDGET_VIEW in data:
                    text = _widget_text(data[WIDGET_VIEW].get("model_id", ""), widget_state)
                    if text is None or text.startswith(FIRST_RUN_ONLY):
                        continue  # a widget with nothing static to show, or a first-run-only bar
                    data.clear()
                    data["text/plain"] = text
                if isinstance(data.get("text/plain"), str):
                    data["text/plain"] = scrub_text(data["text/plain"])
                out.metadata = {k: v for k, v in out.get("metadata", {}).items() if k != "execution"}
            outputs.append(out)
        cell.outputs = outputs
    return nb


def build(source: Path, timeout: int) -> tuple[Path, float]:
    nb = jupytext.read(source)
    t0 = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(source.parent)}},
    ).execute()
    seconds = time.perf_counter() - t0
    target = source.with_suffix(".ipynb")
    nb = normalise(nb)
    nbformat.validate(nb)
    jupytext.write(nb, target, fmt="ipynb")
    return target, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", type=Path, help="jupytext .py sources (default: all)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    sources = args.sources or sorted(NOTEBOOKS.glob("[0-9]*.py"))
    for src in sources:
        if src.suffix != ".py" or not src.is_file():
            parser.error(f"{src}: not a jupytext .py source")
        print(f"== {src.name}", flush=True)
        target, seconds = build(src.resolve(), args.timeout)
        print(f"   {target.name}: {seconds:.0f} s, {target.stat().st_size / 1e3:.0f} kB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
