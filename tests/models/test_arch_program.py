"""ArchInfo's capabilities, the block program's order, and the TL -> HF weight map, on every family.

References are independent of interp's code: the HF module's own parameters (does the output
projection have a bias?), the HF model's behaviour (does a later token change an earlier hidden
state?), hand-written expectations, and the fractional layer order the circuits used before they
took it from the program (re-derived here, not imported).
"""

from __future__ import annotations

import math
import re

import pytest
import torch

import interp.circuits as C
from interp.circuits._labels import check_order, parse_read, parse_write
from interp.errors import ArgumentError, LabelError, UnsupportedArchitectureError, UnsupportedOperationError
from interp.models import ToyConfig, build_toy, sees
from interp.models.internal import (
    build_program,
    hf_state_from_weights,
    hf_writable,
    native_state_dict,
    program_position,
)
from interp.models import model_from_hf_unchecked as model_from_hf
from tiny_models import FAMILIES, tiny_hf_model, tiny_tokenizer

# The capabilities of each tiny config (tests/tiny_models.py), written out by hand.
EXPECTED = {
    "gpt2": dict(
        has_logits=True,
        causal=True,
        attn_bias=True,
        mlp_bias=True,
        parallel_attn_mlp=False,
        norm="layernorm",
        norm_placement="pre",
        group_size=1,
    ),
    "llama": dict(
        has_logits=True,
        causal=True,
        attn_bias=False,
        mlp_bias=False,
        parallel_attn_mlp=False,
        norm="rmsnorm",
        norm_placement="pre",
        group_size=2,
    ),
    "neox": dict(
        has_logits=True,
        causal=True,
        attn_bias=True,
        mlp_bias=True,
        parallel_attn_mlp=True,
        norm="layernorm",
        norm_placement="pre",
        group_size=1,
    ),
    "bert": dict(
        has_logits=False,
        causal=False,
        attn_bias=True,
        mlp_bias=True,
        parallel_attn_mlp=False,
        norm="layernorm",
        norm_placement="post",
        group_size=1,
    ),
}

# HF parameter names of layer 0's attention and MLP output-projection biases.
OUT_BIAS = {
    "gpt2": ("transformer.h.0.attn.c_proj.bias", "transformer.h.0.mlp.c_proj.bias"),
    "llama": ("model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.down_proj.bias"),
    "neox": ("gpt_neox.layers.0.attention.dense.bias", "gpt_neox.layers.0.mlp.dense_4h_to_h.bias"),
    "bert": ("bert.encoder.layer.0.attention.output.dense.bias", "bert.encoder.layer.0.output.dense.bias"),
}


def _bias_params(hf, family):
    names = dict(hf.named_parameters())
    return tuple(n in names for n in OUT_BIAS[family])


@pytest.fixture(scope="module")
def toys():
    """Attention-only native models: learned positions, and rotary + GQA + RMSNorm."""
    return [
        build_toy(ToyConfig(n_layers=2, n_heads=4, d_model=16, d_head=4), name="toy-learned"),
        build_toy(
            ToyConfig(n_layers=3, n_heads=4, n_kv_heads=2, d_model=16, d_head=4, norm="rmsnorm", positional="rotary"),
            name="toy-rotary-gqa",
        ),
    ]


# ---- capabilities --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_capabilities_of_each_family(tiny_models, family):
    a = tiny_models[family].arch
    for field, value in EXPECTED[family].items():
        assert getattr(a, field) == value, field


@pytest.mark.parametrize("family", FAMILIES)
def test_output_biases_are_the_hf_modules_own(family):
    hf = tiny_hf_model(family)
    has = _bias_params(hf, family)  # before the bridge wraps (and renames) the module
    m = model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}")
    assert (m.arch.attn_bias, m.arch.mlp_bias) == has


@pytest.mark.parametrize(
    "overrides", [dict(attention_bias=True), dict(mlp_bias=True), dict(attention_bias=True, mlp_bias=True)]
)
def test_llama_biases_read_from_config(overrides):
    hf = tiny_hf_model("llama", **overrides)
    has = _bias_params(hf, "llama")
    a = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-bias").arch
    want = (overrides.get("attention_bias", False), overrides.get("mlp_bias", False))
    assert (a.attn_bias, a.mlp_bias) == want == has
    labels = {e.label for e in build_program(a, neuron_layers=(0,)) if e.kind == "write"}
    assert ("L0.attn_bias" in labels, "L1.attn_bias" in labels) == (want[0], want[0])
    assert ("L0.mlp_bias" in labels) == want[1]


def test_neox_without_attention_bias_is_refused():
    with pytest.raises(UnsupportedArchitectureError, match="attention_bias=False"):
        model_from_hf(tiny_hf_model("neox", attention_bias=False), tiny_tokenizer(), name="tiny-neox-nobias")


