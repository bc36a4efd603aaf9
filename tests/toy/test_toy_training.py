"""The toy machinery on small configurations: config checks, data, bridge = reference, save/load,
and a fast training run (loss goes down, bitwise deterministic)."""

from __future__ import annotations

import math

import pytest
import torch
from toy_reference import reference_forward

from interp.errors import ArgumentError, ModelLoadError, ModelNotFoundError
from interp.toy import ToyConfig, build_toy, load_toy, save_toy, span_copy_batch
from interp.models.internal import native_state_dict, toy_weights
from interp.toy.train import Recipe, train_toy

VARIANTS = {
    "plain": ToyConfig(n_layers=2, n_heads=4, d_model=32, d_head=8, d_vocab=40, n_ctx=16),
    "layernorm-gqa": ToyConfig(
        n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_head=8, d_vocab=40, n_ctx=16, norm="layernorm"
    ),
    "rmsnorm-rotary": ToyConfig(
        n_layers=2, n_heads=4, d_model=32, d_head=8, d_vocab=40, n_ctx=16, norm="rmsnorm", positional="rotary"
    ),
    "no-positions": ToyConfig(n_layers=1, n_heads=2, d_model=32, d_head=8, d_vocab=40, n_ctx=16, positional="none"),
}


def perturbed_toy(config: ToyConfig, seed: int = 0):
    """A fresh toy with random biases and norm parameters (so that a mistake in them shows)."""
    model = build_toy(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.bridge.original_model.named_parameters():
            if name.endswith("bias") or ".ln" in name or name.startswith("ln_out"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    object.__setattr__(model, "weights", toy_weights(native_state_dict(model.bridge), config))
    return model


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_bridge_matches_reference_forward_from_weights(variant):
    config = VARIANTS[variant]
    model = perturbed_toy(config)
    tokens = torch.randint(0, config.d_vocab, (3, config.n_ctx), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        bridge_logits = model.bridge(tokens)
        native_logits = model.bridge.original_model(tokens)
    ref_logits, _ = reference_forward(model, tokens)
    assert torch.equal(bridge_logits, native_logits)
    assert (bridge_logits.double() - ref_logits).abs().max() < 1e-4


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_arch_and_weights_conventions(variant):
    config = VARIANTS[variant]
    model = build_toy(config)
    a, w = model.arch, model.weights
    L, d = config.n_layers, config.d_model
    assert (a.family, a.attn_only, a.causal, a.has_unembed, a.d_mlp) == ("native", True, True, True, 0)
    assert a.norm == config.norm and a.positional == config.positional and a.n_kv_heads == config.kv_heads
    assert w.W_in.shape == (L, d, 0) and w.b_in.shape == (L, 0) and w.W_out.shape == (L, 0, d)
    assert not w.b_out.any() and torch.equal(w.ln2_w, torch.ones(L, d)) and not w.ln2_b.any()
    assert (w.W_pos is None) == (config.positional != "learned")
    assert w.W_K.shape == (L, config.kv_heads, d, config.d_head)
    if config.norm == "none":
        assert torch.equal(w.ln1_w, torch.ones(L, d)) and torch.equal(w.lnf_w, torch.ones(d))
        assert not w.ln1_b.any() and not w.lnf_b.any()
    if config.norm == "rmsnorm":
        assert not w.ln1_b.any() and not w.lnf_b.any()


def test_tokenizer_round_trip_and_bos():
    model = build_toy(VARIANTS["plain"])
    tokens = model.to_tokens("cat dog cat")
    assert tokens.tolist() == [[0, 2, 3, 2]]
    assert model.to_str_tokens(tokens[0]) == ["<bos>", "cat", "dog", "cat"]
    assert model.to_str_tokens("cat zebra") == ["<bos>", "cat", "<unk>"]
    with torch.no_grad():
        assert torch.equal(model.bridge("cat dog cat"), model.bridge(tokens))


def test_config_validation_names_the_argument():
    with pytest.raises(ArgumentError, match="n_kv_heads=3"):
        ToyConfig(n_heads=4, n_kv_heads=3)
    with pytest.raises(ArgumentError, match="norm='batchnorm'"):
        ToyConfig(norm="batchnorm")
    with pytest.raises(ArgumentError, match="positional='alibi'"):
        ToyConfig(positional="alibi")
    with pytest.raises(ArgumentError, match="d_vocab=3"):
        ToyConfig(d_vocab=3)
    with pytest.raises(ArgumentError, match="unknown fields"):
        ToyConfig.from_dict({"n_layers": 1, "d_mlp": 4})


def test_span_copy_batch_copies_spans_and_marks_predictable_positions():
    g = torch.Generator().manual_seed(0)
    x, pred = span_copy_batch(256, 32, 40, generator=g)
    assert x.shape == pred.shape == (256, 32)
    assert (x[:, 0] == 0).all() and (x[:, 1:] >= 2).all() and (x < 40).all()
    assert pred.sum(1).min() >= 1 and pred.sum(1).max() <= 14  # spans of 2…15 tokens
    # every predictable token repeats an earlier bigram: some q < p has x[q-1], x[q] = x[p-1], x[p]
    for b, p in pred.nonzero().tolist():
        earlier = [q for q in range(1, p) if x[b, q - 1] == x[b, p - 1] and x[b, q] == x[b, p]]
        assert earlier, (b, p)
    # offsets are random: the distance between copy and source is not constant
    starts = pred.float().argmax(1)
    assert len(set(starts.tolist())) > 10


def test_span_copy_batch_rejects_bad_spans():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ArgumentError, match="max_span=20"):
        span_copy_batch(2, 32, 40, generator=g, max_span=20)


def test_save_and_load_round_trip(tmp_path):
    config = VARIANTS["layernorm-gqa"]
    model = perturbed_toy(config)
    save_toy(model, tmp_path / "t", config=config, training={"note": "test"})
    loaded = load_toy(tmp_path / "t", name="t")
    tokens = torch.randint(0, config.d_vocab, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(model.bridge(tokens), loaded.bridge(tokens))
    assert torch.equal(model.weights.ln1_b, loaded.weights.ln1_b) and loaded.arch == model.arch.__class__(
        **{**model.arch.to_dict(), "name": "t"}
    )


def test_load_errors(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not a toy model folder"):
        load_toy(tmp_path, name="x")
    save_toy(build_toy(VARIANTS["plain"]), tmp_path / "t", config=VARIANTS["plain"])
    (tmp_path / "t" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        load_toy(tmp_path / "t", name="x")


@pytest.mark.slow
def test_fast_training_lowers_the_in_context_loss_and_is_deterministic():
    """A small 2-layer toy, 400 steps: the repeated half of the probe gets much easier than the
    first half (induction starting), and a second run gives bitwise the same weights."""
    config = ToyConfig(n_layers=2, n_heads=2, d_model=32, d_head=16, d_vocab=66, n_ctx=16)
    recipe = Recipe(steps=400, batch_size=32, eval_every=400)
    model, log = train_toy(config, recipe)
    f = log.final
    assert f["loss_first_half"] > 0.9 * math.log(64)  # unpredictable tokens stay unpredictable
    assert f["loss_second_half"] < 0.75 * f["loss_first_half"], f
    untrained = build_toy(config)
    from interp.toy._probes import probe_report

    assert probe_report(untrained)["loss_second_half"] > 0.95 * math.log(64)
    model2, _ = train_toy(config, Recipe(steps=20, batch_size=32, eval_every=20))
    model3, _ = train_toy(config, Recipe(steps=20, batch_size=32, eval_every=20))
    s2, s3 = native_state_dict(model2.bridge), native_state_dict(model3.bridge)
    assert s2.keys() == s3.keys() and all(torch.equal(s2[k], s3[k]) for k in s2)
    assert not torch.equal(s2["tok_embed.weight"], native_state_dict(untrained.bridge)["tok_embed.weight"])
