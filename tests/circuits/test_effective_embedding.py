"""effective_embedding against the Hugging Face model's own embedding, norm and first MLP, run by hand;
ov_circuit(embedding="effective") built on it; refusals where it is not defined."""

import pytest
import torch

import interp.circuits as C
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.models import ToyConfig, build_toy
from tiny_models import tiny_hf_model, tiny_model

FAMILIES = ("gpt2", "llama", "neox")


def _hf_effective(family):
    """W_E + MLP_0(N2_0(W_E)) with the HF model's own modules (its ln_2 / post-attention norm and MLP)."""
    hf = tiny_hf_model(family)
    if family == "gpt2":
        emb, blk = hf.transformer.wte.weight, hf.transformer.h[0]
        norm, mlp = blk.ln_2, blk.mlp
    elif family == "llama":
        emb, blk = hf.model.embed_tokens.weight, hf.model.layers[0]
        norm, mlp = blk.post_attention_layernorm, blk.mlp
    else:
        emb, blk = hf.gpt_neox.embed_in.weight, hf.gpt_neox.layers[0]
        norm, mlp = blk.post_attention_layernorm, blk.mlp
    with torch.no_grad():
        return emb + mlp(norm(emb))


@pytest.mark.parametrize("family", FAMILIES)
def test_effective_embedding_equals_the_hf_modules(family):
    m = tiny_model(family)
    ref = _hf_effective(family)
    got = C.effective_embedding(m, fold_norms=False, batch_size=7)  # chunks that do not divide d_vocab
    assert got.shape == (m.arch.d_vocab, m.arch.d_model)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert (got - m.weights.W_E).abs().max() > 1e-3  # the MLP's write is not nothing (tiny random init)
    folded = C.effective_embedding(m)
    centred = ref - ref.mean(-1, keepdim=True) if m.arch.norm == "layernorm" else ref
    torch.testing.assert_close(folded, centred, rtol=1e-5, atol=1e-5)


def test_ov_circuit_through_the_effective_embedding():
    m = tiny_model("llama")
    raw = C.ov_circuit(m, 1, 3, full=True)
    eff = C.ov_circuit(m, 1, 3, full=True, embedding="effective")
    W_V = C.ov_circuit(m, 1, 3).A  # the folded W_V of the head's KV head
    torch.testing.assert_close(eff.A, C.effective_embedding(m) @ W_V)
    torch.testing.assert_close(eff.B, raw.B)
    assert eff.label == "L1.H3 full OV (W_E,eff … W_U)" and eff.meta["embedding"] == "effective"
    assert raw.meta["embedding"] == "raw"
    with pytest.raises(ArgumentError, match="needs full=True"):
        C.ov_circuit(m, 1, 3, embedding="effective")
    with pytest.raises(ArgumentError, match="allowed: 'raw'"):
        C.ov_circuit(m, 1, 3, full=True, embedding="mlp0")


def test_effective_embedding_refused_without_an_mlp_or_for_post_norm():
    with pytest.raises(UnsupportedOperationError, match="attention-only"):
        C.effective_embedding(build_toy(ToyConfig()))
    with pytest.raises(UnsupportedOperationError, match="post-norm"):
        C.effective_embedding(tiny_model("bert"))
    with pytest.raises(ArgumentError, match="batch_size"):
        C.effective_embedding(tiny_model("gpt2"), batch_size=0)