@pytest.mark.parametrize("family", FAMILIES)
def test_causal_is_the_hf_models_attention(family):
    """causal ⇔ changing the last token leaves every earlier hidden state unchanged (HF forward)."""
    hf = tiny_hf_model(family)
    arch = model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}").arch
    ids = torch.randint(4, 100, (1, 6), generator=torch.Generator().manual_seed(0))
    ids2 = ids.clone()
    ids2[0, -1] = 4 if ids[0, -1] != 4 else 5
    with torch.no_grad():
        h = hf(ids, output_hidden_states=True).hidden_states[-1][0, :-1]
        h2 = hf(ids2, output_hidden_states=True).hidden_states[-1][0, :-1]
    assert arch.causal == torch.equal(h, h2)


@pytest.mark.parametrize("family", FAMILIES)
def test_has_logits_is_a_linear_unembedding(tiny_models, family):
    m = tiny_models[family]
    assert m.arch.has_logits == (m.weights.W_U is not None)
    assert build_program(m.arch)[-1].label == ("unembed" if m.arch.has_logits else "final")
    assert ("unembed" in C.read_labels(m)) == m.arch.has_logits


def test_toy_capabilities(toys):
    for t in toys:
        a = t.arch
        assert (a.has_logits, a.causal, a.attn_only, a.attn_bias) == (True, True, True, True)
        assert "layers.0.attn.o.bias" in native_state_dict(t.bridge)  # the native attention's output bias


# ---- the program's order equals the fractional layer order the circuits used ---------------------


def _old_write_order(label: str) -> float:
    if label in ("embed", "pos_embed"):
        return -1.0
    m = re.fullmatch(r"L(\d+)\.(H\d+|mlp)", label)
    return int(m.group(1)) + (0.5 if m.group(2).startswith("H") else 0.75)


def _old_read_order(label: str, parallel: bool) -> float:
    if label == "unembed":
        return math.inf
    m = re.fullmatch(r"L(\d+)\.(attn\.[qkv]\[H\d+\]|mlp\.in|mlp\.gate)", label)
    return int(m.group(1)) + (0.25 if (m.group(2).startswith("attn") or parallel) else 0.625)


def _all_models(tiny_models, toys):
    return [tiny_models[f] for f in FAMILIES] + list(toys)


def test_program_order_equals_old_fractional_order(tiny_models, toys):
    n_pairs = 0
    for m in _all_models(tiny_models, toys):
        a = m.arch
        for w in C.write_labels(m):
            for r in C.read_labels(m):
                old = _old_write_order(w) < _old_read_order(r, a.parallel_attn_mlp)
                assert sees(a, w, r) == old, (a.name, w, r)
                assert (parse_write(m, w).position(m) < parse_read(m, r).position(m)) == old, (a.name, w, r)
                assert (check_order(m, parse_write(m, w), parse_read(m, r)) is None) == old, (a.name, w, r)
                n_pairs += 1
    assert n_pairs > 1000


def test_virtual_weight_norms_mask_follows_old_order(tiny_models, toys):
    for m in _all_models(tiny_models, toys):
        v = C.virtual_weight_norms(m)
        old = torch.tensor(
            [[_old_write_order(w) < _old_read_order(r, m.arch.parallel_attn_mlp) for r in v.reads] for w in v.writes]
        )
        assert torch.equal(~torch.isnan(v.values), old), m.arch.name


def test_erasure_candidates_pairs_follow_old_order(tiny_models, toys):
    """With a screen wide enough for every pair, the table holds exactly the pairs the old order allowed."""
    for m in _all_models(tiny_models, toys):
        a = m.arch
        t = C.erasure_candidates(m, screen=10_000).table
        srcs = [s for s in C.write_labels(m) if s != "pos_embed"]  # sources: embed, heads, MLPs
        want = {
            (s, f"L{l}.H{h}")
            for s in srcs
            for l in range(a.n_layers)
            for h in range(a.n_heads)
            if _old_write_order(s) < l + 0.25
        }
        assert set(zip(t["src"], t["dst"])) == want, a.name


def test_parallel_block_mlp_does_not_read_its_own_heads(tiny_models):
    neox, gpt2 = tiny_models["neox"], tiny_models["gpt2"]
    with pytest.raises(
        ArgumentError,
        match=r"in this parallel-block model \(gpt_neox\) L1's MLP reads the same "
        r"residual stream as its attention, before L1's heads write",
    ):
        C.virtual_weights(neox, "L1.H2", "L1.mlp.in")
    C.virtual_weights(gpt2, "L1.H2", "L1.mlp.in")  # a sequential block's MLP reads its heads
    with pytest.raises(ArgumentError, match=r"L1.attn.q\[H0\] is read before L1.H2 is written"):
        C.virtual_weights(gpt2, "L1.H2", "L1.attn.q[H0]")


