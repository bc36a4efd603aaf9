"""Exact edge patching and circuit evaluation against the independent reference and the HF model (docs/math.md §25)."""

from __future__ import annotations

import pytest
import torch

import interp
from interp.edges import circuit_graph, edge_patch, evaluate_circuit
from interp.models import model_from_hf_unchecked as model_from_hf
from interp.stream.internal import as_batch
from tiny_models import tiny_hf_model, tiny_model, tiny_tokenizer

from .conftest import CLEAN, CORRUPT, Reference, direction
from .test_attribution import _batches, _hf_metric, _metric

FAMILIES = ("gpt2", "llama", "neox", "bert")
# Llama takes its softmax in float32 even in a float64 model (as HF does): ~1e-8 relative is its floor
TOL = {"llama": dict(rtol=1e-6, atol=1e-7)}
REFERENCE = ["w20 w21 w22 w23 w24", "w30 w31 w32 w33 w34", "w40 w41 w42 w43 w44"]


def _some_edges(g, seed=0, n=12):
    """A spread of edges: into every kind of reader (q, GQA k/v, MLP, the metric), same-layer head → MLP."""
    rng = torch.Generator().manual_seed(seed)
    picks = [e for e in g.edges if e.endswith(("unembed", "final"))][:2]
    picks += [e for e in g.edges if ".mlp.in" in e and e.startswith("L0.H")][:1]
    picks += [e for e in g.edges if ".attn.k[" in e and e.startswith("L0.")][:1]
    rest = torch.randperm(g.n_edges, generator=rng)[:n].tolist()
    return list(dict.fromkeys(picks + [g.edges[i] for i in rest]))


def _abl(ref, model, ablation):
    """The reference's ablated writes: the corrupt run's, None (zero) or the positionwise mean over REFERENCE."""
    if ablation == "corrupt":
        return ref.run(*_tm(model, CORRUPT))[1]
    if ablation == "zero":
        return None
    runs = [ref.run(*_tm(model, [p]))[1] for p in REFERENCE]
    return {w: torch.stack([r[w] for r in runs]).mean(0).expand(2, -1, -1) for w in runs[0]}


def _tm(model, prompts):
    b = as_batch(model, prompts)
    return b.tokens, b.attention_mask


def _ref_M(ref, model, coef, abl):
    with torch.no_grad():
        M, _ = ref.run(*_tm(model, CLEAN), abl=abl, coef=coef)
    return M


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("ablation", ["corrupt", "zero", "mean"])
def test_edge_patch_equals_the_reference(pairs64, fam, ablation):
    """value(w → r) = M with only r's input built from ã_w (its norms, or its replayed Add & Norms, recomputed)."""
    model, ref = pairs64[fam]
    g = circuit_graph(model)
    edges = _some_edges(g)
    kw = {"reference": REFERENCE} if ablation == "mean" else {}
    r = edge_patch(
        model,
        CLEAN,
        CORRUPT if ablation != "zero" else None,
        edges,
        metric=_metric(model, fam),
        ablation=ablation,
        progress=False,
        **kw,
    )
    abl = _abl(ref, model, ablation)
    for i, e in enumerate(edges):
        w, rd = e.split("→")
        coef = torch.zeros(len(ref.writers), len(ref.readers), dtype=model.dtype)
        coef[ref.wi[w], ref.ri[rd]] = 1.0
        torch.testing.assert_close(
            r.per_prompt[i], _ref_M(ref, model, coef, abl), **TOL.get(fam, dict(rtol=1e-9, atol=1e-9))
        )
    assert r.method == "edge patching" and r.labels == edges


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("ablation", ["corrupt", "zero", "mean"])
def test_circuit_evaluation_equals_the_reference(pairs64, fam, ablation):
    model, ref = pairs64[fam]
    g = circuit_graph(model)
    keep = torch.rand(g.n_edges, generator=torch.Generator().manual_seed(1)) < 0.4
    circuit = [e for e, k in zip(g.edges, keep.tolist()) if k]
    kw = {"reference": REFERENCE} if ablation == "mean" else {}
    ev = evaluate_circuit(
        model,
        CLEAN,
        CORRUPT if ablation != "zero" else None,
        circuit,
        metric=_metric(model, fam),
        ablation=ablation,
        **kw,
    )
    coef = ref.edge_matrix().to(model.dtype)
    for e in circuit:
        w, rd = e.split("→")
        coef[ref.wi[w], ref.ri[rd]] = 0.0
    abl = _abl(ref, model, ablation)
    tol = TOL.get(fam, dict(rtol=1e-9, atol=1e-9))
    torch.testing.assert_close(ev.per_prompt[0].to(model.dtype), _ref_M(ref, model, coef, abl), **tol)
    torch.testing.assert_close(
        ev.per_prompt[2].to(model.dtype), _ref_M(ref, model, ref.edge_matrix().to(model.dtype), abl), **tol
    )
    assert ev.n_edges == len(circuit) and ev.n_total == g.n_edges


