"""Figures checked structurally: trace types, plotted values against independent computations, labels.

References are computed here without interp.plots: the plain HF model (logits, hidden states,
attention weights, sublayer outputs through forward hooks), dense matrix products and
``torch.linalg.eigvals`` for the circuit figures.
"""

import json
import re

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from transformer_lens import FactoredMatrix

from interp.attribution import attribute_logits
from interp.errors import ArgumentError, ShapeError
from interp.stream import attention_patterns
from interp.circuits import CompositionGraph, composition_edges, composition_graph, composition_graph_json
from interp.plots import (
    attention_pattern_figure,
    attribution_heatmap,
    attribution_waterfall,
    copying_score_map,
    decomposition_figure,
    ov_eigenvalue_figure,
    residual_stream_figure,
    top_token_table,
)
from interp.stream import trace
from tiny_models import hooked_forward, tiny_hf_model, tiny_model

PROMPT = "w1 w2 w3 w4 w1 w2"


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


def _hf_logits(family, model, prompt):
    hf = tiny_hf_model(family)
    with torch.no_grad():
        return hf(model.to_tokens(prompt)).logits[0, -1].double()


# --- decomposition -------------------------------------------------------------------------


def test_decomposition_figure_bars_are_projections_on_the_total(gpt2):
    dec = trace(gpt2, PROMPT).decompose("unembed")
    k = 5
    fig = decomposition_figure(dec, pos=-1, k=k)
    assert [t.type for t in fig.data] == ["bar", "scatter"]
    c = dec.contributions[:, 0, -1].double()
    t = dec.total[0, -1].double()
    proj = c @ t / t.norm()
    order = torch.argsort(-proj.abs())
    bars, diamonds = fig.data
    names = list(bars.y)[::-1]
    vals = np.array(bars.x[::-1])
    assert names[:k] == [dec.labels[i] for i in order[:k]]
    assert names[k] == f"other {len(dec.labels) - k} terms"
    np.testing.assert_allclose(vals[:k], proj[order[:k]].numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(vals[k], proj[order[k:]].sum().item(), rtol=1e-6, atol=1e-9)
    # the bars add up to the norm of the model's own final-norm output
    np.testing.assert_allclose(vals.sum(), t.norm().item(), rtol=1e-5)
    np.testing.assert_allclose(np.array(diamonds.x[::-1])[:k], c[order[:k]].norm(dim=-1).numpy(), rtol=1e-6)
    assert all(re.search(r"term <b>.+</b>.*projection on total: .*w2", h) for h in bars.hovertext)


def test_decomposition_plot_method_and_bad_args(gpt2):
    dec = trace(gpt2, PROMPT).decompose("L1.mlp.in")
    assert isinstance(dec.plot(k=3), go.Figure)
    with pytest.raises(ArgumentError, match="pos=99"):
        decomposition_figure(dec, pos=99)
    with pytest.raises(ArgumentError, match="k=0"):
        decomposition_figure(dec, k=0)


# --- attribution ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def attr(gpt2):
    return attribute_logits(gpt2, PROMPT, answer="w3", wrong="w4")


def test_attribution_heatmap_cells_and_side_bars_add_up_to_the_hf_logit_difference(gpt2, attr):
    fig = attribution_heatmap(attr, prompt=0)
    heat = [t for t in fig.data if t.type == "heatmap"]
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(heat) == 1 and len(bars) == 1
    z = np.array(heat[0].z, dtype=float)
    assert z.shape == (2, 4)
    assert heat[0].zmid == 0 and heat[0].zmin == -heat[0].zmax
    assert heat[0].colorscale[0][1] != heat[0].colorscale[-1][1]  # diverging: two different ends
    v = attr.values[:, 0].double()
    for l in range(2):
        for h in range(4):
            assert z[l, h] == pytest.approx(v[attr.labels.index(f"L{l}.H{h}")].item(), rel=1e-6, abs=1e-12)
    side = dict(zip(bars[0].y, bars[0].x))
    assert set(side) == {lab for lab in attr.labels if not re.match(r"L\d+\.H\d+$", lab)}
    lg = _hf_logits("gpt2", gpt2, PROMPT)
    tok = gpt2.tokenizer.convert_tokens_to_ids
    expected = (lg[tok("w3")] - lg[tok("w4")]).item()
    assert z.sum() + sum(side.values()) == pytest.approx(expected, abs=1e-4)
    assert "closure error" in fig.layout.title.text
    assert any("L0.H0" in h and "value" in h for row in heat[0].hovertext for h in row)


def test_attribution_waterfall_walks_top_terms_to_the_total(gpt2, attr):
    k = 4
    fig = attribution_waterfall(attr, prompt=0, k=k)
    (wf,) = fig.data
    assert wf.type == "waterfall"
    v = attr.values[:, 0].double()
    top = sorted(torch.argsort(-v.abs())[:k].tolist())  # stream order
    assert list(wf.x[:k]) == [attr.labels[i] for i in top]
    assert wf.x[k] == f"other {len(v) - k} terms" and wf.x[-1] == "total"
    assert list(wf.measure) == ["relative"] * (k + 1) + ["total"]
    np.testing.assert_allclose(wf.y[:k], v[top].numpy(), rtol=1e-6)
    lg = _hf_logits("gpt2", gpt2, PROMPT)
    tok = gpt2.tokenizer.convert_tokens_to_ids
    assert sum(wf.y[:-1]) == pytest.approx((lg[tok("w3")] - lg[tok("w4")]).item(), abs=1e-4)
    assert "closure error" in fig.layout.title.text and "w3" in fig.layout.title.text


def test_attribution_figures_reject_empty_results():
    class Empty:
        values = torch.zeros(0, 1)
        labels = []

    with pytest.raises(ArgumentError, match="no values"):
        attribution_heatmap(Empty())
    with pytest.raises(ArgumentError, match="attribution"):
        attribution_waterfall(object())


# --- residual stream -----------------------------------------------------------------------


def _hf_sublayer_outputs(family, model, prompt):
    """HF hidden states and each attention sublayer's output (forward hooks), position -1."""
    hf = tiny_hf_model(family)
    attn_out = {}
    blocks = hf.transformer.h if family == "gpt2" else hf.bert.encoder.layer
    hooks = []
    for l, blk in enumerate(blocks):
        mod = blk.attn if family == "gpt2" else blk.attention.self
        hooks.append(mod.register_forward_hook(lambda m, i, o, l=l: attn_out.__setitem__(l, o[0].detach())))
    out = hooked_forward(hf, hooks, model.to_tokens(prompt), output_hidden_states=True)
    return out.hidden_states, attn_out


def test_residual_stream_pre_norm_matches_hf_hidden_states_and_attention_writes(gpt2):
    tr = trace(gpt2, PROMPT)
    fig = residual_stream_figure(tr, pos=-1)
    types = [t.type for t in fig.data]
    assert types[0] == "scatter" and types.count("heatmap") == 2 and "bar" in types
    line = fig.data[0]
    assert list(line.x) == ["L0.pre", "L0.mid", "L0.post", "L1.pre", "L1.mid", "L1.post"]
    hs, attn = _hf_sublayer_outputs("gpt2", gpt2, PROMPT)
    # HF hidden_states[l] is the input of block l (= resid_pre); the last one is after ln_f
    assert line.y[0] == pytest.approx(hs[0][0, -1].norm().item(), rel=1e-5)
    assert line.y[3] == pytest.approx(hs[1][0, -1].norm().item(), rel=1e-5)
    heat = next(t for t in fig.data if t.type == "heatmap" and t.name == "write norms")
    z = np.array(heat.customdata, dtype=float)  # the norms; the colours are their log10
    np.testing.assert_allclose(np.array(heat.z, dtype=float), np.log10(z))
    rows = list(heat.y)
    assert rows == ["embed", "L0.attn", "L0.mlp", "L1.attn", "L1.mlp"]
    # the attention write (heads + b_O) is HF's attention output, constant after it joins
    for l in range(2):
        r = z[rows.index(f"L{l}.attn")]
        assert np.isnan(r[3 * l])  # not yet written at resid_pre of its layer
        np.testing.assert_allclose(r[3 * l + 1 :], attn[l][0, -1].norm().item(), rtol=1e-5)
    assert np.isfinite(z[0]).all() and z[0, 0] == pytest.approx(line.y[0], rel=1e-6)
    every = next(t for t in fig.data if t.type == "heatmap" and t.name == "stream norms")
    np.testing.assert_allclose(np.array(every.customdata, dtype=float)[:, 3], hs[1][0].norm(dim=-1).numpy(), rtol=1e-5)


def test_residual_stream_post_norm_matches_hf_hidden_states():
    bert = tiny_model("bert")
    tr = trace(bert, PROMPT)
    fig = residual_stream_figure(tr, pos=2)
    line = fig.data[0]
    hs, _ = _hf_sublayer_outputs("bert", bert, PROMPT)
    post = [i for i, x in enumerate(line.x) if x.endswith(".post")]
    for l, i in enumerate(post):  # BERT hidden_states[l+1] = output of layer l
        assert line.y[i] == pytest.approx(hs[l + 1][0, 2].norm().item(), rel=1e-5)
    heat = next(t for t in fig.data if t.type == "heatmap" and t.name == "write norms")
    z = np.array(heat.customdata, dtype=float)
    # at resid_pre of layer 0 only the embeddings are in the stream
    assert z[list(heat.y).index("embed"), 0] == pytest.approx(line.y[0], rel=1e-5)
    # post-norm: a write's contribution changes from point to point (it passes through norms)
    r = z[list(heat.y).index("L0.attn")]
    assert np.isfinite(r[1:]).all() and np.ptp(r[1:]) > 1e-6


def test_residual_stream_bad_position(gpt2):
    with pytest.raises(ArgumentError, match="pos=40"):
        residual_stream_figure(trace(gpt2, PROMPT), pos=40)


# --- composition graph ---------------------------------------------------------------------


def _scores(seed=0, L=3, H=2):
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(L, H, L, H, generator=g)
    s[torch.arange(L)[:, None, None, None] >= torch.arange(L)[None, None, :, None].expand(L, H, L, H)] = float("nan")
    return s


def test_composition_edges_follow_layers_threshold_and_cap():
    q, k = _scores(0), _scores(1)
    g = composition_edges({"Q": q, "K": k}, threshold=0.5, max_edges=None)
    assert g.edges and all(e["score"] >= 0.5 for e in g.edges)
    expected = {
        ("Q", l1, h1, l2, h2)
        for l1 in range(3)
        for h1 in range(2)
        for l2 in range(3)
        for h2 in range(2)
        if l1 < l2 and q[l1, h1, l2, h2] >= 0.5
    }
    got = {(e["kind"], *map(int, re.findall(r"\d+", e["src"] + e["dst"]))) for e in g.edges if e["kind"] == "Q"}
    assert got == expected
    for e in g.edges:
        l1, h1 = map(int, re.findall(r"\d+", e["src"]))
        l2, h2 = map(int, re.findall(r"\d+", e["dst"]))
        ref = (q if e["kind"] == "Q" else k)[l1, h1, l2, h2].item()
        assert e["score"] == pytest.approx(ref) and l1 < l2
    capped = composition_edges({"Q": q}, max_edges=3)
    top3 = sorted(q[~q.isnan()].tolist(), reverse=True)[:3]
    assert [e["score"] for e in capped.edges] == pytest.approx(top3)


def test_composition_graph_figure_distinguishes_kinds_and_exports_json():
    scores = {"Q": _scores(0), "K": _scores(1), "V": _scores(2)}
    fig = composition_graph(scores, max_edges=4, node_values={"L0.H0": 1.5})
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len(lines) == 12
    style = {t.legendgroup: (t.line.color, t.line.dash) for t in lines}
    assert len(set(style.values())) == 3  # Q, K, V: different colour and dash
    widths = {t.line.width for t in lines}
    assert len(widths) > 1  # width grows with the score
    nodes = fig.data[-1]
    assert "L0.H0" in nodes.text and any("1.5" in h for h in nodes.hovertext)
    j = json.loads(composition_graph_json(scores, max_edges=4))
    assert len(j["edges"]) == 12 and {e["kind"] for e in j["edges"]} == {"Q", "K", "V"}
    assert {n["label"] for n in j["nodes"]} >= {e["src"] for e in j["edges"]} | {e["dst"] for e in j["edges"]}


def test_composition_graph_from_composition_scores_restricted_to_heads():
    from interp.circuits._composition import composition_scores

    m = tiny_model("llama", n_layers=3)
    cs = composition_scores(m, kind="K")
    heads = ["L0.H1", "L1.H2", "L2.H0"]
    g = composition_edges(cs, heads=heads, max_edges=None)
    assert {n["label"] for n in g.nodes} == set(heads)
    assert {(e["src"], e["dst"]) for e in g.edges} == {("L0.H1", "L1.H2"), ("L0.H1", "L2.H0"), ("L1.H2", "L2.H0")}
    for e in g.edges:
        l1, h1 = map(int, re.findall(r"\d+", e["src"]))
        l2, h2 = map(int, re.findall(r"\d+", e["dst"]))
        assert e["kind"] == "K" and e["score"] == pytest.approx(cs.scores[l1, h1, l2, h2].item())
    assert isinstance(g, CompositionGraph) and g.to_dataframe().shape[0] == 3
    with pytest.raises(ArgumentError, match="heads contains"):
        composition_edges(cs, heads=["L9.H0"])
    with pytest.raises(ShapeError):
        composition_edges(torch.zeros(2, 3))


# --- OV / QK circuits ----------------------------------------------------------------------


def test_copying_score_map_values():
    s = torch.tensor([[0.5, -1.0, 0.0], [1.0, 0.25, -0.3]])
    fig = copying_score_map(s)
    (hm,) = fig.data
    np.testing.assert_allclose(np.array(hm.z, dtype=float), s.numpy())
    assert hm.zmid == 0 and hm.zmin == -1 and hm.zmax == 1
    assert "L1.H0" in hm.hovertext[1][0] and "1" in hm.hovertext[1][0]


def test_ov_eigenvalue_figure_matches_dense_eigenvalues(gpt2):
    W = gpt2.weights
    A, B = W.W_V[1, 2], W.W_O[1, 2]  # [d_model, d_head], [d_head, d_model]
    fm = FactoredMatrix(A, B)
    fig = ov_eigenvalue_figure(fm, label="L1.H2 OV")
    (sc,) = fig.data
    got = np.sort_complex(np.array(sc.x) + 1j * np.array(sc.y))
    dense = torch.linalg.eigvals((A @ B).double()).numpy()
    dense = dense[np.argsort(-np.abs(dense))][: A.shape[1]]  # the d_head nonzero ones
    np.testing.assert_allclose(np.sort(np.abs(got)), np.sort(np.abs(dense)), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got.real.sum(), dense.real.sum(), rtol=1e-4, atol=1e-6)
    score = dense.real.sum() / np.abs(dense).sum()
    assert f"{score:.3f}" in fig.layout.title.text
    with pytest.raises(ShapeError, match="index one head"):
        ov_eigenvalue_figure(FactoredMatrix(W.W_V[0], W.W_O[0]))


def _spectrum(values):
    """A FactoredMatrix [8, 8] of hidden dim len(values) whose nonzero eigenvalues are ``values`` (a rotated
    diagonal: A = Q[:, :k] diag(values), B = Q[:, :k]ᵀ)."""
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    k = len(values)
    return FactoredMatrix(Q[:, :k] * torch.tensor(values, dtype=torch.float64), Q[:, :k].T.contiguous())


def test_ov_eigenvalue_figure_log_radius_when_one_eigenvalue_dominates():
    values = [1.3e5, 40.0, 12.0, -3.0, 0.7, 0.2]
    fig = ov_eigenvalue_figure(_spectrum(values), label="L23.H4 full OV")
    (sc,) = fig.data
    radius = np.hypot(np.array(sc.x), np.array(sc.y))
    # every eigenvalue readable: the smallest plots at >= 5 % of the largest's radius (on a linear plot: 1.5e-6)
    assert radius.min() >= 0.05 * radius.max()
    assert fig.layout.meta["scale"] == "log"
    assert "log10(1 + |λ|/s), s = 0.01" in fig.layout.xaxis.title.text
    assert "log radial scale" in fig.layout.title.text
    # the angle is kept (sign of real eigenvalues), the order of magnitudes too, and the hover keeps the true λ
    true = np.array(sc.customdata)[:, 0]
    np.testing.assert_allclose(np.sort(true), np.sort(values), rtol=1e-9)
    np.testing.assert_array_equal(np.sign(sc.x), np.sign(true))
    assert list(np.argsort(radius)) == list(np.argsort(np.abs(true)))
    assert any("|λ| = 0.2" in h for h in sc.hovertext) and any("1.3e+05" in h for h in sc.hovertext)
    # a spread-out spectrum stays linear (λ itself), and the scale can be forced either way
    flat = ov_eigenvalue_figure(_spectrum([3.0, -2.0, 1.0, 0.5]))
    assert flat.layout.meta["scale"] == "linear" and flat.layout.xaxis.title.text == "Re λ"
    np.testing.assert_allclose(np.sort(flat.data[0].x), [-2.0, 0.5, 1.0, 3.0], atol=1e-9)
    assert ov_eigenvalue_figure(_spectrum(values), scale="linear").layout.meta["scale"] == "linear"
    assert ov_eigenvalue_figure(_spectrum([3.0, 1.0]), scale="log").layout.meta["scale"] == "log"
    with pytest.raises(ArgumentError, match="scale='symlog'"):
        ov_eigenvalue_figure(_spectrum(values), scale="symlog")


def test_top_token_table_matches_the_dense_full_circuit(gpt2):
    W = gpt2.weights
    fm = FactoredMatrix(W.W_E @ W.W_V[0, 1], W.W_O[0, 1] @ W.W_U)
    dense = (W.W_E @ W.W_V[0, 1] @ W.W_O[0, 1] @ W.W_U).double()
    toks = [5, 9, 17, 40]
    dec = lambda i: f"t{i}"  # noqa: E731
    fig = top_token_table(fm, toks, k=2, decode=dec)
    (tab,) = fig.data
    cells = tab.cells.values
    assert list(cells[0]) == [f"t{t}" for t in toks]
    sub = dense[toks][:, toks]
    for i in range(len(toks)):
        vals, idx = sub[i].topk(2)
        for j in range(2):
            assert cells[1 + j][i].startswith(f"t{toks[idx[j]]} ")
            assert f"({vals[j].item():.3g})" in cells[1 + j][i]
    fig_all = top_token_table(fm, toks[:1], k=3, decode=dec, targets="all")
    best = dense[toks[0]].topk(3).indices.tolist()
    assert [c[0].split()[0] for c in fig_all.data[0].cells.values[1:]] == [f"t{b}" for b in best]
    with pytest.raises(ArgumentError, match="token ids"):
        top_token_table(fm, [10_000])


# --- attention patterns --------------------------------------------------------------------


def test_attention_patterns_match_hf_attention_weights(gpt2):
    heads = ["L0.H3", "L1.H0"]
    ap = attention_patterns(gpt2, PROMPT, heads)
    hf = tiny_hf_model("gpt2")
    with torch.no_grad():
        att = hf(gpt2.to_tokens(PROMPT), output_attentions=True).attentions
    ref = torch.stack([att[0][0, 3], att[1][0, 0]])
    torch.testing.assert_close(ap.patterns, ref, rtol=1e-5, atol=1e-6)
    assert ap.str_tokens == ["<bos>", "w1", "w2", "w3", "w4", "w1", "w2"]
    fig = attention_pattern_figure(ap)
    assert [t.type for t in fig.data] == ["heatmap", "heatmap"]
    for tr_, r in zip(fig.data, ref):
        np.testing.assert_allclose(np.array(tr_.z, dtype=float), r.numpy(), rtol=1e-5, atol=1e-7)
        assert tr_.zmin == 0 and tr_.zmax == 1
    assert list(fig.data[0].x) == ["0:<bos>", "1:w1", "2:w2", "3:w3", "4:w4", "5:w1", "6:w2"]
    assert [a.text for a in fig.layout.annotations] == heads
    assert "L1.H0" in fig.data[1].hovertext[6][5] and "5:w1" in fig.data[1].hovertext[6][5]


def test_attention_pattern_figure_bad_input():
    with pytest.raises(ArgumentError, match=r"str_tokens must be 3 strings \(one per key position\), got 2 items"):
        attention_pattern_figure(torch.rand(1, 3, 3), ["a", "b"])
    with pytest.raises(ShapeError):
        attention_pattern_figure(torch.rand(3))
    # read the patterns as attention_view does: more queries than keys was drawn with the wrong query labels
    # (the last nq of nk keys, wrapping round), tokens that are not strings reached the labels
    with pytest.raises(ShapeError, match="patterns has 4 query positions but only 3 key positions"):
        attention_pattern_figure(torch.rand(1, 4, 3))
    with pytest.raises(ArgumentError, match="str_tokens must be 3 strings"):
        attention_pattern_figure(torch.rand(1, 3, 3), ["a", "b", 7])
    with pytest.raises(ShapeError, match="at least one of each"):
        attention_pattern_figure(torch.rand(1, 2, 0))
    with pytest.raises(ArgumentError, match="heads contains"):
        attention_patterns(tiny_model("gpt2"), PROMPT, ["L5.H0"])


def test_composition_graph_from_virtual_weight_norms_expands_gqa_groups():
    from interp.circuits import virtual_weight_norms

    m = tiny_model("llama")  # 4 query heads, 2 KV heads: KV head g is read by query heads 2g, 2g+1
    vw = virtual_weight_norms(m)
    g = composition_edges(vw, max_edges=None)
    by = {(e["kind"], e["src"], e["dst"]): e["score"] for e in g.edges}
    for h1 in range(4):
        for h2 in range(4):
            assert by[("Q", f"L0.H{h1}", f"L1.H{h2}")] == pytest.approx(vw[f"L0.H{h1}", f"L1.attn.q[H{h2}]"])
            for k in "kv":
                assert by[(k.upper(), f"L0.H{h1}", f"L1.H{h2}")] == pytest.approx(
                    vw[f"L0.H{h1}", f"L1.attn.{k}[H{h2 // 2}]"]
                )
    assert len(g.edges) == 3 * 16