def test_program_position_of_gate_and_bad_labels(tiny_models):
    a = tiny_models["llama"].arch
    assert program_position(a, "L1.mlp.gate") == program_position(a, "L1.mlp.in")
    with pytest.raises(LabelError, match="L9.H0"):
        program_position(a, "L9.H0")


# ---- TL -> HF weight map: the inverse of the reader ----------------------------------------------


@pytest.mark.parametrize(
    "family,overrides", [("gpt2", {}), ("llama", {}), ("neox", {}), ("llama", dict(attention_bias=True, mlp_bias=True))]
)
def test_hf_state_from_weights_inverts_the_reader(family, overrides):
    hf = tiny_hf_model(family, **overrides)
    params = {n: p.detach().clone() for n, p in hf.named_parameters()}  # before the bridge wraps the module
    m = model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}")
    assert hf_writable(m.arch)
    sd, head = hf_state_from_weights(m.weights, m.arch)
    assert head == "lm_head"
    if "lm_head.weight" not in params and "embed_out.weight" in params:
        sd["embed_out.weight"] = sd.pop("lm_head.weight")
    for name, p in params.items():
        assert name in sd, name
        assert torch.equal(sd[name].to(p.dtype), p), name
    for name in set(sd) - set(params):  # parameters this HF class lacks: zero biases, a tied unembedding
        if name == "lm_head.weight":
            assert torch.equal(sd[name], sd[next(k for k in sd if k.endswith(("wte.weight", "embed_tokens.weight")))])
        else:
            assert name.endswith(".bias") and not bool(sd[name].any()), name


def test_hf_state_from_weights_refuses_unmapped(tiny_models, toys):
    for m in (tiny_models["bert"], toys[0]):
        assert not hf_writable(m.arch)
        with pytest.raises(UnsupportedOperationError, match="no TL -> Hugging Face weight map"):
            hf_state_from_weights(m.weights, m.arch)
    with pytest.raises(UnsupportedOperationError, match="no TL -> Hugging Face weight map"):
        C.rotate_residual(toys[0], torch.eye(toys[0].arch.d_model))
    with pytest.raises(UnsupportedOperationError, match="post-norm"):
        C.rotate_residual(tiny_models["bert"], torch.eye(tiny_models["bert"].arch.d_model))


# ---- the real catalog configs --------------------------------------------------------------------


@pytest.mark.real
def test_real_model_capabilities(smollm2, minilm):
    s, b = smollm2.arch, minilm.arch
    assert (s.has_logits, s.causal, s.attn_bias, s.mlp_bias, s.group_size) == (True, True, False, False, 3)
    assert (b.has_logits, b.causal, b.attn_bias, b.mlp_bias, b.norm_placement) == (False, False, True, True, "post")

    def names(m):  # the HF module's parameter names (the bridge wraps each submodule in place)
        return {
            n.replace("._original_component", "").removeprefix("bert.")
            for n, _ in m.bridge.original_model.named_parameters()
        }

    hf_s = names(smollm2)
    assert "model.layers.0.self_attn.o_proj.weight" in hf_s and "model.layers.0.mlp.down_proj.weight" in hf_s
    assert ("model.layers.0.self_attn.o_proj.bias" in hf_s, "model.layers.0.mlp.down_proj.bias" in hf_s) == (
        False,
        False,
    )
    assert {"encoder.layer.0.attention.output.dense.bias", "encoder.layer.0.output.dense.bias"} <= names(minilm)
    for m in (smollm2, minilm):
        a = m.arch
        writes, reads = C.write_labels(m), C.read_labels(m)
        wp = torch.tensor([program_position(a, w) for w in writes])
        rp = torch.tensor([program_position(a, r) for r in reads])
        ow = torch.tensor([_old_write_order(w) for w in writes])
        orr = torch.tensor([_old_read_order(r, a.parallel_attn_mlp) for r in reads])
        assert torch.equal(wp[:, None] < rp[None, :], ow[:, None] < orr[None, :]), a.name


def test_rotation_of_a_llama_with_biases_keeps_logits():
    """attention_bias + mlp_bias (o_proj, down_proj and gate_proj biases): the rotated model, built through
    the TL -> HF map, gives the HF model's own logits."""
    hf = tiny_hf_model("llama", attention_bias=True, mlp_bias=True)
    ids = torch.randint(4, 100, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = hf(ids).logits
    m = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-bias")
    q, r = torch.linalg.qr(torch.randn(32, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    rot = C.rotate_residual(m, (q * torch.sign(torch.diagonal(r))).float())
    with torch.no_grad():
        got = rot.bridge(ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
