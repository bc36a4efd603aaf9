"""Attribution graphs over transcoders: exact closure on every pre-norm family, and checks against
computations that do not use the graph code.

* closure (every tiny pre-norm decoder family in ``FAMILIES``: GPT-2, Llama, NeoX, GPT-J, Qwen 2, Qwen 3, Mistral,
  Gemma, Gemma 2, Gemma 3, Phi-3, OLMo 2, Mixtral, OLMoE — 14, each with relu, skip, top-k and JumpReLU
  transcoders): every active feature's pre-activation = Σ incoming edges + its constant term, and the output
  (logit or logit difference) = Σ incoming edges + its constant term, ≤ 1e-4 relative in float32 (printed);
* the output's value is the logit of the bridge's own forward (``attribute_logits``, read off its hooks; for
  Gemma 2 the graph's output is the logit before the soft-cap c, and c·tanh(output/c) is the model's logit);
* on a one-layer Llama every token → feature edge equals a hand computation from the Hugging Face module's
  weights (embedding, norms, q/k/v/o projections, its rotary embedding), not from the engine;
* the edges into the output from the last layer's nodes at the last position (its features and its error
  node) sum to that MLP's direct logit attribution (``attribute_logits(unit="component")``) when the
  transcoder has no b_dec and no skip term — the only path from that MLP write to the logit is direct;
* no edge runs backwards (from a later layer or position) and source nodes have no incoming edges;
* influence, pruning, the replacement and completeness scores on a hand-built graph.
"""

from __future__ import annotations

import math

import pytest
import torch

import interp
from interp.errors import ArgumentError, UnsupportedArchitectureError
from interp.features import AttributionGraph, attribution_graph
from tiny_models import hooked_forward, tiny_model
from tiny_transcoders import random_transcoders

PROMPT = "w1 w2 w3 w4 w5 w6"
FAMILIES = (
    "gpt2",
    "llama",
    "neox",
    "gptj",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "qwen2",
    "mistral",
    "gemma",
    "phi3",
    "olmo2",
    "mixtral",
    "olmoe",
)  # every pre-norm decoder family (Mixtral, OLMoE: the routed MLP as a whole)


@pytest.fixture(scope="module")
def models():
    return {}


def _model(models, family):
    if family not in models:
        models[family] = tiny_model(family)
    return models[family]


