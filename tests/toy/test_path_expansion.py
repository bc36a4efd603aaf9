"""Path expansion of attention-only models: exact closure, terms equal to hand-built products,
truncation, the induction reading on the shipped 2-layer toy, refusals and hook hygiene."""

from __future__ import annotations

import pytest
import torch
from test_toy_training import VARIANTS, perturbed_toy
from rounding import assert_same_up_to_rounding
from toy_reference import capture_patterns, ov, repeated, uniform

from interp.circuits._path_expansion import PathExpansion, _count_terms, path_expansion
from interp.engine.internal import Engine
from interp.errors import ArgumentError, LabelError, MemoryCapError, ShapeError, UnsupportedOperationError
from interp.models import load_model_unchecked as load_model
from interp.toy import build_toy

N = 15


def _pairs(top):
    """PathExpansion.top's DataFrame as the (label, value) pairs it used to return as a list."""
    return list(zip(top["label"], top["value"]))


@pytest.fixture(scope="module")
def toy2():
    return load_model("toy-attn-only-2l")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_closes_to_the_logits_with_and_without_norms(variant):
    config = VARIANTS[variant]
    model = perturbed_toy(config, seed=2)
    tokens = uniform(3, config.n_ctx, config.d_vocab, seed=4)
    pe = path_expansion(model, tokens, order=config.n_layers)
    logits, _ = capture_patterns(model, tokens)
    recon = pe.contributions.sum(0) @ model.weights.W_U + model.weights.b_U
    assert (recon - logits).abs().max() < 1e-4 and pe.closure_error < 1e-4
    assert torch.allclose(pe.values.sum(0) + pe.unembed_bias, pe.logit, atol=1e-4)
    # the expansion reads the engine's forward; the reference is the bridge's: the two agree to rounding
    assert_same_up_to_rounding(pe.logit, logits[:, -1].gather(-1, pe.answer[:, None])[:, 0])
    assert torch.equal(pe.answer, logits[:, -1].argmax(-1))  # default answer: the model's top token
    n_sources = 1 + (config.positional == "learned")
    assert _count_terms(config.n_layers, config.n_heads, config.n_layers, n_sources, config.norm == "layernorm") == len(
        pe.labels
    )  # the memory estimate counts right


def test_terms_equal_hand_built_products(toy2):
    """direct W_E W_U, one-head A W_E W_OV W_U and virtual A² A¹ W_E W_OV¹ W_OV² W_U terms."""
    tokens = repeated(4, N, toy2.arch.d_vocab, seed=3)
    _, A = capture_patterns(toy2, tokens)  # [layer, batch, head, q, k]
    pe = path_expansion(toy2, tokens, order=2)
    w = toy2.weights
    E = w.W_E.double()[tokens]  # [batch, pos, d_model]
    P = w.W_pos.double()[: tokens.shape[1]]
    U = w.W_U.double()

    def term(label):
        return pe.contributions[pe.index(label)].double() @ U

    assert torch.allclose(term("embed"), E @ U, atol=1e-4)
    assert torch.allclose(term("pos_embed"), (P @ U).expand_as(term("embed")), atol=1e-4)
    one = A[1, :, 2].double() @ E @ ov(toy2, 1, 2) @ U
    assert torch.allclose(term("embed→L1.H2"), one, atol=1e-4)
    virtual = A[1, :, 3].double() @ A[0, :, 1].double() @ E @ ov(toy2, 0, 1) @ ov(toy2, 1, 3) @ U
    assert torch.allclose(term("embed→L0.H1→L1.H3"), virtual, atol=1e-4)
    pos_virtual = A[1, :, 0].double() @ A[0, :, 2].double() @ P @ ov(toy2, 0, 2) @ ov(toy2, 1, 0) @ U
    assert torch.allclose(term("pos_embed→L0.H2→L1.H0"), pos_virtual, atol=1e-4)


def test_counts_labels_and_orders(toy2):
    pe = path_expansion(toy2, repeated(2, N, toy2.arch.d_vocab, seed=1), order=2)
    H = toy2.arch.n_heads
    # sources embed, pos_embed; L0 bias; each source through L0 heads, L1 heads, L0→L1 pairs; L0 bias through L1
    assert len(pe.labels) == len(set(pe.labels)) == 2 * (1 + 2 * H + H * H) + 1 + H + 1
    assert sorted(set(pe.orders)) == [0, 1, 2]
    assert all(o == label.count("→") for label, o in zip(pe.labels, pe.orders))


def test_truncation_leaves_out_exactly_the_higher_order_paths(toy2):
    tokens = repeated(3, N, toy2.arch.d_vocab, seed=5)
    full = path_expansion(toy2, tokens, order=2)
    trunc = path_expansion(toy2, tokens, order=1)
    dropped = sum(full.contributions[i] for i, o in enumerate(full.orders) if o == 2) @ toy2.weights.W_U
    assert trunc.closure_error == pytest.approx(float(dropped.abs().max()), rel=1e-3, abs=1e-4)
    assert trunc.closure_error > 1e-2 and set(trunc.orders) == {0, 1}
    for label in trunc.labels:
        assert torch.allclose(trunc.value(label), full.value(label), atol=1e-5)


