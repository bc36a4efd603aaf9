"""AttributionGraph.export: circuit-tracer's graph JSON.

* the file validates against circuit-tracer 0.5.0's own JSON schema (fixtures/circuit_tracer_graph_schema.json,
  written from its pydantic ``Model`` by scripts/sidenv/circuit_tracer_schema.py; MIT licence noted in the
  fixture), and every node and link has exactly the schema's keys;
* node ids are unique, including where circuit-tracer's own ids collide (layer 0's feature ``l`` at ``p`` and the
  error node of layer ``l`` at ``p``);
* every link's weight is the graph's adjacency entry for the (target, source) its ids name, the ids parsed back
  independently of the export code, and the links are exactly the pruned graph's nonzero entries;
* the pruned file keeps what ``prune`` keeps; the write is atomic (a failing write leaves the old file).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch

from interp.errors import ArgumentError, ExportError
from interp.features import attribution_graph
from tiny_models import tiny_model
from tiny_transcoders import random_transcoders

SCHEMA = json.loads((Path(__file__).parent / "fixtures" / "circuit_tracer_graph_schema.json").read_text())


@pytest.fixture(scope="module")
def graph():
    m = tiny_model("llama")
    return attribution_graph(m, "w1 w2 w3 w4 w5", random_transcoders(m, 24, seed=3, activation="relu"), batch_size=16)


def _index(g):
    """node id → graph row, parsed from the id text alone (not from the export code)."""
    out = {}
    for i, (k, l, p, f) in enumerate(zip(g.node_kind, g.node_layer, g.node_pos, g.node_feature)):
        if k == "feature":
            out[f"{l}_{f}_{p}"] = i
        elif k == "error":
            out[f"err_{l}_{p}"] = i
        elif k == "token":
            out[f"E_{g.tokens[p]}_{p}"] = i
        else:
            out[f"{g.n_layers + 1}_{g.target_ids[len([x for x in g.node_kind[:i] if x == 'logit'])]}_{p}"] = i
    return out


def test_export_schema_ids_and_weights(graph, tmp_path):
    g = graph
    path = g.export(tmp_path / "full.json", node_threshold=1.0, edge_threshold=1.0)
    data = json.loads(path.read_text())
    jsonschema.validate(data, SCHEMA)
    node_keys = set(SCHEMA["$defs"]["Node"]["properties"])
    assert set(data) == set(SCHEMA["properties"])
    assert set(data["metadata"]) == set(SCHEMA["$defs"]["Metadata"]["properties"])
    assert all(set(n) == node_keys for n in data["nodes"])
    assert all(set(e) == {"source", "target", "weight"} for e in data["links"])
    assert data["metadata"]["slug"] == "full" and len(data["metadata"]["prompt_tokens"]) == len(g.tokens)
    ids = [n["node_id"] for n in data["nodes"]]
    assert len(set(ids)) == len(ids)
    idx = _index(g)
    p = g.prune(1.0, 1.0)  # the export keeps what prune keeps (prune is tested against its definition elsewhere)
    kept = set(p.node_labels)
    assert set(ids) == {k for k, i in idx.items() if g.node_labels[i] in kept}
    assert sum(k in ("token", "logit") for k in g.node_kind) < len(ids)  # features and errors are exported too
    got = {(idx[e["target"]], idx[e["source"]]): e["weight"] for e in data["links"]}
    pos = {lab: i for i, lab in enumerate(g.node_labels)}
    t, s = p.adjacency.nonzero(as_tuple=True)  # the pruned graph's edges, mapped back to the full graph
    want = {(pos[p.node_labels[ti]], pos[p.node_labels[si]]) for ti, si in zip(t.tolist(), s.tolist())}
    assert got.keys() == want and len(data["links"]) == len(want)
    assert all(w == pytest.approx(float(g.adjacency[k]), rel=1e-6, abs=0) and w != 0 for k, w in got.items())
    feats = [n for n in data["nodes"] if n["feature_type"] == "cross layer transcoder"]
    for n in feats:  # activation equals the graph's
        assert n["activation"] == pytest.approx(float(g.activation[idx[n["node_id"]]]), rel=1e-6)
    logits = [n for n in data["nodes"] if n["feature_type"] == "logit"]
    assert [n["is_target_logit"] for n in logits] == [True] + [False] * (len(logits) - 1)
    w = g.output_weight[[i for i, k in enumerate(g.node_kind) if k == "logit"]]
    assert [n["token_prob"] for n in logits] == pytest.approx(w.tolist(), rel=1e-6)


def test_export_pruned_matches_prune(graph, tmp_path):
    g = graph
    data = json.loads(g.export(tmp_path / "p.json").read_text())
    p = g.prune()
    jsonschema.validate(data, SCHEMA)
    idx = _index(g)
    assert {n["node_id"] for n in data["nodes"]} == {
        k for k, i in idx.items() if g.node_labels[i] in set(p.node_labels)
    }
    assert len(data["links"]) == int((p.adjacency != 0).sum())
    for e in data["links"]:
        assert e["weight"] == pytest.approx(float(g.adjacency[idx[e["target"]], idx[e["source"]]]), rel=1e-6)
    infl = {n["node_id"]: n["influence"] for n in data["nodes"] if n["influence"] is not None}
    full = g.influence()
    a, b = max(infl, key=infl.get), min(infl, key=infl.get)  # cumulative influence grows as influence falls
    assert float(full[idx[a]]) <= float(full[idx[b]])


def test_ids_unique_where_circuit_tracer_collides(tmp_path):
    """A layer-0 feature whose index equals a layer number at the same position: circuit-tracer names it and that
    layer's error node both '0_{layer}_{pos}'."""
    m = tiny_model("llama")
    tcs = random_transcoders(m, 4, seed=0, activation="relu")
    tcs[0] = type(tcs[0])(
        tcs[0].W_enc, tcs[0].b_enc + torch.tensor([0.0, 10.0, 0.0, 0.0]), tcs[0].W_dec, tcs[0].b_dec
    )  # layer 0's feature 1 is active everywhere
    g = attribution_graph(m, "w1 w2 w3", tcs)
    data = json.loads(g.export(tmp_path / "c.json", node_threshold=1.0, edge_threshold=1.0).read_text())
    ids = [n["node_id"] for n in data["nodes"]]
    assert "0_1_3" in ids and "err_1_3" in ids and len(set(ids)) == len(ids)  # at the last position: kept
    js = [n["jsNodeId"] for n in data["nodes"] if n["feature_type"] != "cross layer transcoder"]
    assert len(set(js)) == len(js)


