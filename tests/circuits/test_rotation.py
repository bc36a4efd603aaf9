"""rotate_residual: exact logits, rotated weights, invariance of circuit statistics, refusals."""

import pytest
import torch

import interp.circuits as C
from circuits_reference import capture
from interp.errors import ArgumentError, ShapeError, UnsupportedOperationError

TOKS = torch.tensor([[1, 17, 42, 5, 63, 8, 99, 23, 4, 71], [1, 9, 9, 9, 30, 31, 32, 33, 34, 35]])


def _haar(d, seed):
    q, r = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def _fixing_ones(d, seed):
    """An independent R with R·1 = 1: Haar rotation of an orthonormal basis of 1's complement."""
    g = torch.Generator().manual_seed(seed)
    u = torch.ones(d, 1, dtype=torch.float64) / d**0.5
    Bfull = torch.linalg.qr(torch.cat([u, torch.randn(d, d - 1, generator=g, dtype=torch.float64)], 1)).Q
    B = Bfull[:, 1:]  # [d, d-1], orthogonal to 1
    return u @ u.T + B @ _haar(d - 1, seed + 1) @ B.T


@pytest.fixture(scope="module")
def rotated_llama(tiny_models):
    R = _haar(32, 0)  # a generic rotation, R·1 ≠ 1: fine for RMSNorm
    assert float((R @ torch.ones(32, dtype=R.dtype) - 1).abs().max()) > 0.1
    return tiny_models["llama"], C.rotate_residual(tiny_models["llama"], R), R


def test_llama_logits_unchanged_and_stream_rotated(rotated_llama):
    m, r, R = rotated_llama
    names = ["blocks.1.hook_resid_pre"]
    a, b = capture(m, TOKS, names), capture(r, TOKS, names)
    torch.testing.assert_close(b["logits"], a["logits"], atol=1e-4, rtol=1e-4)
    # the residual stream itself is the old one times R
    torch.testing.assert_close(b[names[0]].double(), a[names[0]].double() @ R, atol=1e-4, rtol=1e-4)


def test_rotated_weights_are_the_folded_rotated_ones(rotated_llama):
    m, r, R = rotated_llama
    w, v = m.weights, r.weights
    R = R.float()
    torch.testing.assert_close(v.W_E, w.W_E @ R, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v.W_Q, R.T @ (w.ln1_w[:, None, :, None] * w.W_Q), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v.W_O, w.W_O @ R, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v.W_U, R.T @ (w.lnf_w[:, None] * w.W_U), atol=1e-5, rtol=1e-5)
    assert torch.equal(v.ln1_w, torch.ones_like(v.ln1_w)) and torch.equal(v.lnf_w, torch.ones_like(v.lnf_w))
    # the bridge runs a module holding the same weights (read back through the bridge)
    torch.testing.assert_close(r.bridge.W_Q.detach(), v.W_Q, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(r.bridge.W_U.detach(), v.W_U, atol=1e-6, rtol=1e-6)


def test_llama_circuit_statistics_invariant(rotated_llama):
    m, r, _ = rotated_llama
    for kind in "QKV":
        a, b = C.composition_scores(m, kind), C.composition_scores(r, kind)
        torch.testing.assert_close(b.scores[b.mask], a.scores[a.mask], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(C.copying_scores(r).scores, C.copying_scores(m).scores, atol=1e-5, rtol=1e-4)
    # the full OV circuit (token → logit) is basis-free, so its entries are unchanged
    torch.testing.assert_close(
        C.ov_circuit(r, 1, 2, full=True).AB, C.ov_circuit(m, 1, 2, full=True).AB, atol=1e-5, rtol=1e-4
    )
    # ... while a d_model-basis object like the OV matrix itself is rotated
    assert (C.ov_circuit(r, 1, 2).AB - C.ov_circuit(m, 1, 2).AB).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["gpt2", "neox"])
def test_layernorm_models_with_R_fixing_ones(tiny_models, family):
    m = tiny_models[family]
    R = _fixing_ones(32, 3)
    r = C.rotate_residual(m, R)
    a, b = capture(m, TOKS, []), capture(r, TOKS, [])
    torch.testing.assert_close(b["logits"], a["logits"], atol=1e-4, rtol=1e-4)
    for kind in "QKV":
        x, y = C.composition_scores(m, kind), C.composition_scores(r, kind)
        torch.testing.assert_close(y.scores[y.mask], x.scores[x.mask], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(C.copying_scores(r).scores, C.copying_scores(m).scores, atol=1e-5, rtol=1e-4)


def test_random_rotation_helper():
    R = C.random_rotation(16, fix_ones=True, seed=4)
    torch.testing.assert_close(R.T @ R, torch.eye(16, dtype=R.dtype))
    torch.testing.assert_close(R @ torch.ones(16, dtype=R.dtype), torch.ones(16, dtype=R.dtype))
    assert (R - torch.eye(16, dtype=R.dtype)).abs().max() > 0.1


def test_refusals(tiny_models):
    llama, gpt2 = tiny_models["llama"], tiny_models["gpt2"]
    with pytest.raises(ArgumentError, match="R is not orthogonal"):
        C.rotate_residual(llama, 2 * torch.eye(32))
    with pytest.raises(ShapeError, match=r"R has shape \(31, 31\)"):
        C.rotate_residual(llama, torch.eye(31))
    with pytest.raises(ShapeError, match="R must be a torch.Tensor"):
        C.rotate_residual(llama, [[1.0]])
    with pytest.raises(ArgumentError, match=r"R·1 ≠ 1.*LayerNorm subtracts each vector's mean"):
        C.rotate_residual(gpt2, _haar(32, 1))
    with pytest.raises(UnsupportedOperationError, match="post-norm"):
        C.rotate_residual(tiny_models["bert"], _fixing_ones(32, 0))
    with pytest.raises(ArgumentError, match="atol"):
        C.rotate_residual(llama, torch.eye(32), atol=0)
