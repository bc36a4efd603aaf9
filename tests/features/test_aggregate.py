"""Attribution graphs aggregated over prompts (docs/math.md §32), checked against each prompt's graph built alone:

* every identity's mean influence, activation and direct effect, its counts (prompts active, prompts kept by the
  pruning, positions) and every aggregated edge (mean of the per-prompt sums, prompts present) equal sums taken by
  hand over the per-prompt graphs' nodes and adjacency entries — prompts of different lengths, per-prompt targets,
  a feature active in one prompt only;
* combining the aggregates of two halves of the prompts gives the aggregate of all of them;
* sharded on a 2-worker local Ray cluster (a float64 model reloaded by the workers from its folder): the same
  identities and counts, and sums equal to float64 rounding; a rerun with ``out=`` resumes every shard;
* the result's table, ``top``, ``edges``, ``save``/``load``, plot; typed errors for bad input;
* over a cross-layer transcoder, the same sums by hand over each prompt's CLT graph (and sharded on Ray, the same
  identities, counts and sums as in process).
"""

from __future__ import annotations

from collections import defaultdict

import plotly.graph_objects as go
import pytest
import torch

import interp
from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import AggregateGraph, Transcoder, aggregate_graphs, attribution_graph
from tiny_models import tiny_hf_dir, tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_clt, random_transcoders

PROMPTS = ["w1 w2 w3 w4", "w5 w6 w7 w8 w9 w10", "w1 w2 w3", "w11 w12 w13 w14 w15 w16 w17"]
TARGETS = ["w4", "w11", "w4", "w18"]


@pytest.fixture(scope="module")
def llama():
    m = model_from_hf(tiny_hf_model("llama"), tiny_tokenizer(), name="tiny-llama")
    return m, random_transcoders(m, 64, seed=1, activation="topk", k=2)  # sparse: some features fire in one prompt


def _identity(g, i):
    """The identity of node i of graph g, from its label and tokens (docs/math.md §32)."""
    kind, lab = g.node_kind[i], g.node_labels[i]
    if kind == "feature":
        return lab.split("@")[0] + "@*"
    if kind == "error":
        return lab.split("@")[0] + "@*"
    if kind == "token":
        return f"embed[{g.tokens[g.node_pos[i]]}]"
    if lab == "logit":
        return "answer"  # each prompt's chosen target (or target − wrong): one identity over the task
    return lab  # logit[<id>]


def _by_hand(graphs, node_threshold=0.8, edge_threshold=0.98):
    """Sums and counts over the graphs' nodes and adjacency entries, by identity, in plain Python."""
    infl, act, direct = defaultdict(float), defaultdict(float), defaultdict(float)
    active, kept, npos = defaultdict(set), defaultdict(set), defaultdict(int)
    edge, edge_prompts = defaultdict(float), defaultdict(set)
    for k, g in enumerate(graphs):
        ids = [_identity(g, i) for i in range(g.n_nodes)]
        I = g.influence().double()
        outs = [j for j, kd in enumerate(g.node_kind) if kd == "logit"]
        w = g.output_weight.double()
        keep = set(g.prune(node_threshold, edge_threshold).node_labels)
        for i, ident in enumerate(ids):
            infl[ident] += float(I[i])
            act[ident] += float(g.activation[i])
            direct[ident] += sum(float(w[j]) * float(g.adjacency[j, i]) for j in outs)
            active[ident].add(k)
            npos[ident] += 1
            if g.node_labels[i] in keep:
                kept[ident].add(k)
        A = g.adjacency.double()
        for t, s in A.nonzero().tolist():
            edge[(ids[t], ids[s])] += float(A[t, s])
            edge_prompts[(ids[t], ids[s])].add(k)
    return infl, act, direct, active, kept, npos, edge, edge_prompts


def _check_against_hand(agg, graphs):
    infl, act, direct, active, kept, npos, edge, edge_prompts = _by_hand(graphs, agg.node_threshold, agg.edge_threshold)
    N = len(graphs)
    assert agg.n_prompts == N and sorted(agg.labels) == sorted(infl)
    df = agg.to_dataframe().set_index("node")
    for ident in infl:
        row = df.loc[ident]
        assert row["influence"] == pytest.approx(infl[ident] / N, rel=1e-12, abs=1e-15), ident
        assert row["activation"] == pytest.approx(act[ident] / N, rel=1e-12, abs=1e-15), ident
        assert row["direct"] == pytest.approx(direct[ident] / N, rel=1e-12, abs=1e-15), ident
        assert (row["n_active"], row["n_kept"], row["n_positions"]) == (
            len(active[ident]),
            len(kept[ident]),
            npos[ident],
        )
        assert row["influence_active"] == pytest.approx(infl[ident] / len(active[ident]), rel=1e-12, abs=1e-15)
    e = agg.edges()
    got = {(t, s): (wt, c) for s, t, wt, c in zip(e["source"], e["target"], e["weight"], e["n_prompts"])}
    assert set(got) == set(edge)
    for key, total in edge.items():
        assert got[key][0] == pytest.approx(total / N, rel=1e-12, abs=1e-15), key
        assert got[key][1] == len(edge_prompts[key]), key
    A = agg.adjacency()
    at = {lab: i for i, lab in enumerate(agg.labels)}
    dense = torch.zeros_like(A)
    for (t, s), total in edge.items():
        dense[at[t], at[s]] = total / N
    assert torch.allclose(A, dense, rtol=1e-12, atol=1e-15)
    return active