@pytest.mark.parametrize("fam", FAMILIES)
def test_all_edges_is_the_clean_run_and_none_the_corrupt_run(fam):
    """In float32, against the HF model's own outputs: every edge in → M(clean) to 1e-5; none → M(corrupt)."""
    model = tiny_model(fam)
    ref = Reference(tiny_hf_model(fam), fam, model.tokenizer, direction(model.arch.d_model))
    g = circuit_graph(model)
    ev = evaluate_circuit(model, CLEAN, CORRUPT, list(g.edges), metric=_metric(model, fam))
    bc, bk = _batches(model)
    hc, hk = _hf_metric(ref, fam, bc), _hf_metric(ref, fam, bk)
    assert (ev.per_prompt[0] - hc.double()).abs().max() <= 1e-5
    assert (ev.per_prompt[1] - hc.double()).abs().max() <= 1e-5
    assert (ev.per_prompt[2] - hk.double()).abs().max() <= 1e-5
    assert ev.faithfulness == pytest.approx(1.0, abs=1e-4)
    none = evaluate_circuit(model, CLEAN, CORRUPT, [], metric=_metric(model, fam))
    assert (none.per_prompt[0] - hk.double()).abs().max() <= 1e-5 and none.faithfulness == pytest.approx(0.0, abs=1e-4)


@pytest.mark.parametrize("fam", ["llama", "bert"])
def test_edge_patch_is_evaluation_without_that_edge(pairs64, fam):
    """Two implementations, one definition: patching w → r = evaluating every edge but w → r."""
    model, _ = pairs64[fam]
    g = circuit_graph(model)
    edges = _some_edges(g, seed=3, n=5)
    r = edge_patch(model, CLEAN, CORRUPT, edges, metric=_metric(model, fam), progress=False)
    for i, e in enumerate(edges):
        ev = evaluate_circuit(model, CLEAN, CORRUPT, [x for x in g.edges if x != e], metric=_metric(model, fam))
        torch.testing.assert_close(
            r.per_prompt[i].double(), ev.per_prompt[0], **TOL.get(fam, dict(rtol=1e-9, atol=1e-9))
        )


def test_resample_ablation_draws_reference_prompts(pairs64):
    """Resample: each clean prompt's ablated writes are one seeded reference prompt's (the none-in run is that run)."""
    model, ref = pairs64["gpt2"]
    ev = evaluate_circuit(
        model, CLEAN, None, [], metric=_metric(model, "gpt2"), ablation="resample", reference=REFERENCE, seed=5
    )
    with torch.no_grad():
        ms = [ref.run(*_tm(model, [p]))[0] for p in REFERENCE]
    # the empty circuit's metric per clean prompt is some reference prompt's own metric
    for v in ev.per_prompt[0].tolist():
        assert min(abs(v - float(m)) for m in ms) < 1e-9
    again = evaluate_circuit(
        model, CLEAN, None, [], metric=_metric(model, "gpt2"), ablation="resample", reference=REFERENCE, seed=5
    )
    assert torch.equal(again.per_prompt, ev.per_prompt)


