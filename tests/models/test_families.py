"""The four block families on tiny random models: ArchInfo, faithfulness, Weights layout.

Every check is against something computed independently of interp's loader: a separately
built plain Hugging Face model with the same seed (its logits, hidden states and attention
probabilities), or the block equations of docs/math.md §1 evaluated by hand from the
``Weights`` tensors. The bridge's own hooks are only used where the check is about them
(q/k/v/z, which other subpackages read by hook name).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from tiny_models import FAMILIES, VOCAB, tiny_hf_model, tiny_model

ATOL = 1e-4  # fp32, as required of the bridge (issue 2)

# What each tiny config (tests/tiny_models.py) is, written out by hand.
_COMMON = dict(
    n_layers=2, n_heads=4, d_model=32, d_head=8, d_vocab=VOCAB, n_ctx=64, compatibility_mode=False, attn_only=False
)
EXPECTED_ARCH = {
    "gpt2": dict(
        _COMMON,
        family="gpt2",
        n_kv_heads=4,
        d_mlp=128,
        norm="layernorm",
        norm_placement="pre",
        parallel_attn_mlp=False,
        positional="learned",
        causal=True,
        norm_eps=1e-5,
        gated_mlp=False,
        act_fn="gelu_new",
        has_unembed=True,
        rotary_dim=0,
    ),
    "llama": dict(
        _COMMON,
        family="llama",
        n_kv_heads=2,
        d_mlp=64,
        norm="rmsnorm",
        norm_placement="pre",
        parallel_attn_mlp=False,
        positional="rotary",
        causal=True,
        norm_eps=1e-6,
        gated_mlp=True,
        act_fn="silu",
        has_unembed=True,
        rotary_dim=8,
    ),
    "neox": dict(
        _COMMON,
        family="gpt_neox",
        n_kv_heads=4,
        d_mlp=64,
        norm="layernorm",
        norm_placement="pre",
        parallel_attn_mlp=True,
        positional="rotary",
        causal=True,
        norm_eps=1e-5,
        gated_mlp=False,
        act_fn="gelu",
        has_unembed=True,
        rotary_dim=2,
    ),  # rotary_pct 0.25
    "bert": dict(
        _COMMON,
        family="bert",
        n_kv_heads=4,
        d_mlp=64,
        norm="layernorm",
        norm_placement="post",
        parallel_attn_mlp=False,
        positional="learned",
        causal=False,
        norm_eps=1e-12,
        gated_mlp=False,
        act_fn="gelu",
        has_unembed=False,
        rotary_dim=0,
    ),
}


@pytest.fixture(scope="module")
def models():
    return {f: tiny_model(f) for f in FAMILIES}


@pytest.fixture(scope="module")
def hf_models():
    """Plain HF models built separately with the same seed (the independent reference)."""
    return {f: tiny_hf_model(f) for f in FAMILIES}


@pytest.fixture(scope="module")
def ids():
    return torch.randint(4, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))


def _hf_run(hf, ids):
    with torch.no_grad():
        return hf(ids, output_hidden_states=True, output_attentions=True)


# ---------------------------------------------------------------------------------------------
# ArchInfo


@pytest.mark.parametrize("family", FAMILIES)
def test_arch_info_fields(models, family):
    arch = models[family].arch
    for field, value in EXPECTED_ARCH[family].items():
        got = getattr(arch, field)
        assert got == (pytest.approx(value) if isinstance(value, float) else value), field
    assert arch.name == f"tiny-{family}"


def test_gqa_kv_head_mapping(models):
    arch = models["llama"].arch
    assert arch.group_size == 2
    assert [arch.kv_head(h) for h in range(arch.n_heads)] == [0, 0, 1, 1]
    w = models["llama"].weights
    assert w.W_K.shape == w.W_V.shape == (2, 2, 32, 8)  # [n_layers, n_kv_heads, d_model, d_head]
    assert w.b_K.shape == w.b_V.shape == (2, 2, 8)
    assert w.W_Q.shape == (2, 4, 32, 8) and w.W_O.shape == (2, 4, 8, 32)


@pytest.mark.parametrize("family", FAMILIES)
def test_weight_shapes(models, family):
    a, w = models[family].arch, models[family].weights
    L, H, Hkv, d, dh, dm, V = a.n_layers, a.n_heads, a.n_kv_heads, a.d_model, a.d_head, a.d_mlp, a.d_vocab
    assert w.W_E.shape == (V, d)
    assert w.W_Q.shape == (L, H, d, dh) and w.b_Q.shape == (L, H, dh)
    assert w.W_K.shape == w.W_V.shape == (L, Hkv, d, dh) and w.b_K.shape == w.b_V.shape == (L, Hkv, dh)
    assert w.W_O.shape == (L, H, dh, d) and w.b_O.shape == (L, d)
    assert w.W_in.shape == (L, d, dm) and w.b_in.shape == (L, dm)
    assert w.W_out.shape == (L, dm, d) and w.b_out.shape == (L, d)
    assert (w.W_gate is not None) == a.gated_mlp
    for name in ("ln1_w", "ln1_b", "ln2_w", "ln2_b"):
        assert getattr(w, name).shape == (L, d)
    assert (w.W_pos is not None) == (a.positional == "learned")
    if a.has_unembed:
        assert w.W_U.shape == (d, V) and w.b_U.shape == (V,) and w.lnf_w.shape == (d,)
    else:
        assert w.W_U is None and w.b_U is None
    if a.norm == "rmsnorm":  # RMSNorm has no bias: stored as zeros
        assert not w.ln1_b.any() and not w.ln2_b.any() and not w.lnf_b.any()


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_are_frozen_copies(models, family):
    """Weights hold no graph and share no storage with the bridge's parameters."""
    m = models[family]
    spans = []
    for p in m.bridge.parameters():
        start = p.untyped_storage().data_ptr()
        spans.append((start, start + p.untyped_storage().nbytes()))
    for name, t in vars(m.weights).items():
        if t is None:
            continue
        assert not t.requires_grad, name
        ptr = t.untyped_storage().data_ptr()
        assert not any(lo <= ptr < hi for lo, hi in spans), f"{name} aliases a bridge parameter"