@pytest.mark.slow
def test_aggregate_equals_each_graph_alone(llama):
    m, tcs = llama
    agg = aggregate_graphs(m, PROMPTS, tcs, target=TARGETS, progress=False)
    graphs = [attribution_graph(m, p, tcs, target=t) for p, t in zip(PROMPTS, TARGETS)]
    assert len({len(g.tokens) for g in graphs}) == len(PROMPTS)  # every prompt has its own length
    active = _check_against_hand(agg, graphs)
    # a feature active in one prompt only: its mean is that prompt's sum over N, its mean when active the sum itself
    once = [i for i, lab in enumerate(agg.labels) if agg.node_kind[i] == "feature" and len(active[lab]) == 1]
    assert once, "the prompts share every feature: the one-prompt case is not exercised"
    i = once[0]
    (k,) = active[agg.labels[i]]
    g = graphs[k]
    alone = sum(float(g.influence()[j]) for j in range(g.n_nodes) if _identity(g, j) == agg.labels[i])
    row = agg[agg.labels[i]]
    assert row["n_active"] == 1 and row["influence"] == pytest.approx(alone / len(PROMPTS), rel=1e-12, abs=1e-15)
    assert row["influence_active"] == pytest.approx(alone, rel=1e-12, abs=1e-15)
    # outputs: every prompt's answer is one identity, whichever its token ("w4", "w11", "w18"), so edges into it
    # add up over the prompts
    ans = agg["answer"]
    assert ans["kind"] == "logit" and ans["n_active"] == 4 and ans["text"] == "the answer"
    assert [k for k in agg.node_kind if k == "logit"] == ["logit"]
    into = agg.edges(min_prompts=3)
    assert (into["target"] == "answer").any()  # one answer per prompt: no output had edges in 3 prompts before


def test_clt_aggregate_equals_each_graph_alone():
    """Over a cross-layer transcoder (3 layers: a layer-0 feature writes at 1 and 2): the aggregate against sums by
    hand over each prompt's CLT graph built alone; a feature's identity is its encoder's layer and index."""
    m = model_from_hf(tiny_hf_model("llama", n_layers=3), tiny_tokenizer(), name="tiny-llama-3")
    clt = random_clt(m, 64, seed=1, activation="topk", k=2)
    agg = aggregate_graphs(m, PROMPTS, clt, target=TARGETS, progress=False)
    graphs = [attribution_graph(m, p, clt, target=t) for p, t in zip(PROMPTS, TARGETS)]
    _check_against_hand(agg, graphs)
    layers = {l for l, k in zip(agg.node_layer, agg.node_kind) if k == "feature"}
    assert layers == {0, 1, 2} and agg.n_layers == 3


def test_top_logits_and_differences(llama):
    m, tcs = llama
    agg = aggregate_graphs(m, PROMPTS[:3], tcs, progress=False)  # each graph's outputs are its top logits
    _check_against_hand(agg, [attribution_graph(m, p, tcs) for p in PROMPTS[:3]])
    diff = aggregate_graphs(m, PROMPTS[:2], tcs, target="w3", wrong=["w4", "w5"], progress=False)
    graphs = [attribution_graph(m, p, tcs, target="w3", wrong=w) for p, w in zip(PROMPTS[:2], ["w4", "w5"])]
    _check_against_hand(diff, graphs)
    assert [lab for lab, k in zip(diff.labels, diff.node_kind) if k == "logit"] == ["answer"]
    assert diff["answer"]["text"] == "the answer − the wrong token"


def test_combine_halves(llama):
    m, tcs = llama
    whole = aggregate_graphs(m, PROMPTS, tcs, target=TARGETS, progress=False)
    a = aggregate_graphs(m, PROMPTS[:2], tcs, target=TARGETS[:2], progress=False)
    b = aggregate_graphs(m, PROMPTS[2:], tcs, target=TARGETS[2:], progress=False)
    both = AggregateGraph.combine([a, b])
    assert both.labels == whole.labels and both.n_prompts == whole.n_prompts
    for f in ("n_active", "n_kept", "n_positions", "edge_index", "edge_count"):
        assert torch.equal(getattr(both, f), getattr(whole, f)), f
    for f in ("influence_sum", "activation_sum", "direct_sum", "edge_sum"):
        assert torch.allclose(getattr(both, f), getattr(whole, f), rtol=1e-12, atol=1e-15), f


