"""The shipped toys reproduce the Framework paper's findings (Elhage et al. 2021; Olsson et al. 2022).

Every number is computed here from attention patterns captured through plain bridge hooks and
from materialised weight matrices — not from interp's own probes or circuit functions (those
are compared against these references at the end).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from toy_reference import (
    capture_patterns,
    copying_score,
    k_composition,
    ov,
    next_token_nll,
    reference_forward,
    repeated,
    uniform,
)

import interp
from interp.models import load_model_unchecked as load_model

N = 15  # repeated-sequence probe: <bos> + 15 words + the same 15 words = 31 ≤ n_ctx 32


@pytest.fixture(scope="module")
def toy2():
    return load_model("toy-attn-only-2l")


@pytest.fixture(scope="module")
def toy1():
    return load_model("toy-attn-only-1l")


@pytest.fixture(scope="module")
def heads2(toy2):
    """Per-head previous-token and induction attention masses of the 2-layer toy."""
    a = toy2.arch
    _, pat_rnd = capture_patterns(toy2, uniform(200, a.n_ctx, a.d_vocab, seed=11))
    logits, pat_rep = capture_patterns(toy2, rep := repeated(200, N, a.d_vocab, seed=12))
    q = torch.arange(1, a.n_ctx)
    prev = pat_rnd[:, :, :, q, q - 1].mean(dim=(1, 3))  # [layer, head]
    q = torch.arange(N + 1, 2 * N + 1)
    induction = pat_rep[:, :, :, q, q - N + 1].mean(dim=(1, 3))
    return dict(prev=prev, induction=induction, logits=logits, tokens=rep)


@pytest.mark.parametrize("name", ["toy-attn-only-1l", "toy-attn-only-2l"])
def test_catalog_entry_is_shipped_small_and_attention_only(name):
    entry = next(e for e in interp.list_models() if e.name == name)
    assert entry.available
    sizes = {p.name: p.stat().st_size for p in Path(entry.path()).iterdir()}
    assert set(sizes) >= {"config.json", "model.safetensors"} and sum(sizes.values()) < 2_000_000, sizes
    model = load_model(name)
    a = model.arch
    assert (a.family, a.attn_only, a.norm, a.positional, a.causal, a.has_unembed) == (
        "native",
        True,
        "none",
        "learned",
        True,
        True,
    )
    assert a.n_layers == int(name[-2])


@pytest.mark.parametrize("name", ["toy-attn-only-1l", "toy-attn-only-2l"])
def test_bridge_equals_native_module_and_reference_forward(name):
    """The bridge's logits = the bare TL-native module loaded from the safetensors file = a
    hand-written forward pass from interp's Weights."""
    from safetensors.torch import load_file
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge.sources.native.model import NativeModel

    from interp.models import ToyConfig, read_toy_config

    model = load_model(name)
    path = next(e for e in interp.list_models() if e.name == name).path()
    config = ToyConfig.from_dict(read_toy_config(path)["config"])
    native = NativeModel(TransformerBridgeConfig.from_dict(config.bridge_config()))
    native.load_state_dict(load_file(str(path / "model.safetensors")))
    tokens = uniform(4, model.arch.n_ctx, model.arch.d_vocab, seed=5)
    with torch.no_grad():
        bridge_logits, native_logits = model.bridge(tokens), native.eval()(tokens)
    ref, _ = reference_forward(model, tokens)
    assert torch.equal(bridge_logits, native_logits)
    assert (bridge_logits.double() - ref).abs().max() < 1e-4


def test_words_and_tokens(toy2):
    tokens = toy2.to_tokens("cat dog sun")
    assert tokens[0, 0] == 0 and toy2.to_str_tokens(tokens[0]) == ["<bos>", "cat", "dog", "sun"]


def test_two_layer_has_a_previous_token_head_in_layer_0(heads2):
    prev = heads2["prev"]
    assert prev[0].max() >= 0.9, f"layer-0 previous-token masses {prev[0].tolist()}"


def test_two_layer_has_an_induction_head_in_layer_1(heads2):
    ind = heads2["induction"]
    assert ind[1].max() >= 0.9, f"layer-1 induction masses {ind[1].tolist()}"
    assert ind[0].max() < 0.2  # layer 0 cannot do induction: it has nothing to compose with