# ---------------------------------------------------------------------------------------------
# The bridge is faithful to the plain HF model


@pytest.mark.parametrize("family", FAMILIES)
def test_bridge_matches_hf(models, hf_models, ids, family):
    m, out = models[family], _hf_run(hf_models[family], ids)
    if m.arch.causal:
        with torch.no_grad():
            logits = m.bridge(ids)
        assert logits.shape == out.logits.shape
        assert (logits - out.logits).abs().max() < ATOL
    else:  # encoder: the final hidden state, and every layer's on the way
        with torch.no_grad():
            _, cache = m.bridge.run_with_cache(ids)
        L = m.arch.n_layers
        assert (cache[f"blocks.{L - 1}.hook_resid_post"] - out.hidden_states[-1]).abs().max() < ATOL
        for layer in range(L):
            assert (cache[f"blocks.{layer}.hook_resid_pre"] - out.hidden_states[layer]).abs().max() < ATOL


@pytest.mark.parametrize("family", FAMILIES)
def test_eval_mode_and_deterministic(models, ids, family):
    """Dropout is off (these configs have p=0.1): two passes agree bitwise."""
    bridge = models[family].bridge
    assert not bridge.training and not any(mod.training for mod in bridge.modules())
    with torch.no_grad():
        assert torch.equal(bridge(ids), bridge(ids))


def _rmsnorm_fp64(self, x):
    """RMSNorm without HF's float32 round trip (interp computes it in float64 in fp64 mode)."""
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


