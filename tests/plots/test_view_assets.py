"""The views' JavaScript and CSS are package files (interp/plots/assets): each script parses (``node --check``), as a
file and as a view inlines it with its data; a wheel ships every asset (the package-data globs in pyproject.toml
match each file); the views behave the same in a browser (tests/plots/test_attention_view.py,
test_feature_graph_page.py and the report pages' tests drive them in Chromium)."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from interp import plots

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "interp" / "plots" / "assets"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed here (CI has it): no JavaScript syntax check"
)


def _node_check(path: Path) -> None:
    run = subprocess.run([NODE, "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"{path.name} does not parse:\n{run.stderr}"


def _scripts(page: str) -> list[str]:
    """The text of every inline classic ``<script>`` element (not the data blocks of type application/gzip)."""
    return re.findall(r"<script(?: type=\"text/javascript\")?>(.*?)</script>", page, flags=re.S)


def test_the_assets_are_there():
    names = sorted(p.name for p in ASSETS.iterdir())
    for view in ("attention_view", "feature_graph"):
        assert f"{view}.js" in names and f"{view}.css" in names
    assert {"page.css", "figure.js", "compact.js"} <= set(names)


@needs_node
@pytest.mark.parametrize("name", sorted(p.name for p in ASSETS.glob("*.js")))
def test_each_script_asset_parses(name):
    _node_check(ASSETS / name)


@needs_node
def test_the_inlined_scripts_parse_with_their_data(tmp_path):
    """What a page runs: each asset with its data filled in (tokens that could break out of a string or a script)."""
    nasty = ["<bos>", "</script>", "a\u2028b", "c\u2029d", "\\", '"', "`${x}`", "é"]
    p = np.full((1, len(nasty), len(nasty)), 1.0 / len(nasty))
    pages = [plots.attention_view(p, nasty).to_html_page()]
    fig = go.Figure(go.Scatter(x=[1], y=[2], text=["</script><b>"]))
    for compact in (False, True):
        page = plots.Page(title="t", compact=compact)
        page.section("a", page.figure(fig))
        pages.append(page.render())
    n = 0
    for k, page in enumerate(pages):
        for j, script in enumerate(_scripts(page)):
            if len(script) > 1_000_000:  # plotly.js itself
                continue
            f = tmp_path / f"page{k}_script{j}.js"
            f.write_text(script)
            _node_check(f)
            n += 1
    assert n >= 3


def test_a_wheel_ships_every_asset():
    """Each asset matches a glob of [tool.setuptools.package-data] for the interp package."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["interp"]
    for path in ASSETS.iterdir():
        rel = path.relative_to(ROOT / "interp").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} is not in package-data {globs}"


def test_the_css_rules_balance():
    """No stray or missing brace in a style sheet (a cheap guard: the browser drops the rest of a broken sheet)."""
    for path in ASSETS.glob("*.css"):
        text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
        depth = 0
        for ch in text:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            assert depth in (0, 1), f"{path.name}: nested or stray brace"
        assert depth == 0, f"{path.name}: an unclosed rule"


def test_each_placeholder_occurs_once():
    """What the shell fills in (``__INTERP_DATA__``, ...) appears once per script: the data is inlined exactly once."""
    expected = {
        "attention_view.js": {"DATA"},
        "feature_graph.js": {"DATA"},
        "figure.js": {"SPEC", "ID", "CONFIG"},
        "compact.js": {"CONFIG"},
    }
    for name, keys in expected.items():
        text = (ASSETS / name).read_text()
        found = re.findall(r"__INTERP_([A-Z]+)__", text)
        assert sorted(found) == sorted(keys), (name, found)
