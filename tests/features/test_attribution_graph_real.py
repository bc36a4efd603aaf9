"""The attribution graph on smollm2-135m (30 layers, GQA, RMSNorm) with random TopK transcoders: closure ≤ 1e-4
relative in float32 (printed), the output equals the bridge's logit, and the last layer's direct path into the
logit equals that MLP's direct logit attribution; on smollm2 and gemma3-270m (sandwich norms, sliding and global
layers), every edge carried all the way down equals the same edge carried all the way up (two independent products
of the frozen layers) and the chosen meeting layer's."""

from __future__ import annotations

import pytest

import interp
from interp.features import attribution_graph
from tiny_transcoders import random_transcoders

pytestmark = [pytest.mark.real, pytest.mark.slow]

PROMPT = "The capital of France is"


def test_smollm2_graph_closes(smollm2):
    m = smollm2
    L = m.arch.n_layers
    g = attribution_graph(
        m, PROMPT, random_transcoders(m, 256, seed=0, activation="topk", k=3, b_dec=False), target=" Paris"
    )
    rows = [i for i, k in enumerate(g.node_kind) if k in ("feature", "logit")]
    resid = (g.value[rows] - (g.adjacency[rows].sum(1) + g.bias[rows])).abs()
    rel = float((resid / (g.adjacency[rows].abs().sum(1) + g.bias[rows].abs())).max())
    print(
        f"smollm2 closure: max |error| {float(resid.max()):.2e}, relative {rel:.2e}, {len(rows) - 1} features, "
        f"replacement {g.replacement_score():.3f}, completeness {g.completeness_score():.3f}"
    )
    assert rel <= 1e-4 and g.relative_error <= 1e-4
    la = interp.attribute_logits(m, PROMPT, answer=" Paris", unit="component")
    assert float(g.value[-1]) == pytest.approx(float(la.logit[0]), rel=1e-5, abs=1e-4)
    last = len(g.tokens) - 1
    at = [
        i
        for i, (k, l, p) in enumerate(zip(g.node_kind, g.node_layer, g.node_pos))
        if k in ("feature", "error") and l == L - 1 and p == last
    ]
    assert float(g.adjacency[-1, at].sum()) == pytest.approx(float(la[f"L{L - 1}.mlp"][0]), rel=1e-4, abs=1e-4)
    p = g.prune()
    assert sum(k == "token" for k in p.node_kind) == len(g.tokens) and p.n_nodes <= g.n_nodes


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_edges_down_equal_edges_up_real(name, request, monkeypatch):
    from interp.features import _jacobian

    m = request.getfixturevalue(name)
    tcs = random_transcoders(m, 256, seed=0, activation="topk", k=3)
    chosen = attribution_graph(m, PROMPT, tcs, logit_effects=0)
    graphs = {}
    for meet in (0, m.arch.n_layers):
        monkeypatch.setattr(_jacobian.FrozenJacobian, "_meeting_layer", lambda self, *a, meet=meet: meet)
        graphs[meet] = attribution_graph(m, PROMPT, tcs, logit_effects=0)
    down, up = graphs[0].adjacency, graphs[m.arch.n_layers].adjacency
    scale = float(down.abs().max())
    d_up, d_chosen = float((up - down).abs().max()) / scale, float((chosen.adjacency - down).abs().max()) / scale
    print(
        f"{m.name}: {chosen.n_nodes} nodes; all down vs all up {d_up:.1e}, vs the chosen meeting layer "
        f"{d_chosen:.1e} of max |A| {scale:.3g}; closure {chosen.relative_error:.1e}"
    )
    assert d_up <= 1e-5 and d_chosen <= 1e-5
    assert (
        chosen.relative_error <= 1e-4
        and graphs[0].relative_error <= 1e-4
        and graphs[m.arch.n_layers].relative_error <= 1e-4
    )
