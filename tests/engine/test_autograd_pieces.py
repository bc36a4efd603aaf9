"""The engine's block pieces under autograd (the gradient passes run on them).

* ``Engine.norm_vjp`` (σ recomputed) is the vector-Jacobian product torch's autograd takes through the
  model's own Hugging Face norm module (LayerNorm on GPT-2, RMSNorm on Llama, Gemma's (1 + w) RMSNorm),
  and with σ frozen the one autograd takes through γ ⊙ C(x) / σ with σ detached;
* a whole layer built from the pieces (``read_norm``, ``project_qkv``, ``attention`` with QK-norm,
  ``attn_out``, ``joined``, ``mlp``) runs under autograd and gives what the engine's inference forward
  (checked against the bridge in test_engine.py) gives, on families with sandwich norms and QK-norm.
"""

from __future__ import annotations

import pytest
import torch

from interp.engine.internal import Engine
from tiny_models import tiny_model


def _hf_norm(model, l):
    layer = (
        model.bridge.original_model.base_model.layers[l]
        if hasattr(model.bridge.original_model.base_model, "layers")
        else model.bridge.original_model.transformer.h[l]
    )
    return getattr(layer, "input_layernorm", None) or layer.ln_1


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma"])
def test_norm_vjp_is_autograd_through_the_model_s_own_norm(family):
    m = tiny_model(family, dtype=torch.float64)
    e = Engine(m)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, m.arch.d_model, generator=g, dtype=torch.float64) * 3 + 1
    u = torch.randn(2, 5, m.arch.d_model, generator=g, dtype=torch.float64)
    hf = _hf_norm(m, 1)
    xr = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad((hf(xr) * u).sum(), xr)
    got = e.norm_vjp(u, x, m.weights.ln1_w[1], frozen=False)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # frozen: σ held, the ledger's linear map γ ⊙ C(x) / σ
    xr = x.clone().requires_grad_(True)
    c = xr - xr.mean(-1, keepdim=True) if m.arch.norm == "layernorm" else xr
    sigma = torch.sqrt(c.detach().pow(2).mean(-1, keepdim=True) + m.arch.norm_eps)
    (want_f,) = torch.autograd.grad((c / sigma * m.weights.ln1_w[1] * u).sum(), xr)
    torch.testing.assert_close(e.norm_vjp(u, x, m.weights.ln1_w[1], frozen=True), want_f, rtol=1e-10, atol=1e-12)
    assert (want_f - want).abs().max() > 1e-6  # the two conventions differ


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "gemma2", "olmo2"])
def test_a_layer_from_the_pieces_runs_under_autograd_and_equals_the_forward(family):
    m = tiny_model(family)
    e = Engine(m)
    tokens = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 11, 12]], device=m.device)
    mask = torch.ones_like(tokens)
    run = e.run(tokens, mask)
    x0 = run.resid_pre[0].clone().requires_grad_(True)
    with torch.enable_grad():
        qkv = e.project_qkv(0, e.read_norm(x0, 0, "attn"))
        mid = x0 + e.joined(0, e.attn_out(0, e.attention(0, qkv, mask)), "attn")
        out = mid + e.joined(0, e.mlp(0, e.read_norm(mid, 0, "mlp")), "mlp")
        (gx,) = torch.autograd.grad(out.square().sum(), x0)
    torch.testing.assert_close(out.detach(), run.resid_pre[1], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(gx).all() and gx.abs().max() > 0
