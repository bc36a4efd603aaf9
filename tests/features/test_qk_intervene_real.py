"""QK attribution and interventions on the real catalog models with random TopK transcoders (smollm2-135m: 30
layers, GQA, RMSNorm; gemma3-270m: sandwich norms, QK-norm, sliding / global layers): the QK terms sum to the
head's score, which equals transformer-lens's ``hook_attn_scores`` (≤ 1e-4 relative, printed); the replacement
model with no intervention reproduces the real logits, and with frozen attention and the other features frozen,
ablating features moves the logit by Σ −edge of the attribution graph."""

from __future__ import annotations

import time

import pytest

from interp.features import Intervention, attribution_graph, intervene, qk_attribution
from tiny_transcoders import random_transcoders

pytestmark = [pytest.mark.real, pytest.mark.slow]

PROMPT = "The capital of France is"


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_qk_attribution_real(name, request):
    m = request.getfixturevalue(name)
    tcs = random_transcoders(m, 256, seed=0, activation="topk", k=3)
    ids = m.to_tokens(PROMPT)
    n, L = ids.shape[1], m.arch.n_layers
    _, cache = m.bridge.run_with_cache(ids, names_filter=lambda s: s.endswith("hook_attn_scores"))
    for layer, head in ((L // 2, 1), (L - 1, 0)):
        t0 = time.perf_counter()
        r = qk_attribution(m, PROMPT, tcs, layer, head, query_pos=n - 1, key_pos=1)
        dt = time.perf_counter() - t0
        tl = float(cache[f"blocks.{layer}.attn.hook_attn_scores"][0, head, n - 1, 1])
        print(
            f"{m.name} L{layer}.H{head} {n - 1}→1: {len(r.q_labels)}×{len(r.k_labels)} terms, score {r.score:.5g} "
            f"(transformer-lens {tl:.5g}), closure {r.closure_error:.1e} (relative {r.relative_error:.1e}), {dt:.1f} s"
        )
        assert r.relative_error <= 1e-4
        assert r.capped_score == pytest.approx(tl, rel=1e-4, abs=1e-4)


def test_intervene_real(smollm2):
    m = smollm2
    tcs = random_transcoders(m, 256, seed=0, activation="topk", k=3)
    g = attribution_graph(m, PROMPT, tcs, target=" Paris")
    feats = sorted(
        (i for i, k in enumerate(g.node_kind) if k == "feature"), key=lambda i: -abs(float(g.adjacency[-1, i]))
    )[:3]
    t0 = time.perf_counter()
    r = intervene(
        m, PROMPT, tcs, [Intervention.ablate(g.node_labels[i]) for i in feats], target=" Paris", freeze_features=True
    )
    dt = time.perf_counter() - t0
    want = -sum(float(g.adjacency[-1, i]) for i in feats)
    live = intervene(
        m, PROMPT, tcs, [Intervention.ablate(g.node_labels[i]) for i in feats], target=" Paris", frozen_attention=False
    )
    print(
        f"smollm2: replacement vs real logits {r.closure_error:.1e} (relative {r.relative_error:.1e}); ablating "
        f"{[g.node_labels[i] for i in feats]}: Δ {r.metric_change:.5g}, Σ −edge {want:.5g} ({dt:.1f} s); live regime, "
        f"real MLPs rerun: Δ {live.metric_change:.5g}"
    )
    assert r.relative_error <= 1e-4 and live.relative_error <= 1e-4
    assert r.metric_change == pytest.approx(want, rel=1e-3, abs=1e-4)
