"""Projection mode, trace(model, inputs, project={read: U}): the numbers of a full trace, no activations kept.

Each projected decomposition is compared term by term with the full trace's
``decompose(read, project_onto=U)`` (itself checked against Hugging Face tensors in
test_exactness.py) at every read and resid point, and the unembed read additionally against the
HF model's own logits.
"""

from __future__ import annotations

import pytest
import torch

from interp.errors import ArgumentError, LabelError, ShapeError
from interp.stream.internal import count_hooks
from interp.stream import trace
from tiny_models import FAMILIES, tiny_hf_model, tiny_model

PROMPTS = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9"]  # the second row is padded
REL = 1e-6


def _rel(a, b, mask):
    m = mask.bool()[None, ..., None] if a.ndim == 4 else mask.bool()[..., None]
    diff = ((a.double() - b.double()) * m).abs().max()
    return float(diff / (b.double() * m).abs().max().clamp_min(1e-30))


def _assert_same(full, proj, U, points, mask):
    for point in points:
        want = full.decompose(point, project_onto=U)
        got = proj.decompose(point)
        assert got.labels == want.labels and got.is_projected
        assert got.contributions.shape == want.contributions.shape
        assert _rel(got.contributions, want.contributions, mask) <= REL, point
        assert _rel(got.total, want.total, mask) <= REL, point
        assert got.relative_error <= 1e-4, (point, got.relative_error)


@pytest.fixture(scope="module", params=FAMILIES)
def model3(request):
    return tiny_model(request.param, n_layers=3)


def test_every_read_and_resid_point_equals_the_full_trace(model3):
    """All four families (post-norm BERT: directions carried back through every later norm),
    neurons on one layer, padding, one shared set of directions."""
    g = torch.Generator().manual_seed(0)
    U = torch.randn(3, model3.arch.d_model, generator=g)
    full = trace(model3, PROMPTS, neurons=[1])
    points = full.reads + full.resid_points
    proj = trace(model3, PROMPTS, neurons=[1], project={p: U for p in points})
    assert proj.activations == {}
    _assert_same(full, proj, U, points, full.attention_mask)


def test_per_prompt_directions_and_different_directions_per_read(model3):
    g = torch.Generator().manual_seed(1)
    d, b = model3.arch.d_model, len(PROMPTS)
    Ub = torch.randn(b, 2, d, generator=g)
    U1 = torch.randn(d, generator=g)
    full = trace(model3, PROMPTS)
    last, first = full.reads[-1], full.reads[0]
    proj = trace(model3, PROMPTS, project={last: Ub, first: U1})
    _assert_same(full, proj, Ub, [last], full.attention_mask)
    _assert_same(full, proj, U1, [first], full.attention_mask)


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox"])
def test_unembed_terms_sum_to_hf_logits(family):
    """Independent of interp's capture: Σ terms · W_U[:, t] + b_U[t] = the HF model's logit[t]."""
    model = tiny_model(family, n_layers=3)
    hf = tiny_hf_model(family, n_layers=3)
    toks = torch.tensor([[3, 17, 5, 42, 8, 9], [11, 12, 13, 14, 15, 16]])
    cols = [5, 42, 77]
    U = model.weights.W_U[:, cols].T  # [3, d_model]
    d = trace(model, toks, project={"unembed": U}).decompose("unembed")
    with torch.no_grad():
        logits = hf(toks).logits[..., cols]
    b_U = model.weights.b_U[cols] if model.weights.b_U is not None else 0
    got = d.contributions.sum(0) + b_U
    assert float((got - logits).abs().max() / logits.abs().max()) <= 1e-5


def test_holds_only_the_projections(model3):
    """Nothing of size d_model per position survives the pass; no hook survives it either."""
    before = count_hooks(model3.bridge)
    toks = torch.randint(0, model3.arch.d_vocab, (2, 9), generator=torch.Generator().manual_seed(2))
    U = torch.randn(2, model3.arch.d_model)
    tr = trace(model3, toks, neurons=True, project={"blocks.2.hook_resid_post": U})
    assert count_hooks(model3.bridge) == before
    assert tr.activations == {} and list(tr.projected) == ["blocks.2.hook_resid_post"]
    d = tr.decompose("blocks.2.hook_resid_post")
    assert d.contributions.shape[-1] == 2 and d.total.shape == (2, 9, 2)
    assert d.closure_error <= 1e-4 * float(d.total.abs().max())


def test_bad_project_arguments():
    m = tiny_model("llama")
    U = torch.randn(2, m.arch.d_model)
    with pytest.raises(ArgumentError, match="project"):
        trace(m, PROMPTS, project={})
    with pytest.raises(ArgumentError, match="project"):
        trace(m, PROMPTS, project=[("unembed", U)])
    with pytest.raises(ArgumentError, match="project_onto"):
        trace(m, PROMPTS, project={"unembed": U}, project_onto=U)
    with pytest.raises(LabelError, match="unembd"):
        trace(m, PROMPTS, project={"unembd": U})
    with pytest.raises(ShapeError, match="project"):
        trace(m, PROMPTS, project={"unembed": None})
    with pytest.raises(ShapeError, match="project_onto"):
        trace(m, PROMPTS, project={"unembed": torch.randn(2, m.arch.d_model + 1)})
    with pytest.raises(ShapeError):
        trace(m, PROMPTS, project={"unembed": torch.randn(5, 2, m.arch.d_model)})  # 5 rows, 2 prompts
    tr = trace(m, PROMPTS, project={"unembed": U})
    with pytest.raises(LabelError, match="L0.mlp.in"):
        tr.decompose("L0.mlp.in")  # a real read, not projected by this trace
    with pytest.raises(LabelError, match="L0.mlp.inn"):
        tr.decompose("L0.mlp.inn")  # not a read at all
    with pytest.raises(ArgumentError, match="project_onto"):
        tr.decompose("unembed", project_onto=U)


@pytest.mark.real
def test_smollm2_equals_the_full_trace(smollm2):
    toks = torch.randint(0, smollm2.arch.d_vocab, (2, 16), generator=torch.Generator().manual_seed(3))
    U = smollm2.weights.W_U[:, [100, 2000]].T
    points = ["unembed", "L10.attn.q[H3]", "L10.attn.k[H1]", "L5.mlp.in", "blocks.20.hook_resid_mid"]
    full = trace(smollm2, toks)
    proj = trace(smollm2, toks, project={p: U for p in points})
    _assert_same(full, proj, U, points, full.attention_mask)


@pytest.mark.real
def test_minilm_post_norm_equals_the_full_trace(minilm):
    U = torch.randn(2, minilm.arch.d_model, generator=torch.Generator().manual_seed(4))
    prompts = ["a cat sat on the mat", "dogs bark"]
    full = trace(minilm, prompts)
    points = ["final", "L3.attn.v[H2]", "L5.mlp.in", "blocks.4.hook_resid_post"]
    proj = trace(minilm, prompts, project={p: U for p in points})
    _assert_same(full, proj, U, points, full.attention_mask)
