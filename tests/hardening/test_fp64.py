"""dtype=torch.float64 end to end on tiny models (issue 9): a user can re-check a surprising result
at high precision.

* every read and resid point of a padded batch closes to ≤1e-9 relative, both as reported and
  against a separately built float64 Hugging Face copy (the reference's Llama RMSNorm computes
  in float64, as interp's loader makes the model's own do);
* logit / direction attributions close to ≤1e-9 against that copy's logits / hidden states;
* every tensor of every result is float64 (nothing silently drops to float32);
* the circuits functions run in float64 and agree with dense float64 references to ~1e-12
  (composition / copying / virtual-weight norms default to float64 for a float64 model).
"""

from __future__ import annotations

import pytest
import torch

from interp.attribution import attribute_direction, attribute_logits
from interp.stream import trace

from ._reference import dense_weights, hf_points, models, point_ref, rel

F64 = torch.float64
TOL = 1e-9
FAMILIES = ("gpt2", "llama", "neox", "bert")
DECODERS = ("gpt2", "llama", "neox")


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 100, (3, 8), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    return ids, mask


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n_layers", [1, 3])
def test_trace_closes_to_1e9_at_every_point(family, n_layers):
    model, hf = models(family, 0, n_layers, F64)
    assert model.dtype == F64
    ids, mask = _batch()
    for neurons in (False, True):
        tr = trace(model, ids, attention_mask=mask, neurons=neurons)
        pts, _ = hf_points(family, hf, ids, mask)
        points = tr.reads + tr.resid_points
        for point in points:
            d = tr.decompose(point)
            assert d.contributions.dtype == F64 and d.total.dtype == F64
            assert d.relative_error <= TOL, (point, d.relative_error)
            got = rel(d.contributions.sum(0), point_ref(pts, point), mask)
            assert got <= TOL, (point, got)
        # projected decompositions too
        U = torch.randn(2, model.arch.d_model, dtype=F64, generator=torch.Generator().manual_seed(2))
        for point in points[:: max(1, len(points) // 6)]:
            p = tr.decompose(point, project_onto=U)
            assert p.contributions.dtype == F64
            ref = torch.einsum("bpd,kd->bpk", point_ref(pts, point), U)
            assert rel(p.contributions.sum(0), ref, mask) <= TOL, point


@pytest.mark.parametrize("family", DECODERS)
@pytest.mark.parametrize("unit", ["head", "component", "neuron"])
def test_logit_attribution_closes_to_1e9(family, unit):
    model, hf = models(family, 1, 2, F64)
    prompts = ["w1 w2 w3 w4 w5 w6", "w7 w8", "w9 w10 w11"]
    a = attribute_logits(model, prompts, answer=["w3", "w5", "w9"], wrong="w4", pos=[-1, 1, -2], unit=unit)
    assert a.values.dtype == F64 and a.total.dtype == F64
    toks = torch.zeros(3, 7, dtype=torch.long)
    mask = torch.zeros_like(toks)
    for i, p in enumerate(prompts):
        row = [1] + [4 + int(w[1:]) for w in p.split()]
        toks[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    _, logits = hf_points(family, hf, toks, mask)
    at = [6, 1, 2]
    ans, wrong = [4 + 3, 4 + 5, 4 + 9], 4 + 4
    for i in range(3):
        row = logits[i, at[i]]
        ref = row[ans[i]] - row[wrong]
        scale = float(row.abs().max())
        assert abs(float(a.values[:, i].sum()) - float(ref)) <= TOL * scale, i
    assert a.relative_error <= TOL


@pytest.mark.parametrize("family", FAMILIES)
def test_direction_attribution_closes_to_1e9(family):
    model, hf = models(family, 2, 2, F64)
    ids, mask = _batch()
    ids = ids[:, :5]
    u = torch.randn(model.arch.d_model, dtype=F64, generator=torch.Generator().manual_seed(3))
    res = attribute_direction(model, ids, u, pos="mean")
    assert res.values.dtype == F64
    pts, _ = hf_points(family, hf, ids, torch.ones_like(ids))
    h = pts["final" if family == "bert" else "unembed"]
    ref = (h @ u).mean(1)
    scale = float((h.abs() @ u.abs()).max())
    assert float((res.values.sum(0) - ref).abs().max()) <= TOL * scale
    assert res.relative_error <= TOL


# ---- circuits in float64 ---------------------------------------------------------------------

from interp.circuits import (  # noqa: E402
    composition_scores,
    copying_scores,
    head_operator,
    ov_circuit,
    qk_circuit,
    rotate_residual,
    virtual_weight_norms,
    virtual_weights,
)
from bridge_capture import capture  # noqa: E402
from interp.stream._inputs import as_batch  # noqa: E402

CTOL = 1e-11


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("fold", [True, False])
def test_circuits_run_in_float64(family, fold):
    model, _ = models(family, 0, 3, F64)
    W_Q, W_K, W_V, W_O, W_E, W_U = dense_weights(model, fold)
    a = model.arch
    for l in range(a.n_layers):
        for h in range(a.n_heads):
            ov, qk = ov_circuit(model, l, h, fold_norms=fold), qk_circuit(model, l, h, fold_norms=fold)
            assert ov.AB.dtype == F64 and ov.eigenvalues.dtype == torch.complex128 and ov.S.dtype == F64
            assert _rel(ov.AB, W_V[l, h] @ W_O[l, h]) <= CTOL
            assert _rel(qk.AB, W_Q[l, h] @ W_K[l, h].T) <= CTOL
    fro = torch.linalg.matrix_norm
    for kind in "QKV":
        cs = composition_scores(model, kind, fold_norms=fold).scores
        assert cs.dtype == F64
        for l1, h1, l2, h2 in [(0, 0, 1, 3), (0, 2, 2, 1), (1, 3, 2, 0)]:
            WA = W_V[l1, h1] @ W_O[l1, h1]
            WB = {"Q": W_Q[l2, h2] @ W_K[l2, h2].T, "K": W_K[l2, h2] @ W_Q[l2, h2].T, "V": W_V[l2, h2] @ W_O[l2, h2]}[
                kind
            ]
            ref = fro(WA @ WB) / (fro(WA) * fro(WB))
            assert abs(float(cs[l1, h1, l2, h2]) - float(ref)) <= 1e-10, (kind, l1, h1, l2, h2)
    vw = virtual_weights(model, "L0.H1", "L2.mlp.in", fold_norms=fold)
    assert vw.AB.dtype == F64
    norms = virtual_weight_norms(model, fold_norms=fold)
    assert norms.values.dtype == F64
    if a.has_unembed:
        cp = copying_scores(model, fold_norms=fold).scores
        assert cp.dtype == F64
        for l, h in [(0, 0), (2, 3)]:
            lam = torch.linalg.eigvals(W_E @ W_V[l, h] @ W_O[l, h] @ W_U)
            assert abs(float(cp[l, h]) - float(lam.real.sum() / lam.abs().sum())) <= 1e-9


@pytest.mark.parametrize("family", FAMILIES)
def test_head_operator_in_float64_is_the_models_head(family):
    model, _ = models(family, 1, 2, F64)
    ids, _ = _batch()
    inp = "blocks.1.ln1.hook_out" if model.arch.norm_placement == "pre" else "blocks.1.hook_resid_pre"
    names = [inp, "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_z"]
    acts, _ = capture(model, as_batch(model, ids[:1]), names)
    for h in range(model.arch.n_heads):
        op = head_operator(model, 1, h, acts[names[1]][0, h])
        real = acts[names[2]][0, :, h] @ model.weights.W_O[1, h]
        assert op.apply(acts[inp][0]).dtype == F64
        assert _rel(op.apply(acts[inp][0]), real) <= 1e-12


@pytest.mark.parametrize("family", DECODERS)
def test_rotated_model_in_float64(family):
    """rotate_residual in float64: same logits to ~1e-15, and the rotated model's own trace closes."""
    model, _ = models(family, 2, 2, F64)
    d = model.arch.d_model
    g = torch.Generator().manual_seed(7)
    if model.arch.norm == "rmsnorm":
        R, _ = torch.linalg.qr(torch.randn(d, d, dtype=F64, generator=g))
    else:  # R·1 = 1: a rotation of the complement of the all-ones direction
        B = torch.randn(d, d, dtype=F64, generator=g)
        B[:, 0] = 1.0
        U, _ = torch.linalg.qr(B)
        Qs, _ = torch.linalg.qr(torch.randn(d - 1, d - 1, dtype=F64, generator=g))
        R = U @ torch.block_diag(torch.ones(1, 1, dtype=F64), Qs) @ U.T
    rot = rotate_residual(model, R)
    assert rot.dtype == F64
    ids, mask = _batch()
    with torch.no_grad():
        l0 = model.bridge(ids, attention_mask=mask)
        l1 = rot.bridge(ids, attention_mask=mask)
    real = mask.bool()
    assert _rel(l1[real], l0[real]) <= 1e-12
    tr = trace(rot, ids, attention_mask=mask)
    assert max(tr.decompose(p).relative_error for p in tr.reads + tr.resid_points) <= TOL


@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_path_expansion_in_float64(norm, positional):
    """Attention-only toys in float64: the paths sum to the model's own logits to ~1e-12, and the
    trace of the toy closes to 1e-9."""
    from interp.circuits._path_expansion import path_expansion
    from interp.toy import ToyConfig, build_toy

    cfg = ToyConfig(
        n_layers=3,
        n_heads=2,
        n_kv_heads=1,
        d_model=16,
        d_head=4,
        d_vocab=20,
        n_ctx=16,
        norm=norm,
        positional=positional,
        seed=4,
    )
    model = build_toy(cfg, dtype=F64)
    assert model.dtype == F64
    ids = torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(5))
    pe = path_expansion(model, ids, order=3, answer=[3, 4])
    assert pe.contributions.dtype == F64 and pe.values.dtype == F64
    with torch.no_grad():
        logits = model.bridge(ids)
    recon = pe.contributions.sum(0) @ model.weights.W_U + model.weights.b_U
    assert _rel(recon, logits) <= 1e-12
    tr = trace(model, ids)
    assert max(tr.decompose(p).relative_error for p in tr.reads + tr.resid_points) <= TOL