def test_induction_reading_on_the_repeated_token(toy2):
    """For the repeated (next) token in the second half, the top paths are the induction heads'
    one-head terms embed→L1.Hk — their frozen patterns are the K-composed ones — and the
    virtual-attention-head paths through the previous-token head are an order of magnitude
    smaller (Elhage et al. 2021 make the same observation: induction is K-composition, which
    lives in the pattern, not V-composition)."""
    a = toy2.arch
    tokens = repeated(50, N, a.d_vocab, seed=7)
    q = 24  # a second-half position; the repeated token to predict is tokens[:, q + 1]
    _, A = capture_patterns(toy2, tokens)
    pe = path_expansion(toy2, tokens[:, : q + 1], order=2, answer=tokens[:, q + 1])
    ind = A[1, :, :, q, q - N + 1].mean(0)  # induction mass of each layer-1 head at this query
    top_label, top_value = _pairs(pe.top(1))[0]
    assert top_label.startswith("embed→L1.H") and ind[int(top_label[-1])] >= 0.9, (pe.top(4), ind)
    prev = torch.stack([A[0, :, h, torch.arange(1, q + 1), torch.arange(0, q)].mean() for h in range(a.n_heads)])
    p = int(prev.argmax())
    virtual = max(float(pe.value(f"embed→L0.H{p}→L1.H{h}").mean()) for h in range(a.n_heads))
    assert virtual < 0.2 * top_value, (virtual, top_value)
    order_sums = {o: float(pe.values[[i for i, k in enumerate(pe.orders) if k == o]].sum(0).mean()) for o in (0, 1, 2)}
    assert order_sums[1] > 5 * abs(order_sums[2]) and order_sums[1] > 5 * abs(order_sums[0]), order_sums


def test_logit_values_other_tokens_and_positions(toy2):
    tokens = repeated(2, N, toy2.arch.d_vocab, seed=8)
    pe = path_expansion(toy2, tokens, order=2)
    logits, _ = capture_patterns(toy2, tokens)
    v = pe.logit_values([5, 9], pos=3)
    assert torch.allclose(v.sum(0), logits[[0, 1], [3, 3], [5, 9]], atol=1e-4)


def test_result_helpers(toy2):
    import plotly.graph_objects as go

    pe = path_expansion(toy2, "cat dog sun cat", order=2, answer="dog")
    assert isinstance(pe, PathExpansion) and pe.answer_str == ("dog",)
    top = _pairs(pe.top(5))
    assert len(top) == 5 and [v for _, v in top] == sorted([v for _, v in top], reverse=True)
    assert top[0][1] == pytest.approx(float(pe.values.max()))
    df = pe.to_dataframe()
    assert len(df) == len(pe.labels) and set(df.columns) >= {"label", "order", "source", "heads", "value"}
    assert isinstance(pe.plot(k=8), go.Figure)
    assert _pairs(pe.top(3, absolute=True))[0][1] == pytest.approx(float(pe.values[pe.values.abs().argmax()]))
    with pytest.raises(LabelError, match="embed→L9.H9"):
        pe.value("embed→L9.H9")


@pytest.mark.slow
def test_refuses_models_with_mlps_and_bad_arguments(toy2, tiny_models):
    with pytest.raises(UnsupportedOperationError, match="attention-only"):
        path_expansion(tiny_models["gpt2"], torch.tensor([[1, 2, 3]]))
    tokens = torch.tensor([[0, 2, 3]])
    with pytest.raises(ArgumentError, match="order=-1"):
        path_expansion(toy2, tokens, order=-1)
    with pytest.raises(ArgumentError, match="answer="):
        path_expansion(toy2, tokens, answer=10_000)
    with pytest.raises(ArgumentError, match="pos="):
        path_expansion(toy2, tokens, pos=7)
    with pytest.raises(ShapeError, match="dtype"):
        path_expansion(toy2, tokens.float())
    with pytest.raises(ArgumentError, match="n_ctx"):
        path_expansion(toy2, torch.zeros(1, 40, dtype=torch.long))
    with pytest.raises(ArgumentError, match="different lengths"):
        path_expansion(toy2, ["cat dog", "cat"])
    with pytest.raises(ArgumentError, match="exactly one token"):
        path_expansion(toy2, tokens, answer="cat dog")
    with pytest.raises(MemoryCapError, match="order=12"):
        path_expansion(toy2, torch.zeros(40_000, 16, dtype=torch.long), order=12)


def test_an_exception_in_the_forward_leaves_the_model_as_it_was(toy2, monkeypatch):
    """The expansion runs the engine's forward and attaches nothing to the bridge: an exception inside that forward
    propagates, and the next call gives the same expansion."""
    before = path_expansion(toy2, torch.tensor([[0, 2, 3]]))

    def boom(*args, **kwargs):
        raise RuntimeError("forward failed")

    monkeypatch.setattr(Engine, "layer", boom)
    with pytest.raises(RuntimeError, match="forward failed"):
        path_expansion(toy2, torch.tensor([[0, 2, 3]]))
    monkeypatch.undo()
    assert all(not hp.fwd_hooks and not hp.bwd_hooks for hp in toy2.bridge.hook_dict.values())
    again = path_expansion(toy2, torch.tensor([[0, 2, 3]]))
    assert torch.equal(again.contributions, before.contributions)


@pytest.mark.parametrize("variant", ["layernorm-gqa", "rmsnorm-rotary"])
def test_float64_closure_is_at_float64_precision(variant):
    """In float64 the expansion is exact to rounding: no norm rounds through float32."""
    config = VARIANTS[variant]
    model = build_toy(config, dtype=torch.float64)
    pe = path_expansion(model, uniform(2, config.n_ctx, config.d_vocab, seed=6), order=config.n_layers)
    assert pe.contributions.dtype == torch.float64 and pe.closure_error < 1e-10