def test_induction_head_k_composes_with_a_previous_token_head(toy2, heads2):
    h_ind = int(heads2["induction"][1].argmax())
    scores = [k_composition(toy2, (0, s), (1, h_ind)) for s in range(toy2.arch.n_heads)]
    partner = max(range(len(scores)), key=scores.__getitem__)
    assert heads2["prev"][0, partner] >= 0.9, (scores, heads2["prev"][0].tolist())
    # and the partner scores clearly above the heads that are not previous-token heads
    others = [s for h, s in enumerate(scores) if heads2["prev"][0, h] < 0.5]
    assert not others or scores[partner] > 1.5 * max(others), scores


def test_induction_head_copies(toy2, heads2):
    h_ind = int(heads2["induction"][1].argmax())
    assert copying_score(toy2, 1, h_ind) >= 0.8


def test_in_context_loss_second_half_far_below_first(toy2, heads2):
    nll = next_token_nll(heads2["logits"], heads2["tokens"])
    first, second = float(nll[:, 1:N].mean()), float(nll[:, N + 1 :].mean())
    n_words = toy2.arch.d_vocab - 2
    assert abs(first - math.log(n_words)) < 0.3, (first, math.log(n_words))  # unpredictable: ≈ ln 256
    assert second < 0.1 and second < first / 20, (first, second)


def test_one_layer_heads_mostly_copy(toy1):
    scores = [copying_score(toy1, 0, h) for h in range(toy1.arch.n_heads)]
    assert sum(s > 0 for s in scores) > toy1.arch.n_heads / 2, scores


def test_one_layer_model_cannot_do_induction(toy1):
    """Without a previous-token head to compose with, the 1-layer model gains much less from a repeat."""
    a = toy1.arch
    tokens = repeated(200, N, a.d_vocab, seed=12)
    with torch.no_grad():
        nll = next_token_nll(toy1.bridge(tokens), tokens)
    first, second = float(nll[:, 1:N].mean()), float(nll[:, N + 1 :].mean())
    assert second > 1.0 and second < first, (first, second)  # some copying gain, no induction


def test_library_scores_match_materialised_references(toy2, toy1):
    """interp.circuits' composition and copying scores agree with the materialised matrices."""
    from interp.circuits import composition_scores, copying_scores

    H = toy2.arch.n_heads
    comp = composition_scores(toy2, "K", fold_norms=False).scores
    for s in range(H):
        for d in range(H):
            assert abs(float(comp[0, s, 1, d]) - k_composition(toy2, (0, s), (1, d))) < 1e-4
    for model in (toy1, toy2):
        cs = copying_scores(model, fold_norms=False).scores
        for l in range(model.arch.n_layers):
            for h in range(model.arch.n_heads):
                assert abs(float(cs[l, h]) - copying_score(model, l, h)) < 1e-4


def test_probe_report_matches_test_measurements(toy2, heads2):
    from interp.toy._probes import probe_report

    rep = probe_report(toy2, batch=200, seed=99)
    assert abs(max(rep["induction_score"][1]) - float(heads2["induction"][1].max())) < 0.03
    assert abs(max(rep["prev_token_score"][0]) - float(heads2["prev"][0].max())) < 0.03


def test_one_layer_skip_trigram_reading_of_a_copying_head(toy1):
    """The skip-trigram table (Elhage et al. 2021, one-layer section) of the strongest copying
    head: its top rows are the largest entries of the materialised full OV circuit, and they
    copy (source == output)."""
    from interp.toy import skip_trigrams

    H = toy1.arch.n_heads
    h = max(range(H), key=lambda h: copying_score(toy1, 0, h))
    table = skip_trigrams(toy1, 0, h, k=10)
    w = toy1.weights
    full_ov = (w.W_E.double() @ ov(toy1, 0, h) @ w.W_U.double())[2:, 2:]  # words only
    assert table["ov"].iloc[0] == pytest.approx(float(full_ov.max()), rel=1e-6)
    assert list(table["ov"]) == sorted(table["ov"], reverse=True)
    assert (table["source"] == table["output"]).mean() >= 0.8, table
    # the destination listed is the one whose query gives that source the largest logit advantage
    qk = (w.W_E.double() @ w.W_Q[0, h].double()) @ (w.W_E.double() @ w.W_K[0, toy1.arch.kv_head(h)].double()).T
    qk = qk[2:, 2:] / math.sqrt(toy1.arch.d_head)
    qk = qk - qk.mean(1, keepdim=True)
    src = toy1.tokenizer.convert_tokens_to_ids(table["source"].iloc[0]) - 2
    dst = toy1.tokenizer.convert_tokens_to_ids(table["destination"].iloc[0]) - 2
    assert dst == int(qk[:, src].argmax())
