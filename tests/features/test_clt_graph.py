"""Attribution graphs over a cross-layer transcoder: a CLT feature is one node whose decoders write at its layer and
every later one; the error node of layer l' is the MLP's write minus the CLT's joint reconstruction.

* closure (value = Σ edges + bias) ≤ 1e-4 relative in float32 on every tiny pre-norm decoder family (3 layers, so
  that a feature writes two layers on), for ReLU and skip CLTs, and on Llama / GPT-2 for JumpReLU, TopK, BatchTopK
  and with the first position held constant; a graph that left out a feature's later writes would not close
  (0.48 relative on tiny Llama, measured);
* a CLT whose decoders to later layers are zero gives the graph of the per-layer transcoders of its encoders (every
  edge, bias, value and logit effect, float64);
* intervene on a CLT feature: in the graph regime the logit changes by (factor − 1) × its edge (3 families, float64,
  1e-9); live, it equals the Hugging Face model with −a W_dec[0 → l'] hooked onto every layer's MLP output (1e-16);
* a CLT of another model's shape is an ArgumentError.
"""

from __future__ import annotations

import pytest
import torch

from features.test_attribution_graph import FAMILIES, PROMPT, _check_closure
from interp.errors import ArgumentError
from interp.features import (
    CrossLayerTranscoder,
    Intervention,
    attribution_graph,
    intervene,
    top_activating_contexts,
)
from tiny_models import tiny_model
from tiny_transcoders import random_clt


@pytest.fixture(scope="module")
def models():
    return {}


def _model(models, family, dtype=torch.float32):
    if (family, dtype) not in models:
        models[family, dtype] = tiny_model(family, n_layers=3, dtype=dtype)
    return models[family, dtype]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["relu", "skip"])
def test_clt_graph_closes(models, family, kind):
    m = _model(models, family)
    c = random_clt(m, 16, seed=1, skip=kind == "skip")
    g = attribution_graph(m, PROMPT, c, batch_size=7)
    layers = {l for k, l in zip(g.node_kind, g.node_layer) if k == "feature"}
    assert layers == {0, 1, 2}  # features at every layer; those of layers 0 and 1 write on at 1 and 2
    _check_closure(g)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("kind", ["jumprelu", "topk", "batchtopk", "prefix"])
def test_clt_graph_closes_other_activations(models, family, kind):
    m = _model(models, family)
    c = random_clt(m, 16, seed=2, activation="relu" if kind == "prefix" else kind, k=3)
    g = attribution_graph(m, PROMPT, c, constant_prefix=1 if kind == "prefix" else 0, batch_size=5)
    assert sum(k == "feature" for k in g.node_kind) > 0
    _check_closure(g)


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox"])
def test_without_later_decoders_it_is_the_per_layer_graph(models, family):
    m = _model(models, family, torch.float64)
    c = random_clt(m, 12, seed=3, activation="jumprelu", skip=True, dtype=torch.float64)
    own = CrossLayerTranscoder(
        c.W_enc,
        c.b_enc,
        tuple(torch.cat([w[:, :1], torch.zeros_like(w[:, 1:])], 1) for w in c.W_dec),
        c.b_dec,
        c.W_skip,
        c.activation,
        c.threshold,
        layers=c.layers,
    )
    g = attribution_graph(m, PROMPT, own, logit_effects=3)
    h = attribution_graph(m, PROMPT, [own.encoder(l) for l in range(3)], logit_effects=3)
    assert g.node_labels == h.node_labels and g.node_kind.count("feature") > 0
    for name in ("adjacency", "bias", "value", "logit_effect_values"):
        a, b = getattr(g, name), getattr(h, name)
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12 * float(b.abs().max())), name
    assert torch.equal(g.logit_effect_ids, h.logit_effect_ids)
    full = attribution_graph(m, PROMPT, c)  # with its later decoders: other edges, the same nodes
    assert full.node_labels == g.node_labels and not torch.allclose(full.adjacency, g.adjacency)
    _check_closure(full, 1e-10)


