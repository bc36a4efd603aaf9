"""interp.export([fig_a, fig_b, ...], "page.html"): several figures on one page, one inlined plotly.js."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

import interp
from interp.errors import ArgumentError


def _figs():
    a = go.Figure(go.Bar(x=["a", "b"], y=[1, 2]), layout_title_text="first figure")
    b = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]), layout_title_text="second figure")
    c = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]), layout_title_text="third figure")
    return [a, b, c]


def test_page_of_figures_shares_one_plotly_js(tmp_path):
    figs = _figs()
    one = interp.export(figs[0], tmp_path / "one.html").read_text()
    page = interp.export(figs, tmp_path / "page.html").read_text()
    marker = "plotly.js v"  # the banner of the inlined library
    assert one.count(marker) >= 1
    assert page.count(marker) == one.count(marker)  # the library once, not once per figure
    assert len(page) < len(one) + 3 * 20_000  # each extra figure costs its data only
    for title in ("first figure", "second figure", "third figure"):
        assert title in page
    assert page.count('class="interp-figure"') == 3
    assert "cdn" not in page.lower().split("plotly.js v")[0][-200:]  # nothing fetched before the library


def test_list_to_json_is_a_list_of_figures(tmp_path):
    out = json.loads(interp.export(_figs()[:2], tmp_path / "figs.json").read_text())
    assert isinstance(out, list) and len(out) == 2
    assert out[0]["data"][0]["type"] == "bar" and out[1]["data"][0]["type"] == "heatmap"


def test_list_bad_input(tmp_path):
    with pytest.raises(ArgumentError, match="empty list"):
        interp.export([], tmp_path / "p.html")
    with pytest.raises(ArgumentError, match=r"\.png"):
        interp.export(_figs(), tmp_path / "p.png")
    with pytest.raises(ArgumentError, match=r"figure_or_result\[1\]"):
        interp.export([_figs()[0], 42], tmp_path / "p.html")
    assert not list(tmp_path.iterdir())  # nothing half-written
