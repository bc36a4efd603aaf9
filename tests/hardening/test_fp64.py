"""dtype=torch.float64 end to end on tiny models (issue 9): a user can re-check a surprising result
at high precision.

* every read and resid point of a padded batch closes to ≤1e-9 relative, both as reported and
  against a separately built float64 Hugging Face copy (the reference's Llama RMSNorm computes
  in float64, as interp's loader makes the model's own do);
* logit / direction attributions close to ≤1e-9 against that copy's logits / hidden states;
* every tensor of every result is float64 (nothing silently drops to float32).
"""

from __future__ import annotations

import pytest
import torch

from interp.attribution import attribute_direction, attribute_logits
from interp.stream import trace

from ._reference import hf_points, models, point_ref, rel

F64 = torch.float64
TOL = 1e-9
FAMILIES = ("gpt2", "llama", "neox", "bert")
DECODERS = ("gpt2", "llama", "neox")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


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