def test_clt_of_another_shape(models):
    m = _model(models, "llama")
    with pytest.raises(ArgumentError, match="an encoder at each of its 3 layers"):
        attribution_graph(m, PROMPT, random_clt(tiny_model("llama"), 8))


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox"])
def test_intervention_in_the_graph_regime_is_the_edge(models, family):
    """intervene on a CLT feature with every other feature, error node, pattern and norm scale frozen: the change of
    the logit is (factor − 1) × the graph's edge from that feature to the logit (through all its writes)."""

    m = _model(models, family, torch.float64)
    c = random_clt(m, 12, seed=4, dtype=torch.float64)
    g = attribution_graph(m, PROMPT, c, target="w3")
    out = g.node_kind.index("logit")
    cand = [i for i, (k, l) in enumerate(zip(g.node_kind, g.node_layer)) if k == "feature" and l == 0]
    i = max(cand, key=lambda j: abs(float(g.adjacency[out, j])))
    edge = float(g.adjacency[out, i])
    r = intervene(
        m,
        PROMPT,
        c,
        [Intervention.scale(g.node_labels[i], 3.0)],
        target="w3",
        freeze_features=True,
        frozen_attention=True,
    )
    print(f"{family}: Δ logit {r.metric_after - r.metric_before:.6e}, 2 × edge {2 * edge:.6e}")
    assert abs(edge) > 1e-3
    assert r.metric_after - r.metric_before == pytest.approx(2 * edge, rel=1e-9, abs=1e-12)


def test_live_intervention_is_the_hooked_hf_model():
    """Live regime (the real model rerun): ablating a layer-0 CLT feature at position p adds −a W_dec[0 → l'] to the
    MLP output of every layer l' at p — the same logits as the Hugging Face model with those forward hooks."""
    from interp.engine import model_from_hf
    from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer

    hf = tiny_hf_model("llama", n_layers=3, dtype=torch.float64)
    m = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-3", dtype=torch.float64)
    c = random_clt(m, 12, seed=5, dtype=torch.float64)
    g = attribution_graph(m, PROMPT, c)
    i = next(
        j
        for j, (k, l, p) in enumerate(zip(g.node_kind, g.node_layer, g.node_pos))
        if k == "feature" and l == 0 and p > 0
    )
    p, f, a = g.node_pos[i], g.node_feature[i], float(g.activation[i])
    r = intervene(m, PROMPT, c, [Intervention.ablate(g.node_labels[i])], frozen_attention=False, freeze_features=False)
    ids = m.to_tokens(PROMPT)

    def add(l):
        def hook(mod, inp, out):
            out = out.clone()
            out[0, p] -= a * c.W_dec[0][f, l]
            return out

        return hook

    hooks = [layer.mlp.register_forward_hook(add(l)) for l, layer in enumerate(hf.model.layers)]
    logits = hooked_forward(hf, hooks, input_ids=ids).logits[0, -1]
    print(f"max |Δ logits| interp vs hooked HF: {float((r.logits_after - logits).abs().max()):.2e}")
    assert torch.allclose(r.logits_after, logits, rtol=0, atol=1e-10)
    assert not torch.allclose(r.logits_after, r.logits_before, atol=1e-6)


def test_an_encoder_of_a_clt_with_later_writes_is_not_a_per_layer_transcoder(models):
    """[clt.encoder(l) for l in …] given as per-layer transcoders built a plausible graph that dropped every
    cross-layer write; a layer whose features write to later layers has no per-layer Transcoder (a Transcoder holds
    every write of its features), so the list cannot be built: the error names the encoding and the CLT."""
    m = _model(models, "llama", torch.float64)
    c = random_clt(m, 12, seed=3, dtype=torch.float64)
    for l in (0, 1):
        with pytest.raises(ArgumentError, match=rf"encoder\({l}\): .*later layers.*encode_layer.*transcoders=clt"):
            c.encoder(l)
    last = c.encoder(2)  # the last layer writes only its own output: a per-layer transcoder holds all of it
    assert torch.equal(last.W_dec, c.W_dec[2][:, 0]) and last.layer == 2
    x = torch.randn(4, m.arch.d_model, dtype=torch.float64)
    assert torch.equal(last.encode(x), c.encode_layer(x, 2))
    # reading a CLT's features needs no per-layer list: the contexts read through the CLT's encoders
    assert top_activating_contexts(m, c, ["a b c"], ["L0.F1"], k=1).keys() == {"L0.F1"}