def test_scores_estimate_the_exact_effects(pairs64):
    """EAP is the first-order term of edge patching: on a tiny model its estimate tracks the exact effect."""
    model, _ = pairs64["llama"]
    s = interp.edges.edge_attribution(
        model, CLEAN, CORRUPT, metric=_metric(model, "llama"), method="eap", progress=False
    )
    top = list(s.top(10)["edge"])
    r = edge_patch(model, CLEAN, CORRUPT, top, metric=_metric(model, "llama"), progress=False)
    est = torch.tensor([s[e] for e in top], dtype=torch.float64)
    # a score is positive when the edge supports the metric: it estimates M(clean) − M(patched) = −effect
    corr = torch.corrcoef(torch.stack([est, -r.effect.double()]))[0, 1]
    assert corr > 0.9, (est, r.effect)
    both = s.with_exact(r)
    assert both.exact is not None and torch.isnan(both.exact).sum() == len(s.edges) - len(top)
    assert both.to_dataframe().set_index("edge").loc[top[0], "exact"] == pytest.approx(-float(r.effect[0]))


@pytest.mark.parametrize("fam", ["llama", "bert"])
def test_padded_batch_evaluates_and_patches_each_prompt_alone(pairs64, fam):
    model, _ = pairs64[fam]
    clean, corrupt = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9"], ["w1 w2 w30 w4 w5 w6", "w7 w31 w9"]
    g = circuit_graph(model)
    circuit = [e for i, e in enumerate(g.edges) if i % 3 == 0]
    edges = _some_edges(g, seed=2, n=4)
    ev = evaluate_circuit(model, clean, corrupt, circuit, metric=_metric(model, fam))
    pt = edge_patch(model, clean, corrupt, edges, metric=_metric(model, fam), progress=False)
    for i in range(2):
        one = evaluate_circuit(model, clean[i], corrupt[i], circuit, metric=_metric(model, fam))
        torch.testing.assert_close(
            ev.per_prompt[:, i], one.per_prompt[:, 0], **TOL.get(fam, dict(rtol=1e-9, atol=1e-9))
        )
        alone = edge_patch(model, clean[i], corrupt[i], edges, metric=_metric(model, fam), progress=False)
        torch.testing.assert_close(
            pt.per_prompt[:, i], alone.per_prompt[:, 0], **TOL.get(fam, dict(rtol=1e-9, atol=1e-9))
        )


@pytest.mark.parametrize("fam", ["gpt2", "llama", "neox"])
@pytest.mark.parametrize("share", [0.05, 0.4, 0.9])
def test_deep_circuit_evaluation_equals_the_reference(fam, share):
    """Seven layers (evaluation builds its readers' inputs a block of layers at a time, then adds the writers
    since the block's start): sparse, medium and dense circuits against the reference, float64."""
    model = model_from_hf(
        tiny_hf_model(fam, n_layers=7, dtype=torch.float64), tiny_tokenizer(), name=f"tiny-{fam}", dtype=torch.float64
    )
    hf = tiny_hf_model(fam, n_layers=7, dtype=torch.float64)
    ref = Reference(hf, fam, model.tokenizer, direction(hf.config.hidden_size, torch.float64))
    g = circuit_graph(model)
    keep = torch.rand(g.n_edges, generator=torch.Generator().manual_seed(2)) < share
    circuit = [e for e, k in zip(g.edges, keep.tolist()) if k]
    ev = evaluate_circuit(model, CLEAN, CORRUPT, circuit, metric=_metric(model, fam))
    coef = ref.edge_matrix().to(model.dtype)
    for e in circuit:
        w, rd = e.split("→")
        coef[ref.wi[w], ref.ri[rd]] = 0.0
    abl = _abl(ref, model, "corrupt")
    torch.testing.assert_close(
        ev.per_prompt[0].to(model.dtype), _ref_M(ref, model, coef, abl), **TOL.get(fam, dict(rtol=1e-9, atol=1e-9))
    )
