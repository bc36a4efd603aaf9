"""Half precision with honest numbers (docs/math.md, "Precision").

A half-precision model rounds every write it makes and every addition into its stream; a decomposition of it
accumulates its terms in float32, so (1) its own arithmetic adds nothing at half-precision scale — the sum of its
terms equals the float64 sum of the same captured half-precision writes through the frozen final norm to float32
rounding — and (2) its closure against the model's own output is within the model's rounding, bounded element by
element from the unit roundoff u (2^-8 bfloat16, 2^-11 float16):

    |Σ terms − y| ≤ u · (Σ_k |s_k| + Σ_l |attn_l|) · |γ| / σ + 2u · |y|

s_k the stream after each of the 2L additions (a rounding each), attn_l each attention output (the o_proj GEMM
rounds once; the decomposition splits it per head in float32), the last term the final norm's two roundings
(x/σ, then × γ). Both failed before the decomposition accumulated in float32 (bf16: 4.8e-3 relative arithmetic
error; gap/bound 1.21)."""

from __future__ import annotations

import warnings

import pytest
import torch

import interp
import interp.engine.internal
from interp._norms import accumulate_dtype, norm_scale
from tiny_models import tiny_model

PROMPTS = ["w1 w2 w3 w4 w1 w2 w9 w10", "w5 w6 w7 w8 w5 w6 w11 w3"]
CORRUPT = ["w1 w2 w3 w4 w13 w14 w9 w10", "w5 w6 w7 w8 w15 w16 w11 w3"]
ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def half(request):
    return tiny_model("llama", dtype=request.param), request.param


def _exact(m, t):
    """The float64 sum of the captured writes (heads split from z in float64) through the frozen final norm, and
    the per-element rounding bound of the model's own output."""
    A = {k: v.double() for k, v in t.activations.items()}
    w, L = m.weights, m.arch.n_layers
    attn = [
        torch.einsum("bphe,hed->bpd", A[f"blocks.{l}.attn.hook_z"], w.W_O[l].double()) + w.b_O[l].double()
        for l in range(L)
    ]
    total = A["embed.hook_out"] + sum(attn) + sum(A[f"blocks.{l}.hook_mlp_out"] for l in range(L))
    x = A["ln_final.hook_in"]
    sigma = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + m.arch.norm_eps)
    gain = w.lnf_w.double()
    stream = [A[f"blocks.{l}.hook_resid_{s}"] for l in range(L) for s in ("mid", "post")]
    y = A["ln_final.hook_out"]
    u = ROUNDOFF[m.dtype]
    bound = u * (sum(s.abs() for s in stream) + sum(a.abs() for a in attn)) * gain.abs() / sigma + 2 * u * y.abs()
    return gain * total / sigma, y, bound


def test_decomposition_adds_no_rounding_of_its_own(half):
    m, dtype = half
    t = interp.trace(m, PROMPTS)
    d = t.decompose("unembed")
    assert d.contributions.dtype == torch.float32
    exact, _, _ = _exact(m, t)
    rel = float((d.contributions.double().sum(0) - exact).abs().max() / exact.abs().max())
    assert rel <= len(d.labels) * 2.0**-23, rel  # float32: each of the n terms rounds once, the sum n times


def test_closure_is_the_model_own_rounding(half):
    m, dtype = half
    t = interp.trace(m, PROMPTS)
    d = t.decompose("unembed")
    _, y, bound = _exact(m, t)
    torch.testing.assert_close(d.total.double(), y, rtol=0, atol=0)  # reported against the model's own output
    gap = (d.contributions.double().sum(0) - y).abs()
    assert bool((gap <= bound).all()), f"gap/bound up to {float((gap / bound).max()):.2f}"


def test_half_models_run_the_analyses(half):
    m, dtype = half
    metric = interp.LogitDiff(["w3", "w7"], ["w4", "w8"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = interp.attribute_logits(m, PROMPTS, answer=["w3", "w7"], wrong=["w4", "w8"])
        p = interp.patch(m, PROMPTS, CORRUPT, metric=metric, progress=False)
        e = interp.edge_attribution(m, PROMPTS, CORRUPT, metric=metric, progress=False)
    assert a.values.dtype == torch.float32 and bool(torch.isfinite(a.values).all())
    assert bool(torch.isfinite(p.effect).all()) and bool(torch.isfinite(e.scores).all())


def test_one_norm_scale_rule():
    """The engine's σ and the decomposition's are one function: reduced in float32, the engine's rounded once to
    its input's dtype (was reduced in bfloat16 by the engine)."""
    m = tiny_model("llama", dtype=torch.bfloat16)
    x = torch.randn(2, 5, m.arch.d_model, generator=torch.Generator().manual_seed(0)).to(m.device, torch.bfloat16) * 30
    ref = torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + m.arch.norm_eps)
    assert norm_scale(x, "rmsnorm", m.arch.norm_eps).dtype == torch.float32
    torch.testing.assert_close(norm_scale(x, "rmsnorm", m.arch.norm_eps).double(), ref, rtol=2.0**-23, atol=0)
    eng = interp.engine.internal.Engine.of(m).norm_scale(x)
    assert eng.dtype == torch.bfloat16
    assert torch.equal(eng, ref.to(torch.bfloat16))  # correctly rounded once
    assert accumulate_dtype(torch.bfloat16) == accumulate_dtype(torch.float16) == torch.float32
    assert accumulate_dtype(torch.float64) == torch.float64
