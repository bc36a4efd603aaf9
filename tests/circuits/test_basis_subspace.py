"""privileged_basis_report (hooked), write-subspace overlap and erasure candidates."""

import dataclasses

import pytest
import torch

import interp.circuits as C
from circuits_reference import capture, n_hooks
from interp.errors import ArgumentError, ShapeError


def _kurtosis(x):
    """Excess kurtosis per column, the textbook two-pass way (float64)."""
    x = x.double()
    c = x - x.mean(0)
    return (c.pow(4).mean(0) / c.pow(2).mean(0) ** 2 - 3).float()


def test_kurtosis_matches_captured_activations(family_model):
    m = family_model
    toks = torch.randint(4, 100, (3, 16), generator=torch.Generator().manual_seed(0))
    toks[:, 0] = 1
    rep = C.privileged_basis_report(m, toks)
    names = [f"blocks.{l}.hook_resid_post" for l in range(m.arch.n_layers)] + [
        f"blocks.{l}.mlp.out.hook_in" for l in range(m.arch.n_layers)
    ]
    rows = [capture(m, t[None], names) for t in toks]  # one prompt at a time, like the report
    Q = C.random_rotation(m.arch.d_model, seed=0)
    for l in range(m.arch.n_layers):
        x = torch.cat([r[f"blocks.{l}.hook_resid_post"][0, 1:] for r in rows])  # drop position 0
        h = torch.cat([r[f"blocks.{l}.mlp.out.hook_in"][0, 1:] for r in rows])
        torch.testing.assert_close(rep.resid[l], _kurtosis(x), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(rep.resid_rotated[l], _kurtosis(x.double() @ Q), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(rep.neurons[l], _kurtosis(h), atol=1e-4, rtol=1e-4)
    assert rep.n_tokens == 3 * 15
    df = rep.to_dataframe()
    assert list(df["layer"]) == list(range(m.arch.n_layers)) and "neurons_median" in df
    assert rep.top(3)["kurtosis"].is_monotonic_decreasing
    assert len(rep.plot().data) == 3


@pytest.mark.slow
def test_text_inputs_and_hooks_removed_even_on_error(tiny_models):
    m = tiny_models["gpt2"]  # learned positions: n_ctx = 64
    before = n_hooks(m.bridge)
    rep = C.privileged_basis_report(m, ["w1 w2 w3 w4 w5", "w7 w8 w9 w10"])
    assert rep.n_tokens == 5 + 4  # BOS prepended to each prompt, then position 0 dropped
    assert n_hooks(m.bridge) == before
    too_long = torch.randint(4, 100, (1, 80))  # past the position table: the forward pass raises
    with pytest.raises(Exception):
        C.privileged_basis_report(m, too_long)
    assert n_hooks(m.bridge) == before


def test_report_bad_inputs(tiny_models):
    m = tiny_models["llama"]
    with pytest.raises(ArgumentError, match="inputs"):
        C.privileged_basis_report(m, 42)
    with pytest.raises(ShapeError, match="inputs"):
        C.privileged_basis_report(m, torch.rand(2, 5))
    with pytest.raises(ArgumentError, match="fewer than 4 tokens"):
        C.privileged_basis_report(m, torch.tensor([[1, 5, 6]]))
    with pytest.raises(ArgumentError, match="drop_first"):
        C.privileged_basis_report(m, "w1 w2", drop_first="yes")


def test_write_subspace_overlap_equals_principal_angles(family_model):
    m = family_model
    ov = C.write_subspace_overlap(m)
    W_O = m.weights.W_O.double()
    if m.arch.norm == "layernorm":
        W_O = W_O - W_O.mean(-1, keepdim=True)
    bases = {}
    for l in range(m.arch.n_layers):
        for h in range(m.arch.n_heads):
            U, S, _ = torch.linalg.svd(W_O[l, h].T, full_matrices=False)
            bases[l, h] = U[:, S > 1e-6 * S[0]]
    for (l1, h1), U1 in bases.items():
        for (l2, h2), U2 in bases.items():
            cos = torch.linalg.svdvals(U1.T @ U2)  # cosines of the principal angles
            ref = float((cos**2).sum() / min(U1.shape[1], U2.shape[1]))
            assert float(ov.overlap[l1, h1, l2, h2]) == pytest.approx(ref, abs=1e-5)
    assert ov.baseline == pytest.approx(m.arch.d_head / m.arch.d_model)
    df = ov.top(3)
    assert len(df) == 3 and df["overlap"].is_monotonic_decreasing and (df["head_a"] != df["head_b"]).all()


def _with_eraser(m):
    """tiny llama where L1.H0's OV is −(projector onto L0.H0's write subspace): E = −I on it."""
    w = m.weights
    U = torch.linalg.svd(w.W_O[0, 0].T, full_matrices=False).U  # [d, d_head]
    W_V, W_O = w.W_V.clone(), w.W_O.clone()
    W_V[1, m.arch.kv_head(0)] = U
    W_O[1, 0] = -U.T
    ln1 = w.ln1_w.clone()
    ln1[1] = 1.0  # unit gain so the folded read is U itself
    return dataclasses.replace(m, weights=w.with_updates(W_V=W_V, W_O=W_O, ln1_w=ln1))


def test_erasure_finds_a_constructed_eraser(tiny_models):
    m = _with_eraser(tiny_models["llama"])
    t = C.erasure_candidates(m, include_embed=False)
    top = t.top(1).iloc[0]
    assert (top["src"], top["dst"]) == ("L0.H0", "L1.H0")
    assert top["mean_gain"] == pytest.approx(-1.0, abs=1e-4)
    assert top["max_eig"] == pytest.approx(-1.0, abs=1e-4) and bool(top["negative_definite"])
    assert int(t.table["negative_definite"].sum()) >= 1
    assert t.plot().data[0].type == "bar"


def test_erasure_values_equal_dense_computation(tiny_models):
    m = tiny_models["gpt2"]
    t = C.erasure_candidates(m, screen=1000)
    assert len(t.table) == 8 + 4 * 4 + 4  # embed → 8 heads, 4 L0 heads → 4 L1 heads, L0.mlp → 4 L1 heads
    row = t.table[(t.table.src == "L0.H1") & (t.table.dst == "L1.H2")].iloc[0]
    w = m.weights
    d = m.arch.d_model
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d
    Wo_src = w.W_O[0, 1].double() @ P
    U = torch.linalg.svd(Wo_src.T, full_matrices=False).U[:, : m.arch.d_head]
    OV = P @ torch.diag(w.ln1_w[1].double()) @ w.W_V[1, 2].double() @ w.W_O[1, 2].double() @ P
    E = U.T @ OV @ U
    ev = torch.linalg.eigvalsh((E + E.T) / 2)
    assert row["mean_gain"] == pytest.approx(float(torch.trace(E)) / U.shape[1], abs=1e-6)
    assert row["max_eig"] == pytest.approx(float(ev[-1]), abs=1e-6)
    assert row["min_eig"] == pytest.approx(float(ev[0]), abs=1e-6)
