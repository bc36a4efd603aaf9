"""The one logit readout (interp.engine.readout): its soft-cap against Hugging Face's own, and its options.

logits = N_f(x) W_U + b_U, soft-capped c·tanh(z/c) where the model caps (the readout of every family against the
model's logits: tests/engine/test_engine.py). Here: ``capped=False`` gives the logits before the cap (the HF model
with its cap switched off); a frozen σ equal to the recomputed one changes nothing; ``weights=`` reads in another
dtype; ``unembedding`` gives b_U = 0 where the model has none.
"""

from __future__ import annotations

import pytest
import torch

from interp.engine.internal import Engine, final_norm, soft_cap
from interp.engine import readout, unembedding
from interp.models import model_from_hf_unchecked
from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer

IDS = torch.tensor([[3, 9, 4, 12, 7, 5, 11], [8, 2, 6, 10, 3, 13, 4]])


def _pair(family: str, **overrides):
    """(interp model, an untouched copy of the same seeded float64 HF model)."""
    model = model_from_hf_unchecked(
        tiny_hf_model(family, dtype=torch.float64, **overrides),
        tiny_tokenizer(),
        name=f"tiny-{family}",
        dtype=torch.float64,
    )
    return model, tiny_hf_model(family, dtype=torch.float64, **overrides)


def _final(model):
    return Engine(model).run(IDS, torch.ones_like(IDS)).final


def test_the_readout_capped_and_uncapped_is_the_hf_model_with_and_without_its_soft_cap():
    model, _ = _pair("gemma2")
    hf = model.bridge.original_model  # the module the model was built from
    assert model.arch.final_softcap == pytest.approx(0.3)
    capped_ref = hooked_forward(hf, [], IDS).logits
    hf.config.final_logit_softcapping = None  # the same module, its final cap switched off
    try:
        linear_ref = hooked_forward(hf, [], IDS).logits
    finally:
        hf.config.final_logit_softcapping = 0.3
    x = _final(model)
    capped, linear = readout(model, x), readout(model, x, capped=False)
    torch.testing.assert_close(capped, capped_ref, rtol=0, atol=1e-10 * float(capped_ref.abs().max()))
    torch.testing.assert_close(linear, linear_ref, rtol=0, atol=1e-10 * float(linear_ref.abs().max()))
    assert float(linear.abs().max()) > 0.3  # past the cap: the two differ
    torch.testing.assert_close(soft_cap(linear, 0.3), capped, rtol=0, atol=0)
    assert torch.equal(soft_cap(linear, 0.0), linear)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_frozen_scale_equal_to_the_recomputed_one_reads_the_same(family):
    model, _ = _pair(family)
    x = _final(model)
    y, sigma = final_norm(model, x)
    assert torch.equal(readout(model, x, scale=sigma), readout(model, x))
    assert torch.equal(readout(model, x, "hidden"), y)
    beta = model.weights.lnf_b if model.weights.lnf_b is not None else 0.0  # LayerNorm's β (RMSNorm has none)
    doubled = readout(model, x, "hidden", scale=2 * sigma) - beta  # γ ⊙ centre(x) / 2σ
    torch.testing.assert_close(doubled, (y - beta) / 2, rtol=1e-12, atol=1e-12)


def test_unembedding_gives_zeros_for_weights_without_b_U_and_the_readout_reads_in_other_weights():
    model, _ = _pair("llama")
    x = _final(model)
    none = model.weights.with_updates(b_U=None)
    W_U, b_U = unembedding(model, weights=none)
    assert W_U is model.weights.W_U and torch.equal(b_U, torch.zeros(model.arch.d_vocab, dtype=torch.float64))
    assert torch.equal(readout(model, x, weights=none), final_norm(model, x)[0] @ W_U)
    w32 = model.weights.to(dtype=torch.float32)
    low = readout(model, x.float(), weights=w32)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low.double(), readout(model, x), rtol=1e-5, atol=1e-5)
