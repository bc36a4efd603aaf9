"""QK attribution over a cross-layer transcoder (docs/math.md §29): the stream entering layer l holds the MLP outputs
of the layers below it, so a CLT feature of layer k enters through its writes W_dec[k → j] for k ≤ j < l, and layer
j's error node is the MLP's write minus the CLT's joint reconstruction. Checked against computations that do not use
the code:

* closure: the terms sum to the model's own score (the engine's q and k, live QK-norm) on every tiny pre-norm decoder
  family with 3 layers (the head of layer 2 reads layer-0 features through two writes), ≤ 1e-4 relative in float32
  (printed), in float64 ≤ 1e-13 relative and ≤ 1e-8 of |score| itself;
* a CLT whose decoders to later layers are zero gives the terms of the per-layer transcoders of its encoders (built
  both ways here; float64, every term and label); with its later decoders the layer-0 features' terms change
  (circuit-tracer's CLT fixture: tests/features/test_clt.py).
"""

from __future__ import annotations

import pytest
import torch

from interp.features import CrossLayerTranscoder, qk_attribution
from tiny_models import FAMILIES, MORE_FAMILIES, tiny_model
from tiny_transcoders import random_clt

PROMPT = "w1 w2 w3 w4 w5 w6"
PRE_NORM = tuple(f for f in FAMILIES + MORE_FAMILIES if f != "bert")


def _key(m, q: int) -> int:
    """A key the head of layer 2 attends to from ``q``, two before it where the window allows."""
    w = m.arch.window(2)
    return max(q - 2, 0) if not w or w > 2 else q


@pytest.mark.parametrize("family", PRE_NORM)
@pytest.mark.parametrize("skip", [False, True])
def test_clt_terms_sum_to_the_score(family, skip):
    m = tiny_model(family, n_layers=3)
    c = random_clt(m, 16, seed=1, skip=skip)
    n = m.to_tokens(PROMPT).shape[1]
    r = qk_attribution(m, PROMPT, c, 2, 1, query_pos=n - 1, key_pos=_key(m, n - 1))
    total = float(r.matrix.sum())
    print(
        f"{family} skip={skip} L2.H1: {len(r.q_labels)}×{len(r.k_labels)} terms, Σ {total:.6g}, score {r.score:.6g}, "
        f"relative {r.relative_error:.1e}"
    )
    assert r.relative_error <= 1e-4 and abs(total - r.score) <= 1e-4 * float(r.matrix.abs().sum())
    assert any(lab.startswith("L0.F") for lab in r.q_labels) and any(lab.startswith("L1.F") for lab in r.q_labels)


@pytest.mark.parametrize("family", ["llama", "qwen3", "phi3", "gpt2"])
def test_clt_exact_in_float64(family):
    """In float64 the terms sum to the score to rounding: relative to Σ|terms| (the float32 test's measure) ≤ 1e-13,
    and ≤ 1e-8 of |score| itself — the random CLT's writes (and its skip term) through the tiny models' small frozen
    σ make the terms up to ~1e5 and cancelling (measured: 3e-17 and ≤ 5e-10)."""
    m = tiny_model(family, n_layers=3, dtype=torch.float64)
    c = random_clt(m, 16, seed=2, skip=True, dtype=torch.float64)
    r = qk_attribution(m, PROMPT, c, 2, 3, query_pos=-1, key_pos=2)
    print(
        f"{family} float64: closure {r.closure_error:.1e} of score {r.score:.4g} (relative {r.relative_error:.1e}, "
        f"largest term {float(r.matrix.abs().max()):.2e})"
    )
    assert r.relative_error <= 1e-13 and r.closure_error <= 1e-8 * abs(r.score)


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox", "olmo2"])
def test_clt_without_later_decoders_is_the_per_layer_transcoders(family):
    m = tiny_model(family, n_layers=3, dtype=torch.float64)
    c = random_clt(m, 12, seed=3, activation="jumprelu", skip=True, dtype=torch.float64)
    own = CrossLayerTranscoder(
        c.W_enc,
        c.b_enc,
        tuple(torch.cat([w[:, :1], torch.zeros_like(w[:, 1:])], 1) for w in c.W_dec),
        c.b_dec,
        c.W_skip,
        c.activation,
        c.threshold,
        layers=c.layers,
    )
    kw = dict(query_pos=-1, key_pos=3)
    a = qk_attribution(m, PROMPT, own, 2, 2, **kw)
    b = qk_attribution(m, PROMPT, [own.encoder(l) for l in range(3)], 2, 2, **kw)
    assert a.q_labels == b.q_labels and a.k_labels == b.k_labels
    assert any(lab.startswith("L0.F") for lab in a.q_labels)
    for name in ("q_terms", "k_terms"):
        x, y = getattr(a, name), getattr(b, name)
        assert torch.allclose(x, y, rtol=0, atol=1e-12 * float(y.abs().max())), name
    assert a.score == b.score
    # with its decoders to later layers the same features enter through more writes: other terms, the same score
    full = qk_attribution(m, PROMPT, c, 2, 2, **kw)
    rows = [i for i, lab in enumerate(b.q_labels) if lab.startswith("L0.F")]
    assert [full.q_labels[i] for i in rows] == [b.q_labels[i] for i in rows]
    assert float((full.q_terms[rows] - b.q_terms[rows]).abs().max()) > 1e-3
    assert full.score == pytest.approx(b.score, rel=1e-12) and full.closure_error <= 1e-10 * abs(full.score)
