"""Pruning, the viewer, circuit-tracer's graph JSON, save/load and top activating contexts with an attribution graph
over a cross-layer transcoder (a tiny 3-layer Llama in float64, so that layer 0's features write two layers on),
each checked against a computation that does not use the code under test:

* a CLT feature node is its encoder's feature: label ``L{l}.F{f}@p`` at layer l, its activation act(x_l W_enc[l]ᵀ +
  b_enc[l]) with x_l the Hugging Face MLP's own input (a forward pre-hook), and every active one is a node;
* node influence, of the whole graph and of the pruned one, = w((I − Â)⁻¹ − I) by a linear solve on the adjacency
  (Â: |A| with each row normalised to sum 1; w the outputs' probabilities);
* the pruned graph keeps the tokens and outputs, each of its edges is the whole graph's entry or zero, every kept
  feature has an incoming and an outgoing edge, every kept error node an outgoing one;
* the viewer's data: the nodes' labels, layers, activations and influence as above, each listed edge an adjacency
  entry (all of them, largest |weight| first), each node's strongest edges the largest |entries| of its row/column;
* the graph JSON: its nodes are the pruned graph's (ids parsed back independently), every link's weight is the
  adjacency entry its ids name and the links are all the nonzero entries; a feature's layer is its encoder's;
* save/load keeps every field, and the loaded graph prunes and exports the same;
* top_activating_contexts takes the CLT: the top context's activation is the HF-hook encoder activation's maximum.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from interp.engine import model_from_hf
from interp.features import AttributionGraph, attribution_graph, top_activating_contexts
from interp.features._export import graph_json
from interp.plots import feature_graph_view
from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_clt

PROMPT = "w1 w2 w3 w4 w5 w6"


@pytest.fixture(scope="module")
def setup():
    hf = tiny_hf_model("llama", n_layers=3, dtype=torch.float64)
    m = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-3", dtype=torch.float64)
    c = random_clt(m, 12, seed=6, dtype=torch.float64)
    g = attribution_graph(m, PROMPT, c, logit_effects=3)
    return hf, m, c, g


def _mlp_inputs(hf, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's MLP input [n, d], read by forward pre-hooks on the Hugging Face modules."""
    xs: dict[int, torch.Tensor] = {}

    def keep(l):
        def hook(mod, inp):
            xs[l] = inp[0][0]

        return hook

    hooks = [layer.mlp.register_forward_pre_hook(keep(l)) for l, layer in enumerate(hf.model.layers)]
    hooked_forward(hf, hooks, input_ids=ids)
    return [xs[l] for l in range(len(hf.model.layers))]


