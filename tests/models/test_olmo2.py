"""OLMo 2 on a tiny random model: the capabilities read off its config, and the trace's exact
decomposition checked against the Hugging Face modules' own tensors (forward hooks on a separately
built copy; no interp code in the reference).

OLMo 2's block has no pre-norm: x_mid = x + N1'(Attn(x)), x_out = x_mid + N2'(MLP(x_mid)), and its
QK-norm is one RMSNorm over the whole projected q (all heads, n_heads·d_head) and k.
"""

import pytest
import torch

import interp
import interp.stream.internal
from interp.errors import UnsupportedArchitectureError
from tiny_models import hooked_forward, tiny_hf_model, tiny_model

PROMPTS = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9"]


def test_capabilities_and_weights_are_the_configs():
    m = tiny_model("olmo2")
    a, w = m.arch, m.weights
    hf = tiny_hf_model("olmo2")
    assert (a.family, a.pre_norms, a.qk_norm, a.qk_norm_scope, a.sandwich_norms) == (
        "olmo2",
        False,
        True,
        "projection",
        True,
    )
    att = hf.model.layers[1].self_attn
    assert w.q_norm_w is not None and w.k_norm_w is not None
    torch.testing.assert_close(w.q_norm_w[1].reshape(-1), att.q_norm.weight.detach())  # [H, dh] = the [H·dh] gain
    torch.testing.assert_close(w.k_norm_w[1].reshape(-1), att.k_norm.weight.detach())  # [Hkv, dh]
    torch.testing.assert_close(w.ln1_post_w[1], hf.model.layers[1].post_attention_layernorm.weight.detach())
    torch.testing.assert_close(w.ln2_post_w[1], hf.model.layers[1].post_feedforward_layernorm.weight.detach())


def _hf_tensors(batch):
    """Per layer: the attention's input (what q/k/v read), the o_proj input (z) and output, the sandwich
    norms' outputs and the MLP's input, from a separately built HF model; and its hidden states."""
    hf = tiny_hf_model("olmo2")
    got: dict = {}

    def pre(key, l):
        return lambda mod, args: got.__setitem__((key, l), args[0].detach())

    def post(key, l):
        return lambda mod, args, out: got.__setitem__((key, l), (out[0] if isinstance(out, tuple) else out).detach())

    hs = []
    for l, layer in enumerate(hf.model.layers):
        hs += [
            layer.self_attn.q_proj.register_forward_pre_hook(pre("q_in", l)),
            layer.self_attn.o_proj.register_forward_pre_hook(pre("z", l)),
            layer.self_attn.o_proj.register_forward_hook(post("o", l)),
            layer.post_attention_layernorm.register_forward_hook(post("attn_out", l)),
            layer.mlp.register_forward_pre_hook(pre("mlp_in", l)),
            layer.post_feedforward_layernorm.register_forward_hook(post("mlp_out", l)),
        ]
    out = hooked_forward(hf, hs, batch.tokens, attention_mask=batch.attention_mask, output_hidden_states=True)
    return got, out


def _rel(a, b, mask):
    m = mask.bool()
    return float((a - b)[m].abs().max() / b[m].abs().max())


