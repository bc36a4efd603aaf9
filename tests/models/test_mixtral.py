"""Mixtral (mixture-of-experts MLPs) on a tiny random model: 4 experts, the router's top 2 per token.

The engine's MoE block against the Hugging Face module's own output, the self-check, the trace's exact
decomposition (an MLP's write is the routed sum Σ_e r_e MLP_e, captured whole) against HF's hidden states,
attribution closure against HF's logits, patching against transformer-lens's sweeps on the same bridge, and
the typed refusals of what does not model experts yet (neurons, the MLPs' weight-only circuits).
"""

import pytest
import torch
from transformer_lens import patching

import interp
import interp.stream.internal
from interp.engine.internal import Engine
from interp.engine import self_check
from interp.errors import UnsupportedArchitectureError, UnsupportedOperationError
from tiny_models import hooked_forward, tiny_hf_model, tiny_model

PROMPTS = ["w1 w2 w3 w4 w5 w6 w7", "w8 w9 w10"]
CLEAN, CORRUPT = "w1 w2 w3 w4 w5 w6", "w1 w9 w3 w8 w5 w6"


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_self_check_and_moe_block_equal_hf(dtype, tol):
    m = tiny_model("mixtral", dtype=dtype)
    assert (m.arch.n_experts, m.arch.experts_per_token) == (4, 2)
    assert self_check(m) < tol
    hf = tiny_hf_model("mixtral", dtype=dtype)
    batch = interp.stream.internal.as_batch(m, PROMPTS)
    got = {}
    hs = [
        layer.mlp.register_forward_hook(lambda mod, args, out, l=l: got.__setitem__(l, (args[0], out)))
        for l, layer in enumerate(hf.model.layers)
    ]
    hooked_forward(hf, hs, batch.tokens, attention_mask=batch.attention_mask)
    e = Engine(m)
    for l, (x, out) in got.items():
        mine = e.mlp(l, x)  # the routed sum of the experts, from interp's weights
        assert (mine - out).abs().max() <= tol * out.abs().max()
        # the routing is not trivial: tokens go to different experts
        idx = torch.topk(x.reshape(-1, x.shape[-1]) @ m.weights.W_router[l], 2, dim=-1).indices
        assert len(set(idx.flatten().tolist())) == 4


@pytest.mark.parametrize("family", ["mixtral", "olmoe"])  # the mixture-of-experts families
def test_trace_decomposes_exactly_and_attribution_closes_on_hf_logits(family):
    m = tiny_model(family)
    tr = interp.trace(m, PROMPTS)
    batch = interp.stream.internal.as_batch(m, PROMPTS)
    hf = tiny_hf_model(family)
    outs = {}
    hs = [
        layer.mlp.register_forward_hook(lambda mod, args, out, l=l: outs.__setitem__(l, out))
        for l, layer in enumerate(hf.model.layers)
    ]
    ref = hooked_forward(hf, hs, batch.tokens, attention_mask=batch.attention_mask, output_hidden_states=True)
    mask = batch.attention_mask.bool()
    for l in range(m.arch.n_layers):
        d = tr.decompose(f"blocks.{l}.hook_resid_pre")
        assert d.relative_error < 1e-5
        assert (d.contributions.sum(0) - ref.hidden_states[l])[mask].abs().max() < 1e-5
        post = tr.decompose(f"blocks.{l}.hook_resid_post")
        assert (post[f"L{l}.mlp"] - outs[l])[mask].abs().max() < 1e-5  # the MoE write, whole
    a = interp.attribute_logits(m, PROMPTS, answer="w3", wrong="w4", unit="component")
    ids = m.tokenizer.convert_tokens_to_ids(["w3", "w4"])
    last = batch.attention_mask.sum(1) - 1
    want = ref.logits[torch.arange(2), last][:, ids[0]] - ref.logits[torch.arange(2), last][:, ids[1]]
    torch.testing.assert_close(a.values.sum(0), want, atol=1e-5, rtol=1e-5)
    assert a.closure_error < 1e-5


@pytest.mark.slow
def test_patch_equals_transformer_lens():
    m = tiny_model("mixtral")
    ids_c, ids_k = m.to_tokens(CLEAN), m.to_tokens(CORRUPT)
    a, b = m.tokenizer.convert_tokens_to_ids(["w7", "w2"])
    _, cache = m.bridge.run_with_cache(ids_c)

    def tl_metric(logits):
        return logits[0, -1, a] - logits[0, -1, b]

    heads = interp.patch(m, CLEAN, CORRUPT, metric=interp.LogitDiff("w7", "w2"), nodes="heads")
    tl = patching.get_act_patch_attn_head_out_all_pos(m.bridge, ids_k, cache, tl_metric)
    torch.testing.assert_close(heads.values.reshape(tl.shape), tl.to(heads.values.dtype), atol=1e-5, rtol=1e-4)
    mlps = interp.patch(m, CLEAN, CORRUPT, metric=interp.LogitDiff("w7", "w2"), nodes="components", positions="each")
    tl = patching.get_act_patch_mlp_out(m.bridge, ids_k, cache, tl_metric)  # [layer, pos]
    for l in range(m.arch.n_layers):
        torch.testing.assert_close(mlps[f"L{l}.mlp"].flatten(), tl[l].to(mlps.values.dtype), atol=1e-5, rtol=1e-4)


def test_what_does_not_model_experts_refuses_by_type():
    m = tiny_model("mixtral")
    with pytest.raises(UnsupportedArchitectureError, match="mixture-of-experts"):
        interp.trace(m, PROMPTS, neurons=True)
    with pytest.raises(UnsupportedArchitectureError, match="mixture-of-experts"):
        interp.attribute_logits(m, PROMPTS, answer="w3", unit="neuron")
    with pytest.raises(UnsupportedOperationError, match="mixture-of-experts"):
        interp.virtual_weights(m, "L0.mlp", "L1.attn.q[H0]")
    with pytest.raises(UnsupportedOperationError, match="mixture-of-experts"):
        interp.circuits.effective_embedding(m)
    assert interp.ov_circuit(m, 1, 0).AB.shape == (m.arch.d_model, m.arch.d_model)  # heads' circuits work
