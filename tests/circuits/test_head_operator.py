"""The head as A ⊗ W_O W_V: Kronecker identity, and reproducing the model's own head output."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interp.circuits as C
from circuits_reference import capture
from interp.errors import ArgumentError, MemoryCapError, ShapeError


@settings(max_examples=25, deadline=None)
@given(pos=st.integers(1, 5), d=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_kronecker_identity(pos, d, seed):
    """(A ⊗ W) vec(X) = vec(W X Aᵀ) with column-major vec (torch.kron, explicit vec)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(pos, pos, generator=g, dtype=torch.float64)
    W = torch.randn(d, d, generator=g, dtype=torch.float64)
    X = torch.randn(d, pos, generator=g, dtype=torch.float64)  # columns = positions
    vec = lambda M: M.T.reshape(-1)  # noqa: E731  column-major
    torch.testing.assert_close(torch.kron(A, W) @ vec(X), vec(W @ X @ A.T))


def _random_pattern(pos, seed=0, batch=None):
    g = torch.Generator().manual_seed(seed)
    shape = (pos, pos) if batch is None else (batch, pos, pos)
    logits = torch.randn(*shape, generator=g)
    mask = torch.ones(pos, pos, dtype=torch.bool).tril()
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)


def test_matrix_is_the_kronecker_form_of_apply(family_model):
    m = family_model
    A = _random_pattern(5)
    op = C.head_operator(m, 1, 2, A)
    X = torch.randn(5, m.arch.d_model)
    got = op.matrix() @ X.reshape(-1)  # row-major flatten of [pos, d] = column-major vec of Xᵀ
    g = m.arch.kv_head(2)
    expected = A @ X @ m.weights.W_V[1, g] @ m.weights.W_O[1, 2]  # A X W_V W_O, no bias
    torch.testing.assert_close(got.reshape(5, -1), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(op.apply(X, value_bias=False), expected, atol=1e-5, rtol=1e-5)
    # batched pattern
    Ab = _random_pattern(5, batch=3)
    Xb = torch.randn(3, 5, m.arch.d_model)
    opb = C.head_operator(m, 1, 2, Ab)
    torch.testing.assert_close(
        opb.apply(Xb, value_bias=False), Ab @ Xb @ m.weights.W_V[1, g] @ m.weights.W_O[1, 2], atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        (opb.matrix() @ Xb.reshape(3, -1, 1)).reshape(3, 5, -1), opb.apply(Xb, value_bias=False), atol=1e-5, rtol=1e-5
    )


def test_apply_reproduces_the_heads_actual_output(family_model):
    """On a prompt: head_operator(pattern from the model).apply(normalised input) == z_h W_O^h."""
    m = family_model
    toks = torch.tensor([[1, 17, 42, 5, 63, 8, 99, 23, 4, 71]])
    layer = 1
    src = f"blocks.{layer}.attn.hook_in" if m.arch.norm_placement == "post" else f"blocks.{layer}.ln1.hook_out"
    cap = capture(m, toks, [src, f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_z"])
    x = cap[src][0]
    for h in range(m.arch.n_heads):
        pattern = cap[f"blocks.{layer}.attn.hook_pattern"][0, h]
        actual = cap[f"blocks.{layer}.attn.hook_z"][0, :, h] @ m.weights.W_O[layer, h]  # z_h W_O^h
        got = C.head_operator(m, layer, h, pattern).apply(x)
        rel = (got - actual).norm() / actual.norm()
        assert rel < 1e-5, (h, float(rel))


def test_pattern_and_input_errors(tiny_models):
    m = tiny_models["llama"]
    with pytest.raises(ShapeError, match="pattern"):
        C.head_operator(m, 0, 0, torch.ones(3, 4) / 4)
    with pytest.raises(ShapeError, match="pattern"):
        C.head_operator(m, 0, 0, torch.ones(2, 2, 3, 3) / 3)
    with pytest.raises(ShapeError, match="pattern"):
        C.head_operator(m, 0, 0, [[1.0]])
    with pytest.raises(ArgumentError, match="pattern is not row-stochastic"):
        C.head_operator(m, 0, 0, torch.ones(3, 3))
    with pytest.raises(ArgumentError, match="pattern is not row-stochastic"):
        C.head_operator(m, 0, 0, torch.tensor([[1.5, -0.5], [0.5, 0.5]]))
    with pytest.raises(ArgumentError, match="head"):
        C.head_operator(m, 0, 9, torch.eye(3))
    with pytest.raises(ArgumentError, match="layer"):
        C.head_operator(m, 5, 0, torch.eye(3))
    op = C.head_operator(m, 0, 0, torch.eye(3))
    with pytest.raises(ShapeError, match="x has shape"):
        op.apply(torch.randn(4, m.arch.d_model))
    with pytest.raises(MemoryCapError, match="max_bytes=100") as e:
        op.matrix(max_bytes=100)
    assert ".apply" in str(e.value)
