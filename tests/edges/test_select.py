"""Circuit selection: top-n, threshold, greedy from the metric, node-level pruning (docs/math.md §25)."""

from __future__ import annotations

import pytest
import torch

from interp.edges import _select, circuit_graph
from interp.edges._graph import graph_from_edges
from interp.edges._scores import EdgeScores
from interp.errors import ArgumentError
from tiny_models import tiny_model


@pytest.fixture(scope="module")
def gpt2_graph():
    return circuit_graph(tiny_model("gpt2"))


def _scores(g, values: dict, base=0.01):
    s = torch.full((g.n_edges,), base)
    for e, v in values.items():
        s[g.index(e)] = v
    return s


def _edges(g, keep):
    return {g.edges[i] for i in torch.nonzero(keep).flatten().tolist()}


def test_top_n_and_threshold(gpt2_graph):
    g = gpt2_graph
    s = _scores(g, {"L1.H1→unembed": 5.0, "L0.H0→unembed": -3.0, "embed→L1.mlp.in": 1.0})
    assert _edges(g, _select.top_n(s, 2)) == {"L1.H1→unembed", "L0.H0→unembed"}
    # signed: the edges that support the metric most (the most positive scores: their corruption lowers it most)
    assert _edges(g, _select.top_n(s, 2, absolute=False)) == {"L1.H1→unembed", "embed→L1.mlp.in"}
    assert _edges(g, _select.above_threshold(s, 2.0)) == {"L1.H1→unembed", "L0.H0→unembed"}
    assert _edges(g, _select.above_threshold(s, 0.5, absolute=False)) == {"L1.H1→unembed", "embed→L1.mlp.in"}
    assert _select.top_n(s, 0).sum() == 0


def test_greedy_grows_from_the_metric(gpt2_graph):
    """A huge edge into a head that does not reach the metric waits until that head is in the circuit."""
    g = gpt2_graph
    s = _scores(g, {"embed→L0.attn.q[H0]": 100.0, "L1.H1→unembed": 2.0, "L0.H0→unembed": 1.0})
    assert _edges(g, _select.greedy(g, s, 1)) == {"L1.H1→unembed"}
    assert _edges(g, _select.greedy(g, s, 2)) == {"L1.H1→unembed", "L0.H0→unembed"}
    assert _edges(g, _select.greedy(g, s, 3)) == {"L1.H1→unembed", "L0.H0→unembed", "embed→L0.attn.q[H0]"}
    assert _edges(g, _select.top_n(s, 1)) == {"embed→L0.attn.q[H0]"}


def test_prune_removes_unfed_writers_and_unproductive_readers(gpt2_graph):
    g = gpt2_graph

    def pruned(edges):
        keep = torch.zeros(g.n_edges, dtype=torch.bool)
        keep[g.indices(edges)] = True
        return _edges(g, _select.prune(g, keep))

    assert pruned(["embed→L0.attn.q[H0]", "L0.H0→L1.attn.q[H1]"]) == set()  # never reaches the metric
    assert pruned(["L0.H0→unembed"]) == set()  # L0.H0 has no input
    ok = {"embed→L0.attn.v[H0]", "L0.H0→unembed", "embed→unembed"}
    assert pruned(list(ok)) == ok
    chain = {"embed→L0.attn.v[H0]", "L0.H0→L1.mlp.in", "L1.mlp→unembed"}
    assert pruned(list(chain | {"L0.H0→L1.attn.q[H2]"})) == chain  # L1.H2 writes nowhere


def test_prune_under_gqa_a_kv_reader_feeds_every_head_sharing_it():
    g = circuit_graph(tiny_model("llama"))
    keep = torch.zeros(g.n_edges, dtype=torch.bool)
    keep[g.indices(["embed→L1.attn.k[H0]", "L1.H1→unembed"])] = True  # L1.H1 reads KV head 0
    assert _edges(g, _select.prune(g, keep)) == {"embed→L1.attn.k[H0]", "L1.H1→unembed"}
    keep[:] = False
    keep[g.indices(["embed→L1.attn.k[H1]", "L1.H1→unembed"])] = True  # KV head 1 serves L1.H2, L1.H3
    assert _edges(g, _select.prune(g, keep)) == set()


def test_graph_from_edges_rebuilds_the_structure(gpt2_graph):
    g = gpt2_graph
    h = graph_from_edges(g.edges, n_layers=g.n_layers, n_heads=g.n_heads, n_kv_heads=g.n_kv_heads)
    assert h.writers == g.writers and h.readers == g.readers and torch.equal(h.mask, g.mask)


def test_scores_circuit(gpt2_graph):
    g = gpt2_graph
    s = _scores(g, {"embed→L0.attn.v[H0]": 3.0, "L0.H0→unembed": 2.0, "embed→L1.attn.q[H3]": 4.0})
    r = EdgeScores(
        edges=list(g.edges),
        scores=s,
        per_prompt=s[:, None],
        method="eap",
        metric="m",
        clean=0.0,
        corrupt=0.0,
        clean_per_prompt=torch.zeros(1),
        corrupt_per_prompt=torch.zeros(1),
        n_layers=2,
        n_heads=4,
        n_kv_heads=4,
    )
    c = r.circuit(n=3)
    assert set(c.edges) == {"embed→L0.attn.v[H0]", "L0.H0→unembed"} and c.pruned == 1  # L1.H3 goes nowhere
    assert c.fraction == pytest.approx(2 / g.n_edges) and "top 3" in c.selection
    assert set(r.circuit(n=3, prune=False).edges) == {"embed→L0.attn.v[H0]", "L0.H0→unembed", "embed→L1.attn.q[H3]"}
    assert set(r.circuit(threshold=2.5, prune=False).edges) == {"embed→L0.attn.v[H0]", "embed→L1.attn.q[H3]"}
    assert set(r.circuit(n=2, method="greedy").edges) == {"embed→L0.attn.v[H0]", "L0.H0→unembed"}
    assert c["L0.H0→unembed"] == pytest.approx(2.0) and "L0.H0" in c.nodes
    with pytest.raises(ArgumentError, match="exactly one"):
        r.circuit(n=3, threshold=1.0)
    with pytest.raises(ArgumentError, match="n="):
        r.circuit(n=g.n_edges + 1)
    with pytest.raises(ArgumentError, match="method"):
        r.circuit(n=2, method="acdc")