def test_result_contract(llama, tmp_path):
    m, tcs = llama
    agg = aggregate_graphs(m, PROMPTS, tcs, target=TARGETS, progress=False)
    assert repr(agg).startswith("AggregateGraph('tiny-llama', 4 prompts") and len(repr(agg)) < 600
    top = agg.top(3)  # by the direct effect on the answer, not by influence
    assert top["direct"].abs().tolist() == sorted(agg.to_dataframe()["direct"].abs(), reverse=True)[:3]
    feats = agg.to_dataframe().query("kind == 'feature'")
    bars = agg.plot(n=4).data[0]
    assert list(bars.x) == feats.sort_values("direct", key=abs, ascending=False, kind="stable")["node"].head(4).tolist()
    assert list(agg.plot(n=4, by="influence").data[0].y) == pytest.approx(
        feats.sort_values("influence", key=abs, ascending=False, kind="stable")["influence"].head(4).tolist()
    )
    with pytest.raises(ArgumentError, match="by='value'"):
        agg.plot(by="value")
    assert agg.edges(min_prompts=2)["n_prompts"].min() >= 2
    back = AggregateGraph.load(agg.save(tmp_path / "agg.safetensors"))
    assert (
        back.labels == agg.labels and torch.equal(back.edge_sum, agg.edge_sum) and torch.equal(back.n_kept, agg.n_kept)
    )
    assert isinstance(agg.plot(), go.Figure) and agg.to("cpu") is agg


def test_bad_input(llama):
    m, tcs = llama
    with pytest.raises(ArgumentError, match="non-empty list"):
        aggregate_graphs(m, [], tcs)
    with pytest.raises(ArgumentError, match="non-empty list"):
        aggregate_graphs(m, "w1 w2 w3", tcs)
    with pytest.raises(ArgumentError, match="transcoders has 1 entries"):
        aggregate_graphs(m, PROMPTS, tcs[:1])
    wide = [Transcoder(torch.zeros(16, 8), torch.zeros(16), torch.zeros(16, 8), torch.zeros(8)) for _ in tcs]
    with pytest.raises(ArgumentError, match="d_model=8"):
        aggregate_graphs(m, PROMPTS, wide)
    with pytest.raises(ArgumentError, match="target has 2 entries for 4 prompts"):
        aggregate_graphs(m, PROMPTS, tcs, target=["w1", "w2"])
    with pytest.raises(ArgumentError, match="node_threshold"):
        aggregate_graphs(m, PROMPTS, tcs, node_threshold=0.0)
    with pytest.raises(ArgumentError, match="cluster"):
        aggregate_graphs(m, PROMPTS, tcs, cluster="local")


@pytest.mark.slow
def test_sharded_on_ray_equals_in_process(tmp_path):
    pytest.importorskip("ray")
    m = interp.load_model(str(tiny_hf_dir("llama", tmp_path / "llama")), dtype=torch.float64)
    tcs = [t.to(dtype=torch.float64) for t in random_transcoders(m, 64, seed=1, activation="topk", k=2)]
    clt = random_clt(m, 64, seed=1, activation="topk", k=2, dtype=torch.float64)
    ref = aggregate_graphs(m, PROMPTS, tcs, target=TARGETS, progress=False)
    ref_clt = aggregate_graphs(m, PROMPTS, clt, target=TARGETS, progress=False)
    with interp.RayCluster(workers=2) as cluster:
        r = aggregate_graphs(m, PROMPTS, tcs, target=TARGETS, progress=False, cluster=cluster, out=tmp_path / "shards")
        again = aggregate_graphs(
            m, PROMPTS, tcs, target=TARGETS, progress=False, cluster=cluster, out=tmp_path / "shards"
        )
        r_clt = aggregate_graphs(m, PROMPTS, clt, target=TARGETS, progress=False, cluster=cluster)
    d = r.details["distributed"]
    print(f"{d['shards']} shards on {d['workers']} workers: bounds {d['bounds']}")
    assert d["shards"] > 1 and d["computed"] == d["shards"] and again.details["distributed"]["resumed"] == d["shards"]
    assert r_clt.details["distributed"]["shards"] > 1 and r_clt.labels != ref.labels
    for res, want in ((r, ref), (again, ref), (r_clt, ref_clt)):
        assert res.labels == want.labels and res.n_prompts == len(PROMPTS)
        for f in ("n_active", "n_kept", "n_positions", "edge_index", "edge_count"):
            assert torch.equal(getattr(res, f), getattr(want, f)), f
        for f in ("influence_sum", "activation_sum", "direct_sum", "edge_sum"):
            a, b = getattr(res, f), getattr(want, f)
            assert float((a - b).abs().max()) <= 1e-12 * float(b.abs().max()), f
