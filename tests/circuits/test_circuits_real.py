"""Circuits on the real catalog models: smollm2-135m (GQA 9/3, RoPE, RMSNorm) and minilm-l6."""

import pytest
import torch
from transformer_lens import FactoredMatrix
from transformer_lens.utilities.matrix import composition_scores as tl_composition_scores

import interp.circuits as C
from interp.errors import UnsupportedOperationError

pytestmark = pytest.mark.real


def test_smollm2_gqa_head_mapping(smollm2):
    m, w = smollm2, smollm2.weights
    assert (m.arch.n_heads, m.arch.n_kv_heads) == (9, 3)
    W_K, W_V = w.W_K.repeat_interleave(3, dim=1), w.W_V.repeat_interleave(3, dim=1)  # reference mapping
    tl_ov, tl_qk = m.bridge.OV, m.bridge.QK  # transformer-lens (expands KV heads itself)
    for layer, h in [(0, 0), (3, 2), (3, 3), (17, 5), (29, 8)]:
        ov = C.ov_circuit(m, layer, h, fold_norms=False)
        qk = C.qk_circuit(m, layer, h, fold_norms=False)
        assert torch.equal(ov.A, W_V[layer, h]) and torch.equal(qk.B, W_K[layer, h].T)
        assert torch.equal(ov.A, tl_ov.A[layer, h].detach()) and torch.equal(qk.B, tl_qk.B[layer, h].detach())
        assert ov.meta["kv_head"] == h // 3


@pytest.mark.parametrize("kind", ["K", "V"])
def test_smollm2_composition_matches_transformer_lens(smollm2, kind):
    """TL's own composition_scores on layer slices (src layers 0 and 13, dst layers 14 and 29)."""
    m, b = smollm2, smollm2.bridge
    ours = C.composition_scores(m, kind, fold_norms=False)  # the bridge's weights are the raw ones
    src, dst = [0, 13], [14, 29]
    with torch.no_grad():
        W_V, W_O = b._expand_kv_heads(b.W_V), b.W_O
        W_Q, W_K = b.W_Q, b._expand_kv_heads(b.W_K)
        left = FactoredMatrix(W_V[src], W_O[src])
        right = (
            FactoredMatrix(W_Q[dst], W_K[dst].transpose(-2, -1)).T
            if kind == "K"
            else FactoredMatrix(W_V[dst], W_O[dst])
        )
        tl = tl_composition_scores(left, right, broadcast_dims=True)  # [2, 9, 2, 9]
    got = ours.scores[src][:, :, dst]
    torch.testing.assert_close(got, tl.float(), atol=1e-4, rtol=0)
    assert torch.isnan(ours.scores[13, :, 13]).all() and torch.isnan(ours.scores[14, :, 0]).all()


def test_smollm2_copying_scores_via_a_second_cyclic_product(smollm2):
    """Σλ/Σ|λ| from the d_model × d_model cyclic product W_U W_E W_V W_O (float64), for a few heads."""
    m, w = smollm2, smollm2.weights
    got = C.copying_scores(m)
    UE = (w.lnf_w.double()[:, None] * w.W_U.double()) @ w.W_E.double()  # [d, d]
    for layer, h in [(0, 1), (10, 4), (29, 7)]:
        Wv = w.ln1_w[layer].double()[:, None] * w.W_V[layer, h // 3].double()
        lam = torch.linalg.eigvals(UE @ Wv @ w.W_O[layer, h].double())  # d_model eigenvalues, d_head of them nonzero
        ref = lam.real.sum() / lam.abs().sum()
        assert float(got.scores[layer, h]) == pytest.approx(float(ref), abs=1e-4)


def test_smollm2_rotation_keeps_logits(smollm2):
    R = C.random_rotation(smollm2.arch.d_model, seed=0)
    r = C.rotate_residual(smollm2, R)
    toks = torch.tensor([[1, 504, 3458, 314, 260, 1345, 28, 2173, 30]])
    with torch.no_grad():
        a, b = smollm2.bridge(toks), r.bridge(toks)
    assert float((a - b).abs().max()) <= 1e-4 * max(1.0, float(a.abs().max()))
    del r


def test_minilm_has_no_full_circuits(minilm):
    with pytest.raises(UnsupportedOperationError, match="no unembedding"):
        C.copying_scores(minilm)
    assert C.composition_scores(minilm, "Q").scores.shape == (6, 12, 6, 12)


def test_smollm2_head_operator_reproduces_the_heads_write(smollm2):
    """A ⊗ W_O W_V on the head's normalised input (ln1.hook_out) == z_h W_O^h from the model, all 9 heads."""
    from circuits_reference import capture

    m, layer = smollm2, 7
    toks = m.to_tokens("When Mary and John went to the store, John gave a drink to")
    cap = capture(
        m, toks, [f"blocks.{layer}.ln1.hook_out", f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_z"]
    )
    x = cap[f"blocks.{layer}.ln1.hook_out"][0]
    for h in range(m.arch.n_heads):
        actual = cap[f"blocks.{layer}.attn.hook_z"][0, :, h] @ m.weights.W_O[layer, h]
        got = C.head_operator(m, layer, h, cap[f"blocks.{layer}.attn.hook_pattern"][0, h]).apply(x)
        assert float((got - actual).norm() / actual.norm()) < 1e-4