def _influence_by_solve(A: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """w((I − Â)⁻¹ − I): x = w(I − Â)⁻¹ solves (I − Â)ᵀ xᵀ = wᵀ."""
    a = A.abs()
    s = a.sum(1, keepdim=True)
    An = torch.where(s > 0, a / s.clamp_min(1e-300), torch.zeros_like(a))
    eye = torch.eye(A.shape[0], dtype=A.dtype)
    return torch.linalg.solve((eye - An).T, w) - w


def _weights(g) -> torch.Tensor:
    return (
        g.output_weight if g.output_weight is not None else torch.tensor([k == "logit" for k in g.node_kind]).double()
    )


def test_clt_feature_nodes_are_the_encoders_features(setup):
    hf, m, c, g = setup
    xs = _mlp_inputs(hf, m.to_tokens(PROMPT))
    acts = [torch.relu(xs[l] @ c.W_enc[l].T + c.b_enc[l]) for l in range(3)]
    feats = [i for i, k in enumerate(g.node_kind) if k == "feature"]
    assert {g.node_layer[i] for i in feats} == {0, 1, 2}
    for i in feats:
        l, p, f = g.node_layer[i], g.node_pos[i], g.node_feature[i]
        assert g.node_labels[i] == f"L{l}.F{f}@{p}"
        assert float(g.activation[i]) == pytest.approx(float(acts[l][p, f]), rel=1e-12, abs=1e-14)
    active = {(l, p, f) for l in range(3) for p, f in (acts[l] > 0).nonzero().tolist()}
    assert active == {(g.node_layer[i], g.node_pos[i], g.node_feature[i]) for i in feats}


def test_influence_of_the_graph_and_the_pruned_graph(setup):
    *_, g = setup
    full = _influence_by_solve(g.adjacency, _weights(g))
    assert torch.allclose(g.influence(), full, rtol=1e-10, atol=1e-14)
    p = g.prune(0.8, 0.98)
    assert torch.allclose(p.influence(), _influence_by_solve(p.adjacency, _weights(p)), rtol=1e-10, atol=1e-14)
    assert g.n_nodes > p.n_nodes > 0 and "feature" in p.node_kind


def test_pruned_graph_is_a_subgraph_of_the_whole(setup):
    *_, g = setup
    p = g.prune(0.6, 0.9)
    rows = [g.node_labels.index(lab) for lab in p.node_labels]
    assert [k for k in g.node_kind if k in ("token", "logit")] == [k for k in p.node_kind if k in ("token", "logit")]
    sub = g.adjacency[rows][:, rows]
    kept = p.adjacency != 0
    assert torch.equal(p.adjacency[kept], sub[kept]) and int(kept.sum()) < int((sub != 0).sum())
    for name in ("node_layer", "node_pos", "node_feature", "node_kind"):
        assert getattr(p, name) == [getattr(g, name)[r] for r in rows]
    assert torch.equal(p.activation, g.activation[rows]) and torch.equal(p.value, g.value[rows])
    for j, k in enumerate(p.node_kind):
        if k in ("feature", "error"):
            assert kept[:, j].any(), p.node_labels[j]  # an outgoing edge
        if k == "feature":
            assert kept[j].any(), p.node_labels[j]  # an incoming edge
    # a layer-0 feature's edges reach later layers' targets through its writes at every layer
    later = [j for j, (k, l) in enumerate(zip(p.node_kind, p.node_layer)) if k == "feature" and l == 2]
    first = [j for j, (k, l) in enumerate(zip(g.node_kind, g.node_layer)) if k == "feature" and l == 0]
    assert later and g.adjacency[[g.node_labels.index(p.node_labels[j]) for j in later]][:, first].any()


@pytest.mark.parametrize("pruned", [False, True])
def test_viewer_data_is_the_graphs(setup, pruned):
    *_, g = setup
    g = g.prune(0.8, 0.98) if pruned else g
    v = feature_graph_view(g, max_edges=10**6)
    d = v.payload
    A = g.adjacency
    assert d["label"] == g.node_labels and d["kind"] == g.node_kind
    assert d["layer"] == g.node_layer and d["pos"] == g.node_pos and d["n_layers"] == 3
    assert d["act"] == g.activation.tolist()
    assert torch.allclose(
        torch.tensor(d["infl"], dtype=torch.float64), _influence_by_solve(A, _weights(g)), rtol=1e-10, atol=1e-14
    )
    nz = [(float(A[t, s]), s, t) for t, s in (A != 0).nonzero().tolist()]
    assert len(d["edges"]) == len(nz) == d["n_edges_total"]
    assert all(w == float(A[t, s]) for s, t, w in d["edges"])
    # ranked as circuit-tracer's pruning weighs edges: the target's share of its inputs times its influence + weight
    infl, wt = _influence_by_solve(A, _weights(g)), _weights(g).double()
    row = A.abs().double().sum(1)
    score = [abs(w) / float(row[t]) * max(float(infl[t] + wt[t]), 0.0) for s, t, w in d["edges"]]
    assert all(a >= b - 1e-9 * max(a, 1e-30) for a, b in zip(score, score[1:]))
    for i in range(g.n_nodes):
        row = sorted((abs(float(A[i, j])), j) for j in range(g.n_nodes) if A[i, j] != 0)[::-1][:5]
        col = sorted((abs(float(A[j, i])), j) for j in range(g.n_nodes) if A[j, i] != 0)[::-1][:5]
        assert [abs(w) for _, w in d["ins"][i]] == [a for a, _ in row]
        assert [abs(w) for _, w in d["outs"][i]] == [a for a, _ in col]
        assert all(w == float(A[i, g.node_labels.index(lab)]) for lab, w in d["ins"][i])
    feats = [i for i, k in enumerate(g.node_kind) if k == "feature"]
    assert all(len(d["effects"][i]) == 6 for i in feats)  # logit_effects=3: 3 promoted, 3 suppressed
    html = v.to_html_page()
    assert g.node_labels[feats[0]] in html


def _row_of(g) -> dict[str, int]:
    """node id → graph row, from the node table alone (circuit-tracer's id grammar; errors err_{layer}_{pos})."""
    out = {}
    k_out = 0
    for i, (k, l, p, f) in enumerate(zip(g.node_kind, g.node_layer, g.node_pos, g.node_feature)):
        if k == "feature":
            out[f"{l}_{f}_{p}"] = i
        elif k == "error":
            out[f"err_{l}_{p}"] = i
        elif k == "token":
            out[f"E_{g.tokens[p]}_{p}"] = i
        else:
            out[f"{g.n_layers + 1}_{g.target_ids[k_out]}_{p}"] = i
            k_out += 1
    return out


def test_graph_json_matches_the_graph(setup):
    *_, g = setup
    data = graph_json(g, node_threshold=0.8, edge_threshold=0.98)
    p = g.prune(0.8, 0.98)
    rows = _row_of(p)
    assert [n["node_id"] for n in data["nodes"]] == list(rows)
    A = p.adjacency
    assert len(data["links"]) == int((A != 0).sum())
    for e in data["links"]:
        assert e["weight"] == float(A[rows[e["target"]], rows[e["source"]]]) != 0.0
    infl = _influence_by_solve(g.adjacency, _weights(g))
    for n in data["nodes"]:
        i = rows[n["node_id"]]
        if p.node_kind[i] == "feature":
            l, f = p.node_layer[i], p.node_feature[i]
            assert n["layer"] == str(l) and n["ctx_idx"] == p.node_pos[i]
            assert n["feature"] == (l + f) * (l + f + 1) // 2 + f and n["activation"] == float(p.activation[i])
            full = g.node_labels.index(p.node_labels[i])
            want = float(infl[infl >= infl[full] * (1 - 1e-12)].sum() / infl.sum())
            assert n["influence"] == pytest.approx(want, rel=1e-9)


def test_save_and_load_a_clt_graph(setup, tmp_path):
    *_, g = setup
    path = g.save(tmp_path / "clt_graph.safetensors")
    back = AttributionGraph.load(path)
    for name in g.__dataclass_fields__:
        a, b = getattr(g, name), getattr(back, name)
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, name
    assert torch.equal(back.prune().adjacency, g.prune().adjacency)
    assert json.dumps(graph_json(back)) == json.dumps(graph_json(g))
    assert feature_graph_view(back).payload == feature_graph_view(g).payload


def test_top_activating_contexts_of_a_clt(setup):
    hf, m, c, g = setup
    texts = ["w5 w9 w12 w3 w7", "w40 w7 w1 w2 w88 w17", "w3 w3 w60"]
    feats = [(0, f) for f in range(4)] + [(2, f) for f in range(4)]
    got = top_activating_contexts(m, c, texts, [f"L{l}.F{f}" for l, f in feats], k=2)
    per_text = [_mlp_inputs(hf, m.to_tokens(t)) for t in texts]
    checked = 0
    for l, f in feats:
        best = max(float(torch.relu(xs[l] @ c.W_enc[l, f] + c.b_enc[l, f]).max()) for xs in per_text)
        ctx = got[f"L{l}.F{f}"]
        if best <= 0:
            assert ctx == []
            continue
        top = float(re.search(r"\(([^()]*)\)$", ctx[0]).group(1))
        assert top == pytest.approx(best, rel=5e-4)  # printed to 4 significant digits
        checked += 1
    assert checked >= 4
