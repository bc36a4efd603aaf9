"""Vocabulary-long products computed in blocks give the numbers of the one-shot product.

copying_scores sums W_U W_E over vocabulary blocks (no float64 copy of a [d_vocab, d_model] matrix);
here the block is shrunk below the tiny models' vocabulary so several blocks are summed, and the
scores are compared with eigenvalues of the dense full OV circuit W_E W_V W_O W_U built here.
"""

import pytest
import torch

import interp.circuits._copying as copying
from interp.circuits import copying_scores


@pytest.mark.parametrize("fold", [True, False])
def test_copying_scores_over_vocab_blocks_equal_dense_eigenvalues(family_model, monkeypatch, fold):
    m = family_model
    if not m.arch.has_logits:
        pytest.skip("an encoder without logits has no full OV circuit (refusal tested in test_copying.py)")
    monkeypatch.setattr(copying, "_VOCAB_BLOCK", 7)  # d_vocab = 100: 15 blocks
    got = copying_scores(m, fold_norms=fold).scores
    monkeypatch.setattr(copying, "_VOCAB_BLOCK", 10**9)  # one block
    one = copying_scores(m, fold_norms=fold).scores
    torch.testing.assert_close(got, one, atol=1e-6, rtol=0)  # float32 scores: block sums round differently
    a, w = m.arch, m.weights
    d = a.d_model
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d
    W_E, W_U = w.W_E.double(), w.W_U.double()
    if fold and a.norm == "layernorm":
        W_E = W_E @ P
    if fold and a.norm in ("layernorm", "rmsnorm") and a.norm_placement == "pre":
        W_U = w.lnf_w.double()[:, None] * W_U
        if a.norm == "layernorm":
            W_U = P @ W_U
    for l in range(a.n_layers):
        for h in range(a.n_heads):
            V = w.W_V[l, a.kv_head(h)].double()
            if fold and a.norm in ("layernorm", "rmsnorm") and a.norm_placement == "pre":
                V = w.ln1_w[l].double()[:, None] * V
                if a.norm == "layernorm":
                    V = P @ V
            O = w.W_O[l, h].double() @ (P if fold and a.norm == "layernorm" else torch.eye(d, dtype=torch.float64))
            lam = torch.linalg.eigvals(W_E @ V @ O @ W_U)
            ref = float(lam.real.sum() / lam.abs().sum())
            assert float(got[l, h]) == pytest.approx(ref, abs=1e-6), (l, h)