def test_every_read_decomposes_exactly_to_the_hf_tensor():
    """q/k/v and the MLP read the raw stream (no pre-norm): each read's terms sum to HF's q_proj / mlp input;
    each head's term at resid_mid is its own z_h W_O^h through the frozen sandwich norm, γ' ⊙ · / σ'(o_proj
    output), read off HF's modules; the resid points are HF's hidden states."""
    m = tiny_model("olmo2")
    tr = interp.trace(m, PROMPTS)
    batch = interp.stream.internal.as_batch(m, PROMPTS)
    hf, out = _hf_tensors(batch)
    mask = batch.attention_mask
    a = m.arch
    for l in range(a.n_layers):
        for read, ref in (
            (f"L{l}.attn.q[H1]", hf["q_in", l]),
            (f"L{l}.attn.k[H0]", hf["q_in", l]),
            (f"L{l}.mlp.in", hf["mlp_in", l]),
        ):
            d = tr.decompose(read)
            assert d.relative_error < 1e-5, (read, d.relative_error)
            assert _rel(d.contributions.sum(0), ref, mask) < 1e-5, read
        mid = tr.decompose(f"blocks.{l}.hook_resid_mid")
        assert _rel(mid.contributions.sum(0), hf["mlp_in", l], mask) < 1e-5
        gamma = m.weights.ln1_post_w[l]
        sigma = torch.sqrt(hf["o", l].pow(2).mean(-1, keepdim=True) + a.norm_eps)  # σ' of the whole attention output
        z = hf["z", l].reshape(*hf["z", l].shape[:2], a.n_heads, a.d_head)
        for h in range(a.n_heads):
            write = gamma * (z[:, :, h] @ m.weights.W_O[l, h]) / sigma
            assert _rel(mid[f"L{l}.H{h}"], write, mask) < 1e-5, (l, h)
        heads = sum(mid[f"L{l}.H{h}"] for h in range(a.n_heads))
        assert _rel(heads, hf["attn_out", l], mask) < 1e-5  # no o_proj bias: the heads are the whole output
        post = tr.decompose(f"blocks.{l}.hook_resid_post")
        assert (
            _rel(
                post.contributions.sum(0),
                out.hidden_states[l + 1] if l + 1 < a.n_layers else hf["mlp_in", l] + hf["mlp_out", l],
                mask,
            )
            < 1e-5
        )
        assert _rel(post[f"L{l}.mlp"], hf["mlp_out", l], mask) < 1e-5
    d = tr.decompose("unembed")  # through the final norm (OLMo 2's only norm on the stream itself)
    assert d.relative_error < 1e-5


def test_qk_norm_mixes_heads_a_patch_of_one_key_moves_every_heads_scores():
    """One σ over the whole projected key: patching KV head 0's key (before the norm) renormalises every head's
    key; interp's patch equals HF's forward with that slice of k_proj's output replaced."""
    m = tiny_model("olmo2", dtype=torch.float64)
    clean, corrupt = "w1 w2 w3 w4 w5 w6", "w1 w9 w3 w8 w5 w6"
    metric = interp.Logit("w7")
    r = interp.patch(m, clean, corrupt, metric=metric, nodes=["L1.attn.k[H0]"], direction="noise")
    hf = tiny_hf_model("olmo2", dtype=torch.float64)
    for mod in hf.modules():  # HF's RMSNorm rounds through float32: compute it in float64 as interp does
        if type(mod).__name__ == "Olmo2RMSNorm":
            mod.forward = (
                lambda self: (
                    lambda x: self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))
                )
            )(mod)
    bc, bk = (interp.stream.internal.as_batch(m, t) for t in (clean, corrupt))
    k_proj = hf.model.layers[1].self_attn.k_proj
    dh = m.arch.d_head
    src = {}
    h = k_proj.register_forward_hook(lambda mod, args, out: src.__setitem__("k", out.detach().clone()))
    hooked_forward(hf, [h], bk.tokens)

    def put(mod, args, out):
        out = out.clone()
        out[..., :dh] = src["k"][..., :dh]  # KV head 0's key, every position
        return out

    logits = hooked_forward(hf, [k_proj.register_forward_hook(put)], bc.tokens).logits
    tid = m.tokenizer.convert_tokens_to_ids("w7")
    want = float(logits[0, -1, tid])
    assert abs(float(r.values[0]) - want) < 1e-9  # the metric after the patch
    assert abs(want - float(r.clean)) > 1e-3  # and the patch did something


def test_qk_fix_is_refused_by_type():
    """AtP*'s QK fix recomputes one head's pattern from its own normed q/k: with a projection-wide σ a patched
    head's q moves every head's, so the fix is refused (plain AtP runs)."""
    m = tiny_model("olmo2")
    with pytest.raises(UnsupportedArchitectureError, match="whole projected q and k"):
        interp.attribution_patch(
            m, "w1 w2 w3", "w4 w5 w6", metric=interp.Logit("w7"), nodes=["L1.attn.q[H0]"], qk_fix=True
        )
