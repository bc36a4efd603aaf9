"""top_and_bottom: the k largest and k smallest entries per row through block minima/maxima equal torch.topk's."""

from __future__ import annotations

import pytest
import torch

from interp.dictionaries._logit_effects import top_and_bottom, top_and_bottom_logits


@pytest.mark.parametrize("V", [49152, 1000, 130, 65, 7])
def test_top_and_bottom_equal_topk(V):
    g = torch.Generator().manual_seed(V)
    z = torch.randn(23, V, generator=g)
    z[3, :] = 0.5  # a row of ties: any k of them, all with the tied value
    k = min(5, V)
    ids, vals = top_and_bottom(z, k)
    up, down = z.topk(k), z.topk(k, largest=False)
    assert torch.equal(vals[:, :k], up.values) and torch.equal(vals[:, k:], down.values)
    assert torch.equal(z.gather(1, ids), vals)  # each id points at its value
    assert all(len(set(r[:k])) == k and len(set(r[k:])) == k for r in ids.tolist())


def test_top_and_bottom_logits_is_the_product():
    g = torch.Generator().manual_seed(0)
    U, W = torch.randn(300, 16, generator=g), torch.randn(16, 500, generator=g)
    ids, vals = top_and_bottom_logits(U, W, 4, chunk=64)
    z = U @ W
    assert torch.equal(ids[:, :4], z.topk(4).indices) and torch.equal(ids[:, 4:], z.topk(4, largest=False).indices)
    assert torch.allclose(vals, z.gather(1, ids))
