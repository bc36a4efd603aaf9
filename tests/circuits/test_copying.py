"""Copying scores and OV diagonal statistics against constructed weights and dense full-OV circuits."""

import dataclasses

import pytest
import torch

import interp.circuits as C
from interp.errors import ArgumentError, UnsupportedOperationError


def _one_head_model(base, W_E, W_OV_sign, W_U=None):
    """A 1-layer, 1-head model with d_head = d_model and W_V = I, W_O = ±I (the OV circuit is ±identity)."""
    d = W_E.shape[1]
    arch = dataclasses.replace(
        base.arch, n_layers=1, n_heads=1, n_kv_heads=1, d_head=d, d_vocab=W_E.shape[0], name="constructed"
    )
    w = base.weights
    eye = torch.eye(d)[None, None]
    weights = w.with_updates(
        W_E=W_E,
        W_U=W_E.T.clone() if W_U is None else W_U,
        b_U=torch.zeros(W_E.shape[0]),
        W_Q=eye.clone(),
        W_K=eye.clone(),
        W_V=eye.clone(),
        W_O=W_OV_sign * eye,
        b_Q=torch.zeros(1, 1, d),
        b_K=torch.zeros(1, 1, d),
        b_V=torch.zeros(1, 1, d),
        ln1_w=torch.ones(1, d),
        ln1_b=torch.zeros(1, d),
        ln2_w=torch.ones(1, d),
        ln2_b=torch.zeros(1, d),
        lnf_w=torch.ones(d),
        lnf_b=torch.zeros(d),
    )
    return dataclasses.replace(base, arch=arch, weights=weights)


def test_identity_ov_scores_one_and_minus_identity_minus_one(tiny_models):
    base = tiny_models["llama"]  # RMSNorm: folding unit gains changes nothing
    W_E = torch.randn(50, base.arch.d_model, generator=torch.Generator().manual_seed(0))
    plus = _one_head_model(base, W_E, 1.0)
    minus = _one_head_model(base, W_E, -1.0)
    assert C.copying_scores(plus).scores.item() == pytest.approx(1.0, abs=1e-6)
    assert C.copying_scores(minus).scores.item() == pytest.approx(-1.0, abs=1e-6)
    # W_E W_U = W_E W_Eᵀ is PSD, so every token is its own top output
    st = C.ov_diagonal_stats(plus, 0, 0, k=1)
    assert st.top1 == pytest.approx(float(((W_E @ W_E.T).argmax(1) == torch.arange(50)).double().mean()))


def test_copying_score_equals_dense_eigenvalues(family_model):
    m = family_model
    if m.weights.W_U is None:
        with pytest.raises(UnsupportedOperationError, match="unembedding"):
            C.copying_scores(m)
        return
    got = C.copying_scores(m)
    for layer in range(m.arch.n_layers):
        for h in range(m.arch.n_heads):
            full = C.ov_circuit(m, layer, h, full=True)  # [d_vocab, d_vocab] — small for tiny models
            lam = torch.linalg.eigvals(full.A.double() @ full.B.double())  # all d_vocab eigenvalues
            ref = lam.real.sum() / lam.abs().sum()
            assert float(got.scores[layer, h]) == pytest.approx(float(ref), abs=1e-4)


def test_ov_diagonal_stats_equal_dense_ranks(family_model):
    m = family_model
    if m.weights.W_U is None:
        with pytest.raises(UnsupportedOperationError):
            C.ov_diagonal_stats(m, 0, 0)
        return
    fm = C.ov_circuit(m, 1, 3, full=True)
    full = fm.A.double() @ fm.B.double()  # dense float64 reference
    diag = full.diagonal()
    ref_rank = (full > diag[:, None]).sum(1)
    off = (full - diag[:, None]).abs() + torch.eye(full.shape[0], dtype=full.dtype)
    near_tie = (off < 1e-5 * full.abs().max()).any(1)  # float32 rounding may swap these with the diagonal
    exact = C.ov_diagonal_stats(m, 1, 3, k=5, exact_ranks=True, chunk_rows=7)  # odd chunks: exercises the edges
    st = C.ov_diagonal_stats(m, 1, 3, k=5, chunk_rows=7)  # ranks capped at k
    for got, ref in ((exact.ranks, ref_rank), (st.ranks, ref_rank.clamp(max=5))):
        assert bool(((got == ref) | near_tie).all())
        assert int((got != ref).sum()) <= 2
    assert exact.ranks_exact and not st.ranks_exact and int(exact.ranks.max()) > 5 and int(st.ranks.max()) == 5
    assert st.top1 == exact.top1 == pytest.approx(float((st.ranks == 0).double().mean()))
    assert st.topk == exact.topk == pytest.approx(float((st.ranks < 5).double().mean()))
    assert abs(st.top1 - float((ref_rank == 0).double().mean())) <= 0.02
    assert abs(st.topk - float((ref_rank < 5).double().mean())) <= 0.02
    torch.testing.assert_close(st.diagonal.double(), diag, atol=1e-5, rtol=1e-5)
    fold_false = C.ov_diagonal_stats(m, 1, 3, fold_norms=False)
    raw = C.ov_circuit(m, 1, 3, full=True, fold_norms=False)
    torch.testing.assert_close(
        fold_false.diagonal.double(), (raw.A.double() @ raw.B.double()).diagonal(), atol=1e-5, rtol=1e-5
    )
    assert st.to_dataframe().shape == (full.shape[0], 3)
    assert st.plot().data[0].type == "histogram" and exact.plot().data[0].type == "histogram"


def test_minilm_like_encoder_without_unembedding_is_refused(tiny_models):
    m = tiny_models["bert"]  # interp reads no W_U for BERT (weights.W_U is None)
    with pytest.raises(UnsupportedOperationError, match="no unembedding"):
        C.copying_scores(m)
    with pytest.raises(UnsupportedOperationError):
        C.ov_circuit(m, 0, 0, full=True)


def test_head_scores_structure_and_errors(tiny_models):
    s = C.copying_scores(tiny_models["gpt2"])
    assert s.scores.shape == (2, 4)
    assert s["L1.H2"] == pytest.approx(float(s.scores[1, 2]))
    assert list(s.top(2)["copying_score"]) == sorted(s.scores.reshape(-1).tolist(), reverse=True)[:2]
    assert s.plot().data[0].type == "heatmap"
    with pytest.raises(KeyError, match="L5.H0"):
        s["L5.H0"]
    with pytest.raises(ArgumentError, match="k="):
        C.ov_diagonal_stats(tiny_models["gpt2"], 0, 0, k=0)
    with pytest.raises(ArgumentError, match="k=1000"):
        C.ov_diagonal_stats(tiny_models["gpt2"], 0, 0, k=1000)
    with pytest.raises(ArgumentError, match="head"):
        C.ov_diagonal_stats(tiny_models["gpt2"], 0, 7)