@pytest.mark.parametrize("family", FAMILIES)
def test_float64(family, ids):
    import types

    m = tiny_model(family, dtype=torch.float64)
    hf = tiny_hf_model(family, dtype=torch.float64)
    for mod in hf.modules():  # reference at full float64 precision too
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = types.MethodType(_rmsnorm_fp64, mod)
    # HF's LlamaRMSNorm rounds through float32 even in float64; interp computes it in float64
    # (interp.models._numerics.full_precision_norms), so the reference does too.
    for mod in hf.modules():
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = lambda x, mod=mod: (
                mod.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon))
            )
    assert m.dtype == torch.float64 and m.weights.W_Q.dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in m.bridge.parameters())
    with torch.no_grad():
        if m.arch.causal:
            got, want = m.bridge(ids), hf(ids).logits
        else:
            _, cache = m.bridge.run_with_cache(ids)
            got, want = cache["blocks.1.hook_resid_post"], hf(ids, output_hidden_states=True).hidden_states[-1]
    assert got.dtype == torch.float64
    assert (got - want).abs().max() < 1e-8  # far below fp32 rounding (~1e-7): really computed in fp64


# ---------------------------------------------------------------------------------------------
# Weights layout, checked by evaluating the block equations by hand


def _norm(x, w, b, arch):
    if arch.norm == "rmsnorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + arch.norm_eps) * w
    return F.layer_norm(x, (x.shape[-1],), w, b, arch.norm_eps)


def _kv_index(arch):
    return [arch.kv_head(h) for h in range(arch.n_heads)]


def _attn_out(w, arch, layer, x, pattern):
    """Σ_h z_h W_O^h + b_O with z_h = A_h (x W_V^{kv(h)} + b_V^{kv(h)})."""
    v = torch.einsum("bpd,ndh->bpnh", x, w.W_V[layer]) + w.b_V[layer]
    v = v[:, :, _kv_index(arch)]  # [batch, pos, n_heads, d_head]: query head h reads KV head kv(h)
    z = torch.einsum("bnqk,bknh->bqnh", pattern, v)
    return torch.einsum("bqnh,nhd->bqd", z, w.W_O[layer]) + w.b_O[layer]


def _mlp_out(w, arch, layer, x):
    act = ACT2FN[arch.act_fn]
    pre = x @ w.W_in[layer] + w.b_in[layer]
    post = act(x @ w.W_gate[layer]) * pre if arch.gated_mlp else act(pre)
    return post @ w.W_out[layer] + w.b_out[layer]


def _block(w, arch, layer, x, pattern):
    """One block from the Weights alone (docs/math.md §1), given the attention probabilities."""
    n1 = lambda t: _norm(t, w.ln1_w[layer], w.ln1_b[layer], arch)  # noqa: E731
    n2 = lambda t: _norm(t, w.ln2_w[layer], w.ln2_b[layer], arch)  # noqa: E731
    if arch.norm_placement == "post":
        mid = n1(x + _attn_out(w, arch, layer, x, pattern))
        return n2(mid + _mlp_out(w, arch, layer, mid))
    if arch.parallel_attn_mlp:
        return x + _attn_out(w, arch, layer, n1(x), pattern) + _mlp_out(w, arch, layer, n2(x))
    mid = x + _attn_out(w, arch, layer, n1(x), pattern)
    return mid + _mlp_out(w, arch, layer, n2(mid))


@pytest.mark.parametrize("family", FAMILIES)
def test_embedding_weights(models, hf_models, ids, family):
    a, w = models[family].arch, models[family].weights
    h0 = _hf_run(hf_models[family], ids).hidden_states[0]
    pos = torch.arange(ids.shape[1])
    x = w.W_E[ids]
    if a.family == "gpt2":
        x = x + w.W_pos[pos]
    if a.family == "bert":  # token type 0 everywhere, then the embedding LayerNorm
        x = F.layer_norm(x + w.W_pos[pos] + w.W_type[0], (a.d_model,), w.ln_emb_w, w.ln_emb_b, a.norm_eps)
    assert (x - h0).abs().max() < ATOL


