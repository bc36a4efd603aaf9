"""The notebooks' jupytext sources (notebooks/NN_*.py) and the committed .ipynb files agree.

The .py files are the source; `make notebooks` (scripts/build_notebooks.py) executes each and writes
the paired .ipynb with its outputs. These tests fail when one file of a pair is edited without the
other (same cells, same sources, in the same order), when a committed notebook was not executed top
to bottom or carries an error, volatile output (timings, temp paths) or a figure without its static
PNG copy, or grows past the size budget. nbmake (pytest --nbmake) separately re-executes each .ipynb.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
SOURCES = sorted(NB_DIR.glob("[0-9]*.py"))
NOTEBOOKS = sorted(NB_DIR.glob("[0-9]*.ipynb"))
PAIR_FORMATS = "ipynb,py:percent"
MAX_BYTES = 2_000_000  # each committed notebook, outputs included
PLOTLY = "application/vnd.plotly.v1+json"


def _build_script():
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cell_differences(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> list[str]:
    """Where two notebooks' cells differ in kind or source (outputs and metadata ignored)."""
    diffs = []
    if len(a.cells) != len(b.cells):
        diffs.append(f"{len(a.cells)} cells vs {len(b.cells)} cells")
    for i, (x, y) in enumerate(zip(a.cells, b.cells)):
        if x.cell_type != y.cell_type:
            diffs.append(f"cell {i}: {x.cell_type} vs {y.cell_type}")
        elif x.source != y.source:
            xl, yl = x.source.splitlines(), y.source.splitlines()
            j = next((k for k, (p, q) in enumerate(zip(xl, yl)) if p != q), min(len(xl), len(yl)))
            diffs.append(
                f"cell {i}, line {j + 1}: {xl[j] if j < len(xl) else '<end>'!r} vs "
                f"{yl[j] if j < len(yl) else '<end>'!r}"
            )
    return diffs


def _texts(nb: nbformat.NotebookNode):
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                yield i, out.text
            elif "data" in out:
                for mime in ("text/plain", "text/html"):
                    if mime in out.data:
                        yield i, out.data[mime]
            elif out.output_type == "error":
                yield i, "\n".join(out.traceback)


def test_every_source_has_its_notebook():
    assert SOURCES, "no notebooks/NN_*.py sources found"
    assert [p.stem for p in SOURCES] == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_source_and_notebook_have_the_same_cells(source):
    nb = source.with_suffix(".ipynb")
    diffs = cell_differences(jupytext.read(source), jupytext.read(nb))
    assert not diffs, (
        f"{source.name} and {nb.name} differ (edit the .py, then `make notebooks` "
        "rewrites the .ipynb):\n" + "\n".join(diffs[:10])
    )


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_pair_is_declared_in_both_files(source):
    assert jupytext.read(source).metadata["jupytext"]["formats"] == PAIR_FORMATS
    assert jupytext.read(source.with_suffix(".ipynb")).metadata["jupytext"]["formats"] == PAIR_FORMATS


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_is_executed_and_clean(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        "not executed top to bottom in one kernel: run `make notebooks`"
    )
    assert not [c for c in code for o in c.outputs if o.output_type == "error"]
    scrub = _build_script().scrub_text
    for i, text in _texts(nb):
        assert "TqdmWarning" not in text and "IProgress not found" not in text, f"cell {i}: {text[:200]}"
        assert scrub(text) == text, f"cell {i} has volatile output (timing, temp path): {text[:200]}"
    assert "widgets" not in nb.metadata
    assert not [c for c in code if "execution" in c.metadata], "execution timestamps committed"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_a_png_copy_and_no_inlined_plotlyjs(nb_path):
    raw = nb_path.read_text()
    assert len(raw.encode()) < MAX_BYTES, f"{nb_path.name}: {len(raw.encode()) / 1e6:.2f} MB"
    assert not re.search(r"plotly\.js v\d|Plotly\.newPlot|cdn\.plot\.ly", raw), "plotly.js or a CDN load inlined"
    nb = json.loads(raw)
    figures = [o for c in nb["cells"] for o in c.get("outputs", []) if PLOTLY in o.get("data", {})]
    assert figures, f"{nb_path.name} displays no figure"  # every notebook shows at least one
    for o in figures:
        assert o["data"].get("image/png", "").startswith("iVBORw0KGgo"), "figure without a PNG copy"


def test_cell_differences_catches_an_edit_on_one_side(tmp_path):
    source = SOURCES[0]
    nb = jupytext.read(source)
    assert cell_differences(nb, jupytext.read(source)) == []
    edited = tmp_path / source.name
    i = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells[i].source += "\nprint('edited')"
    jupytext.write(nb, edited, fmt="py:percent")
    assert cell_differences(jupytext.read(edited), jupytext.read(source.with_suffix(".ipynb"))) == [
        f"cell {i}, line {len(nb.cells[i].source.splitlines())}: \"print('edited')\" vs '<end>'"
    ]
    del nb.cells[-1]
    assert cell_differences(nb, jupytext.read(source))[0] == f"{len(nb.cells)} cells vs {len(nb.cells) + 1} cells"