def test_export_bad_input_and_atomic(graph, tmp_path):
    with pytest.raises(ArgumentError, match="node_threshold"):
        graph.export(tmp_path / "x.json", node_threshold=1.5)
    with pytest.raises(ArgumentError, match="slug"):
        graph.export(tmp_path / "x.json", slug="")
    with pytest.raises(ExportError, match="path="):
        graph.export(tmp_path / "missing" / "x.json")
    target = tmp_path / "keep.json"
    target.write_text("old")
    with pytest.raises(ArgumentError):
        graph.export(target, edge_threshold=-1)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.json"]


def test_outputs_carry_the_models_own_probability(tmp_path):
    """A target − wrong graph was exported with token_prob 1.0 and "(p=1.000)" (its influence weight); the output now
    carries the model's probability of the target at the real forward — here checked against the HF model's own
    softmax — and says it is a logit difference. Top-logit outputs carry their own tokens' probabilities."""
    from interp.engine import model_from_hf
    from tiny_models import tiny_hf_model, tiny_tokenizer

    hf = tiny_hf_model("llama")
    m = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama")
    tcs = random_transcoders(m, 24, seed=3, activation="relu")
    prompt = "w1 w2 w3 w4 w5"
    with torch.no_grad():
        probs = torch.softmax(hf(m.to_tokens(prompt)).logits[0, -1].double(), -1)
    t_id = 7  # "w3" in the tiny vocabulary (<pad> <bos> <eos> <unk> w0 …)
    p_t = float(probs[t_id])
    assert p_t < 0.9  # far from the 1.0 written before
    for wrong in ("w4", None):
        g = attribution_graph(m, prompt, tcs, target="w3", wrong=wrong, batch_size=16)
        out = g.node_labels.index("logit")
        assert float(g.output_prob[out]) == pytest.approx(p_t, rel=1e-4)
        data = json.loads(g.export(tmp_path / "g.json").read_text())
        (node,) = [n for n in data["nodes"] if n["feature_type"] == "logit"]
        assert node["token_prob"] == pytest.approx(p_t, rel=1e-4)
        assert (f"p={p_t:.3f}" in node["clerp"] or f")={p_t:.3f}" in node["clerp"]) and (
            ("logit difference" in node["clerp"]) == (wrong is not None)
        )
        payload = g.show().payload
        assert payload["prob"][out] == pytest.approx(p_t, rel=1e-4) and payload["diff"] == (wrong is not None)
    top = attribution_graph(m, prompt, tcs, batch_size=16)
    outs = [i for i, k in enumerate(top.node_kind) if k == "logit"]
    assert torch.allclose(top.output_prob[outs].double(), probs[top.target_ids], rtol=1e-4)
    back = type(top).load(top.save(tmp_path / "top.safetensors"))
    assert torch.equal(back.output_prob, top.output_prob)
