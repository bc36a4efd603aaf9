"""toy-attn-only-2l on the induction task: edge scores find the circuit whose heads the attention patterns name."""

from __future__ import annotations

import pytest

import interp
from interp.groundtruth import induction_circuit
from interp.labels import Edge, HeadInput, Output


@pytest.fixture(scope="module")
def toy():
    return interp.load_model("toy-attn-only-2l")


@pytest.mark.parametrize("method", ["eap", "eap-ig"])
def test_top_edges_are_the_induction_circuit(toy, method):
    truth = induction_circuit(toy)  # previous-token and induction heads, found from attention patterns
    prev = [interp.labels.parse(h) for h in truth.details["previous_token_heads"]]
    ind = [interp.labels.parse(h) for h in truth.details["induction_heads"]]
    task = interp.load_task("induction", toy, n=40, length=10)
    s = interp.edge_attribution(toy, task.clean, task.corrupt, metric=task.metric, method=method, progress=False)
    top = set(s.top(12)["edge"])  # of 106 edges
    k_edges = {
        str(Edge(p, HeadInput(i.layer, "k", toy.arch.kv_head(i.head)))) for p in prev for i in ind if p.layer < i.layer
    }
    out_edges = {str(Edge(i, Output("unembed"))) for i in ind}
    assert len(top & k_edges) >= 2, (sorted(top), k_edges)  # previous-token head → induction heads' keys
    assert out_edges <= top, (sorted(top), out_edges)  # induction heads → the logits
    # and the circuit they make recovers the task: the top 20 edges (19%), pruned, under corrupt ablation
    ev = interp.evaluate_circuit(toy, task.clean, task.corrupt, s.circuit(n=20), metric=task.metric)
    assert ev.faithfulness > 0.9, ev