@pytest.mark.parametrize("family", FAMILIES)
def test_blocks_from_weights_match_hf(models, hf_models, ids, family):
    """Each HF block's output, recomputed from Weights + ArchInfo + HF's attention probabilities.

    This pins W_V, b_V, W_O, b_O, the MLP weights, both norms' gains/biases, the block
    structure (pre / parallel / post) and the GQA head mapping; W_Q/W_K are pinned below.
    """
    a, w = models[family].arch, models[family].weights
    out = _hf_run(hf_models[family], ids)
    hs, L = out.hidden_states, a.n_layers
    for layer in range(L):
        got = _block(w, a, layer, hs[layer], out.attentions[layer])
        if a.has_unembed and layer == L - 1:  # HF's last hidden state has the final norm applied
            got = _norm(got, w.lnf_w, w.lnf_b, a)
        assert (got - hs[layer + 1]).abs().max() < ATOL, f"layer {layer}"
    if a.has_unembed:
        logits = hs[-1] @ w.W_U + w.b_U
        assert (logits - out.logits).abs().max() < ATOL


@pytest.mark.parametrize("family", FAMILIES)
def test_qkv_z_and_outputs_match_bridge_hooks(models, ids, family):
    """q/k/v from the attention input and W_Q/b_Q etc. equal the bridge's hook_q/k/v (pre-rotary);
    z equals the pattern applied to v through kv_head; the sublayer outputs equal the hooks."""
    m = models[family]
    a, w = m.arch, m.weights
    with torch.no_grad():
        _, c = m.bridge.run_with_cache(ids)
    for layer in range(a.n_layers):
        x = c[f"blocks.{layer}.attn.hook_in"]
        for name, W, b in (("q", w.W_Q, w.b_Q), ("k", w.W_K, w.b_K), ("v", w.W_V, w.b_V)):
            want = torch.einsum("bpd,ndh->bpnh", x, W[layer]) + b[layer]
            hook = c[f"blocks.{layer}.attn.hook_{name}"]
            assert hook.shape == want.shape, name  # k, v: n_kv_heads under GQA
            assert (hook - want).abs().max() < ATOL, name
        pattern, z = c[f"blocks.{layer}.attn.hook_pattern"], c[f"blocks.{layer}.attn.hook_z"]
        v = c[f"blocks.{layer}.attn.hook_v"][:, :, _kv_index(a)]
        assert (torch.einsum("bnqk,bknh->bqnh", pattern, v) - z).abs().max() < ATOL
        attn = torch.einsum("bqnh,nhd->bqd", z, w.W_O[layer]) + w.b_O[layer]
        # The attention sublayer's own output (before any residual add / post-norm).
        assert (attn - c[f"blocks.{layer}.attn.o.hook_out"]).abs().max() < ATOL
        mlp = _mlp_out(w, a, layer, c[f"blocks.{layer}.mlp.hook_in"])
        assert (mlp - c[f"blocks.{layer}.hook_mlp_out"]).abs().max() < ATOL
        if a.norm_placement == "pre":
            assert (attn - c[f"blocks.{layer}.hook_attn_out"]).abs().max() < ATOL


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_qk_weights_give_hf_attention(models, hf_models, ids, family):
    """For the non-rotary families, softmax((x W_Q + b_Q)(x W_K + b_K)ᵀ/√d_head) is HF's pattern."""
    a, w = models[family].arch, models[family].weights
    out = _hf_run(hf_models[family], ids)
    n = ids.shape[1]
    for layer in range(a.n_layers):
        x = out.hidden_states[layer]
        if a.norm_placement == "pre":
            x = _norm(x, w.ln1_w[layer], w.ln1_b[layer], a)
        q = torch.einsum("bpd,ndh->bnph", x, w.W_Q[layer]) + w.b_Q[layer][:, None]
        k = torch.einsum("bpd,ndh->bnph", x, w.W_K[layer]) + w.b_K[layer][:, None]
        scores = q @ k.transpose(-1, -2) / math.sqrt(a.d_head)
        if a.causal:
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        assert (scores.softmax(-1) - out.attentions[layer]).abs().max() < ATOL


