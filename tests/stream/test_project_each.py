"""``project_each``: each position's own direction, the diagonal of a projected decomposition without the rest."""

from __future__ import annotations

import pytest
import torch

from interp.errors import ShapeError
from interp.stream import trace
from interp.stream.internal import project_each
from tiny_models import tiny_model


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "gemma2", "gptj"])
def test_equals_the_diagonal_of_the_projected_decomposition(family):
    m = tiny_model(family)
    tr = trace(m, ["w1 w2 w3 w4", "w5 w6"], neurons=[1])
    b, p = tr.tokens.shape
    u = torch.randn(b, p, m.arch.d_model, generator=torch.Generator().manual_seed(0))
    for point in (tr.reads[-1], "L1.mlp.in" if "L1.mlp.in" in tr.reads else tr.reads[0], "blocks.1.hook_resid_pre"):
        d = tr.decompose(point, project_onto=u)  # [n, b, p, k = p]: every position on every direction
        labels, got, total = project_each(tr, point, u)
        assert labels == d.labels
        torch.testing.assert_close(got, d.contributions.diagonal(dim1=2, dim2=3), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(total, d.total.diagonal(dim1=1, dim2=2), rtol=1e-6, atol=1e-6)
        real = tr.attention_mask.bool()
        assert float((got.sum(0) - total)[real].abs().max()) <= 1e-5 * float(total[real].abs().max())


def test_one_direction_per_position():
    m = tiny_model("llama")
    tr = trace(m, "w1 w2 w3")
    with pytest.raises(ShapeError, match="one direction per position"):
        project_each(tr, "unembed", torch.ones(1, 2, m.arch.d_model))
