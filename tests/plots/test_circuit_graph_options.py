"""circuit_graph_figure's options: the documented keywords, a CircuitGraphOptions, or both (a keyword wins); bad
options are typed errors naming the option. What the figure draws is checked in tests/plots/test_circuit_graph.py."""

from __future__ import annotations

import pytest

from interp.errors import ArgumentError
from interp.plots import CircuitGraphOptions, circuit_graph_figure

EDGES = ["embed→L0.attn.q[H1]", "L0.H1→L1.attn.k[H0]", "L1.H0→unembed", "L0.mlp→L1.attn.v[H1]"]
SCORES = [0.2, -0.5, 1.1, 0.05]


def _n_edges_drawn(fig) -> int:
    return len(fig.data[0].x)  # the edges' hover markers, one per drawn edge


def test_options_and_keywords_draw_the_same_figure():
    by_keywords = circuit_graph_figure(EDGES, SCORES, max_edges=2, n_bins=3, scale="log", title="t")
    by_options = circuit_graph_figure(
        EDGES, SCORES, options=CircuitGraphOptions(max_edges=2, n_bins=3, scale="log", title="t")
    )
    assert by_keywords.to_json() == by_options.to_json()
    assert _n_edges_drawn(by_options) == 2
    # the two largest |score|: L1.H0→unembed (1.1) and L0.H1→L1.attn.k[H0] (-0.5)
    drawn = sorted(t.split("<br>")[0] for t in by_options.data[0].hovertext)
    assert drawn == ["<b>L0.H1 → L1.attn.k[H0]</b>", "<b>L1.H0 → unembed</b>"]


def test_a_keyword_overrides_the_options():
    fig = circuit_graph_figure(EDGES, SCORES, options=CircuitGraphOptions(max_edges=2), max_edges=3)
    assert _n_edges_drawn(fig) == 3
    assert "Circuit graph" in fig.layout.title.text


def test_bad_options_name_the_option():
    with pytest.raises(ArgumentError, match="n_bins"):
        CircuitGraphOptions(n_bins=0)
    with pytest.raises(ArgumentError, match="scale"):
        circuit_graph_figure(EDGES, SCORES, scale="cubic")
    with pytest.raises(ArgumentError, match="'n_bin'"):
        circuit_graph_figure(EDGES, SCORES, n_bin=3)
    with pytest.raises(ArgumentError, match="options"):
        circuit_graph_figure(EDGES, SCORES, options={"max_edges": 2})