def test_bert_bridge_hook_semantics(models, ids):
    """Regression pin: on BERT the bridge's hook_attn_out is *after* the
    post-norm LN1 (= the block's mid residual), not the attention sublayer's output, and
    hook_resid_mid is LN2's input. The sublayer output is attn.o.hook_out."""
    m = models["bert"]
    with torch.no_grad():
        _, c = m.bridge.run_with_cache(ids)
    for layer in range(m.arch.n_layers):
        b = f"blocks.{layer}."
        assert torch.allclose(c[b + "hook_attn_out"], c[b + "ln1.hook_out"])
        assert torch.allclose(c[b + "ln1.hook_in"], c[b + "hook_resid_pre"] + c[b + "attn.o.hook_out"], atol=1e-5)
        assert torch.allclose(c[b + "hook_resid_mid"], c[b + "ln1.hook_out"] + c[b + "hook_mlp_out"], atol=1e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_resid_hooks_add_up(models, ids, family):
    """Pre-norm: resid_pre + attn_out == resid_mid and resid_mid + mlp_out == resid_post."""
    m = models[family]
    with torch.no_grad():
        _, c = m.bridge.run_with_cache(ids)
    for layer in range(m.arch.n_layers):
        b = f"blocks.{layer}."
        assert (c[b + "hook_resid_pre"] + c[b + "hook_attn_out"] - c[b + "hook_resid_mid"]).abs().max() < 1e-5
        assert (c[b + "hook_resid_mid"] + c[b + "hook_mlp_out"] - c[b + "hook_resid_post"]).abs().max() < 1e-5


# ---------------------------------------------------------------------------------------------
# Tokens


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox"])
def test_to_tokens_decoders_prepend_bos(models, family):
    m = models[family]
    assert m.prepend_bos
    # word-level tiny vocabulary: <pad>=0 <bos>=1 <eos>=2 <unk>=3, then w0=4, w1=5, ...
    assert m.to_tokens("w1 w2 w3").tolist() == [[1, 5, 6, 7]]
    assert m.to_tokens(["w1 w2 w3", "w4"]).tolist() == [[1, 5, 6, 7], [1, 8, 0, 0]]  # right-padded
    assert m.to_str_tokens("w1 w2 w3") == ["<bos>", "w1", "w2", "w3"]
    assert m.to_str_tokens(torch.tensor([[1, 5], [1, 6]])) == [["<bos>", "w1"], ["<bos>", "w2"]]
    assert m.to_str_tokens([5, 6]) == ["w1", "w2"]


def test_to_tokens_bert_uses_tokenizer_special_tokens(models):
    m = models["bert"]
    assert not m.prepend_bos
    want = m.tokenizer("w1 w2 w3", add_special_tokens=True)["input_ids"]
    assert m.to_tokens("w1 w2 w3").tolist() == [want]


def test_to_str_tokens_rejects_3d(models):
    from interp.errors import ArgumentError

    with pytest.raises(ArgumentError, match="1-D or 2-D"):
        models["gpt2"].to_str_tokens(torch.zeros(1, 1, 2, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_are_exact_copies(dtype):
    """Weights in 16-bit are bit-exact rearrangements of the HF parameters (no float round trip)."""
    m, hf = tiny_model("llama", dtype=dtype), tiny_hf_model("llama", dtype=dtype)
    w, layers = m.weights, hf.model.layers
    assert w.W_Q.dtype == dtype
    for layer in range(2):
        q = layers[layer].self_attn.q_proj.weight.detach()  # [n_heads*d_head, d_model]
        for h in range(4):
            assert torch.equal(w.W_Q[layer, h], q[8 * h : 8 * (h + 1)].T)
        assert torch.equal(w.W_gate[layer], layers[layer].mlp.gate_proj.weight.detach().T)
        assert torch.equal(w.W_out[layer], layers[layer].mlp.down_proj.weight.detach().T)
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        assert torch.equal(m.bridge(ids), hf(ids).logits)