def _check_closure(g: AttributionGraph, tol: float = 1e-4) -> None:
    kinds = g.node_kind
    rows = [i for i, k in enumerate(kinds) if k in ("feature", "logit")]
    resid = g.value[rows] - (g.adjacency[rows].sum(1) + g.bias[rows])
    scale = g.adjacency[rows].abs().sum(1) + g.bias[rows].abs()
    rel = float((resid.abs() / scale).max())
    print(
        f"closure {g.model_name} {g.target}: max |error| {float(resid.abs().max()):.2e}, relative {rel:.2e} "
        f"({len(rows) - 1} features)"
    )
    assert rel <= tol and g.relative_error <= tol
    assert abs(float(resid.abs().max()) - g.closure_error) <= 1e-6 * max(1.0, g.closure_error)
    src = [i for i, k in enumerate(kinds) if k in ("error", "token")]
    assert not g.adjacency[src].any()  # sources have no incoming edges
    layer, pos = torch.tensor(g.node_layer), torch.tensor(g.node_pos)
    feat = torch.tensor([k == "feature" for k in kinds])
    back = (layer[None, :] >= layer[:, None]) | (pos[None, :] > pos[:, None])  # [target, source]
    back &= feat[:, None]
    assert not (g.adjacency[back] != 0).any()  # into a feature only from lower layers, earlier positions


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["relu", "skip", "topk", "jumprelu"])
def test_graph_closes(models, family, kind):
    m = _model(models, family)
    tcs = random_transcoders(m, 24, seed=1, activation="relu" if kind == "skip" else kind, skip=kind == "skip")
    g = attribution_graph(m, PROMPT, tcs, batch_size=7)
    assert sum(k == "feature" for k in g.node_kind) > 0
    _check_closure(g)
    outs = [i for i, k in enumerate(g.node_kind) if k == "logit"]
    assert len(outs) == len(g.target_ids) and g.node_labels[outs[0]] == f"logit[{g.target_ids[0]}]"
    c = m.arch.final_softcap  # Gemma 2: the graph's outputs are the logits before the soft-cap
    w = g.output_weight[outs]
    assert (w[:-1] >= w[1:]).all() and (len(outs) == 10 or float(w.sum()) >= 0.95)  # top logits, as circuit-tracer
    for i, tid in ((outs[0], g.target_ids[0]), (outs[-1], g.target_ids[-1])):
        la = interp.attribute_logits(m, PROMPT, answer=tid, unit="component")
        out = c * math.tanh(float(g.value[i]) / c) if c else float(g.value[i])
        assert out == pytest.approx(float(la.logit[0]), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_logit_difference_and_direct_path(models, family):
    m = _model(models, family)
    L = m.arch.n_layers
    g = attribution_graph(m, PROMPT, random_transcoders(m, 24, seed=2, b_dec=False), target="w3", wrong="w4", pos=-1)
    _check_closure(g)
    la = interp.attribute_logits(m, PROMPT, answer="w3", wrong="w4", unit="component")
    assert float(g.value[-1]) == pytest.approx(float(la.logit[0]), rel=1e-5, abs=1e-5)
    last = len(g.tokens) - 1
    at = [
        i
        for i, (k, l, p) in enumerate(zip(g.node_kind, g.node_layer, g.node_pos))
        if k in ("feature", "error") and l == L - 1 and p == last
    ]
    dla = float(la[f"L{L - 1}.mlp"][0])
    assert float(g.adjacency[-1, at].sum()) == pytest.approx(dla, rel=1e-4, abs=1e-5)


def test_batch_size_does_not_change_edges(models):
    m = _model(models, "llama")
    tcs = random_transcoders(m, 16, seed=3)
    a, b = attribution_graph(m, PROMPT, tcs, batch_size=1), attribution_graph(m, PROMPT, tcs, batch_size=1000)
    # equal up to fp32 rounding (the passes' products have other shapes, so other summation orders), relative
    # to the largest edge: an error node's edge is a dot product with a large error vector
    scale = float(b.adjacency.abs().max())
    assert torch.allclose(a.adjacency, b.adjacency, rtol=1e-5, atol=1e-6 * scale) and a.node_labels == b.node_labels


@pytest.mark.parametrize("family", ["llama", "gptj", "gemma2", "qwen3"])
def test_edges_down_equal_edges_up(models, family, monkeypatch):
    """Every edge computed twice: targets' gradients carried down to the embeddings (meeting layer 0) and
    sources' images carried up to the top (meeting layer n_layers), two independent products of the frozen
    layers; also a meeting layer in between. fp64, skip transcoders (the skip term in both directions)."""
    from interp.features import _jacobian

    m = tiny_model(family, n_layers=3, dtype=torch.float64)
    tcs = random_transcoders(m, 16, seed=5, skip=True)
    graphs = {}
    for meet in (0, 2, 3):
        monkeypatch.setattr(_jacobian.FrozenJacobian, "_meeting_layer", lambda self, *a, meet=meet: meet)
        graphs[meet] = attribution_graph(m, PROMPT, tcs, batch_size=3)
    down = graphs[0].adjacency
    assert float(down.abs().max()) > 0.1
    for g in graphs.values():
        assert torch.allclose(g.adjacency, down, rtol=1e-10, atol=1e-12)
        assert g.relative_error < 1e-10


def test_refusals(models):
    m = _model(models, "llama")
    tcs = random_transcoders(m, 8)
    with pytest.raises(UnsupportedArchitectureError, match="post-norm"):
        bert = tiny_model("bert")
        attribution_graph(bert, PROMPT, random_transcoders(bert, 8))
    with pytest.raises(UnsupportedArchitectureError, match="MLP"):
        toy = interp.load_model("toy-attn-only-2l")
        attribution_graph(toy, torch.tensor([[0, 5, 6]]), random_transcoders(toy, 8))
    with pytest.raises(ArgumentError, match="layers"):
        attribution_graph(m, PROMPT, tcs[:1])
    with pytest.raises(ArgumentError, match="one prompt"):
        attribution_graph(m, [PROMPT, PROMPT], tcs)
    with pytest.raises(ArgumentError, match="pos="):
        attribution_graph(m, PROMPT, tcs, pos=40)
    with pytest.raises(ArgumentError, match="batch_size"):
        attribution_graph(m, PROMPT, tcs, batch_size=0)
    with pytest.raises(ArgumentError, match="desired_logit_prob"):
        attribution_graph(m, PROMPT, tcs, desired_logit_prob=0)
    with pytest.raises(ArgumentError, match="needs target"):
        attribution_graph(m, PROMPT, tcs, wrong="w3")


def _hand_graph() -> AttributionGraph:
    # nodes: f0 (feature), e0 (error), t0 (token), out; f0 ← t0 (2), f0 ← e0 (−1); out ← f0 (3), e0 (1), t0 (−4)
    A = torch.zeros(4, 4)
    A[0, 2], A[0, 1] = 2.0, -1.0
    A[3, 0], A[3, 1], A[3, 2] = 3.0, 1.0, -4.0
    return AttributionGraph(
        adjacency=A,
        bias=torch.zeros(4),
        value=torch.tensor([1.0, 0, 0, 0]),
        activation=torch.ones(4),
        node_labels=["L0.F0@0", "L0.mlp_error@0", "embed@0", "logit"],
        node_kind=["feature", "error", "token", "logit"],
        node_layer=[0, 0, -1, 1],
        node_pos=[0, 0, 0, 0],
        node_feature=[0, -1, -1, -1],
        tokens=[1],
        target_ids=[5],
        target="'x'",
        closure_error=0.0,
        relative_error=0.0,
        n_layers=1,
        model_name="hand",
    )


def test_influence_and_scores_by_hand():
    g = _hand_graph()
    # Â: row f0 = [0, 1/3, 2/3, 0]; row out = [3/8, 1/8, 4/8, 0]. influence = w Â + w Â² (Â³ = 0)
    # w Â = [3/8, 1/8, 1/2, 0]; w Â² = 3/8 · row f0 = [0, 1/8, 1/4, 0]
    assert torch.allclose(g.influence(), torch.tensor([3 / 8, 1 / 4, 3 / 4, 0]))
    assert g.replacement_score() == pytest.approx((3 / 4) / (3 / 4 + 1 / 4))
    # completeness: non-error fraction per row [1 − 1/3, 1, 1, 1 − 1/8], weights influence + w = [3/8, 1/4, 3/4, 1]
    want = ((2 / 3) * 3 / 8 + 1 / 4 + 3 / 4 + (7 / 8) * 1) / (3 / 8 + 1 / 4 + 3 / 4 + 1)
    assert g.completeness_score() == pytest.approx(want)
    full = g.prune(1.0, 1.0)
    assert full.node_labels == g.node_labels and torch.equal(full.adjacency, g.adjacency)
    small = g.prune(0.5, 0.5)  # the token (always kept) and the output; the feature and error drop
    assert set(small.node_labels) >= {"embed@0", "logit"}
    assert set(small.node_labels) <= set(g.node_labels)
    with pytest.raises(ArgumentError, match="node_threshold"):
        g.prune(1.5)


def test_prune_and_save(models, tmp_path):
    m = _model(models, "gpt2")
    g = attribution_graph(m, PROMPT, random_transcoders(m, 24, seed=4))
    p = g.prune()
    n_tok = len(g.tokens)
    assert sum(k == "token" for k in p.node_kind) == n_tok and p.node_kind[-1] == "logit"
    assert p.n_nodes <= g.n_nodes and set(p.node_labels) <= set(g.node_labels)
    assert 0 <= g.replacement_score() <= 1 and 0 <= g.completeness_score() <= 1
    back = AttributionGraph.load(g.save(tmp_path / "g.safetensors"))
    assert torch.equal(back.adjacency, g.adjacency) and back.node_labels == g.node_labels
    assert len(g.edges()) == int((g.adjacency != 0).sum())


def test_token_edges_by_hand_from_the_hf_model():
    """A one-layer Llama (no biases): the edge from the embedding at position p into a feature at position q is
    W_enc[f] · γ2/σ2_q ⊙ ([p = q] e_p + Σ_h A_h[q, p] (γ1 ⊙ e_p/σ1_p) W_V^h W_O^h), from the Hugging Face
    module's own weights (its rotary embedding and ``apply_rotary_pos_emb`` for the pattern) — not from the engine."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from interp.engine import model_from_hf
    from tiny_models import tiny_hf_model, tiny_tokenizer

    hf = tiny_hf_model("llama", n_layers=1)
    m = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-1l")
    (tc,) = random_transcoders(m, 16, seed=5)
    g = attribution_graph(m, PROMPT, [tc])
    _check_closure(g)
    ids = m.to_tokens(PROMPT)
    blk, at = hf.model.layers[0], hf.model.layers[0].self_attn
    eps = hf.config.rms_norm_eps
    H, dh, Hkv = hf.config.num_attention_heads, hf.config.head_dim, hf.config.num_key_value_heads
    rms = lambda x: (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # noqa: E731
    with torch.no_grad():
        e = hf.model.embed_tokens(ids)[0]  # [n, d]
        n = e.shape[0]
        s1 = rms(e)
        x1 = blk.input_layernorm.weight * e / s1
        q = (x1 @ at.q_proj.weight.T).view(n, H, dh).transpose(0, 1)[None]
        k = (x1 @ at.k_proj.weight.T).view(n, Hkv, dh).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)[None]
        cos, sin = hf.model.rotary_emb(e[None], torch.arange(n)[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        scores = (q[0] @ k[0].transpose(-1, -2)) * dh**-0.5
        A = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")).softmax(-1)  # [H, n, n]
        v = (x1 @ at.v_proj.weight.T).view(n, Hkv, dh).repeat_interleave(H // Hkv, dim=1)  # [n, H, dh]
        W_O = at.o_proj.weight.T.view(H, dh, -1)  # [H, dh, d]
        mid = e + torch.einsum("hqp,phd,hdm->qm", A, v, W_O)
        s2 = rms(mid)
    with torch.no_grad():
        for i, (kind, t, f) in enumerate(zip(g.node_kind, g.node_pos, g.node_feature)):
            if kind != "feature":
                continue
            for p in range(n):
                write = torch.einsum("h,hd,hdm->m", A[:, t, p], v[p], W_O) + (e[p] if p == t else 0)
                want = float(tc.W_enc[f] @ (blk.post_attention_layernorm.weight * write / s2[t]))
                assert float(g.adjacency[i, g.node_labels.index(f"embed@{p}")]) == pytest.approx(
                    want, rel=1e-4, abs=1e-6
                )


def test_logit_effects_option(models):
    """logit_effects=k keeps k promoted and k suppressed tokens per feature (each equal to the feature's decoder row
    through the frozen final norm and W_U, materialised here); 0, the default, keeps none; the edges are the same."""
    m = _model(models, "llama")
    tcs = random_transcoders(m, 16, seed=3)
    g3, g0 = attribution_graph(m, PROMPT, tcs, logit_effects=3), attribution_graph(m, PROMPT, tcs)
    assert g0.logit_effect_ids is None and g0.logit_effect_values is None  # the default: none
    assert torch.equal(g3.adjacency, g0.adjacency)
    assert g3.logit_effect_ids.shape[1] == 6
    w, hf = m.weights, m.bridge.original_model
    seen = {}
    h = hf.model.norm.register_forward_hook(lambda mod, inp, out: seen.update(x=inp[0][0]))
    hooked_forward(hf, [h], m.to_tokens(PROMPT))
    for i in [j for j, k in enumerate(g3.node_kind) if k == "feature"][:5]:
        l, f, p = g3.node_layer[i], g3.node_feature[i], g3.node_pos[i]
        sigma = torch.sqrt(seen["x"][p].pow(2).mean() + hf.model.norm.variance_epsilon)  # the final norm's at p
        z = (tcs[l].W_dec[f] / sigma * w.lnf_w) @ w.W_U
        top, bottom = z.topk(3), z.topk(3, largest=False)
        assert g3.logit_effect_ids[i].tolist() == top.indices.tolist() + bottom.indices.tolist()
        assert torch.allclose(g3.logit_effect_values[i], torch.cat([top.values, bottom.values]), rtol=1e-5, atol=1e-6)
    for bad in (-1, 1.5, True):
        with pytest.raises(ArgumentError, match="logit_effects"):
            attribution_graph(m, PROMPT, tcs, logit_effects=bad)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_constant_prefix_holds_the_first_writes(models, family):
    """constant_prefix=k: no feature node before position k, no edge out of the error nodes there, every other edge
    equal to the full graph's (edges are the frozen model's Jacobian, whatever the sources), and each target's constant
    term = the full graph's + the held sources' edges into it (so the graph still closes)."""
    m = _model(models, family)
    tcs = random_transcoders(m, 16, seed=3)
    full = attribution_graph(m, PROMPT, tcs)
    for k in (1, 2):
        g = attribution_graph(m, PROMPT, tcs, constant_prefix=k)
        _check_closure(g)
        assert all(p >= k for kind, p in zip(g.node_kind, g.node_pos) if kind == "feature")
        idx = {lab: i for i, lab in enumerate(full.node_labels)}
        sel = torch.tensor([idx[lab] for lab in g.node_labels])
        held = [
            i
            for i, (kind, p) in enumerate(zip(full.node_kind, full.node_pos))
            if kind in ("feature", "error") and p < k
        ]
        err_held = [i for i, (kind, p) in enumerate(zip(g.node_kind, g.node_pos)) if kind == "error" and p < k]
        assert not g.adjacency[:, err_held].any()
        keep = [i for i, (kind, p) in enumerate(zip(g.node_kind, g.node_pos)) if not (kind == "error" and p < k)]
        scale = float(full.adjacency.abs().max())
        assert torch.allclose(g.adjacency[:, keep], full.adjacency[sel][:, sel[keep]], rtol=1e-5, atol=1e-6 * scale)
        rows = [i for i, kind in enumerate(g.node_kind) if kind in ("feature", "logit")]
        expect = full.bias[sel] + full.adjacency[sel][:, held].sum(1)
        assert torch.allclose(g.bias[rows], expect[rows], rtol=1e-5, atol=1e-5 * scale)
    with pytest.raises(ArgumentError, match="constant_prefix"):
        attribution_graph(m, PROMPT, tcs, constant_prefix=99)


def test_pruning_thresholds_travel_with_the_graph(models, tmp_path):
    """attribution_graph's node_threshold / edge_threshold are the graph's pruning defaults (prune, export, save /
    load); thresholds outside (0, 1] are refused naming the argument; interp.attribution_graph is the same function."""
    m = _model(models, "llama")
    tcs = random_transcoders(m, 16, seed=3)
    assert interp.attribution_graph is attribution_graph
    g = attribution_graph(m, PROMPT, tcs, node_threshold=0.5, edge_threshold=0.7)
    full = attribution_graph(m, PROMPT, tcs)
    assert (full.node_threshold, full.edge_threshold) == (0.8, 0.98)
    assert torch.equal(g.adjacency, full.adjacency)  # the graph itself is whole
    a, b = g.prune(), full.prune(0.5, 0.7)
    assert a.node_labels == b.node_labels and torch.equal(a.adjacency, b.adjacency)
    assert full.prune().node_labels != a.node_labels
    back = AttributionGraph.load(g.save(tmp_path / "g.safetensors"))
    assert (back.node_threshold, back.edge_threshold) == (0.5, 0.7)
    for bad in ({"node_threshold": 0}, {"edge_threshold": 1.5}, {"node_threshold": True}):
        with pytest.raises(ArgumentError, match=next(iter(bad))):
            attribution_graph(m, PROMPT, tcs, **bad)
        with pytest.raises(ArgumentError, match=next(iter(bad))):
            full.prune(**bad)
