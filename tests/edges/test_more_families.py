"""Edge attribution and circuit evaluation on the families added as capabilities (Qwen 2, Mistral with a
sliding window, Gemma, Phi-3, GPT-J, Qwen 3 with QK-norm, Gemma 3 with sandwich norms and QK-norm, OLMo 2
whose sublayers read the raw stream under a QK-norm over the whole projection), each against a computation
that does not use the edge engine:

* every edge in → the Hugging Face model's own metric on the clean prompts, no edge → on the corrupt ones;
* EAP's edges into the metric with norm scales frozen (``scale="frozen"``) are the differences of the
  writers' direct logit attributions (``attribute_logits``, read off the bridge's hooks): writer w's term
  in the corrupt run rescaled to the clean final scale (term ∝ 1/σ) minus its term in the clean run;
* EAP-IG's completeness error falls as the path is refined.
"""

from __future__ import annotations

import pytest
import torch

import interp
from interp.causal import LogitDiff
from interp.edges import circuit_graph, edge_attribution, evaluate_circuit
from interp.models import Batch
from bridge_capture import capture
from tiny_models import EDGE_FAMILIES, LINEAR_LOGITS, tiny_hf_model, tiny_model

CLEAN = torch.tensor([[1, 5, 6, 7, 8, 9, 10], [1, 15, 16, 17, 18, 19, 20]])
CORRUPT = torch.tensor([[1, 5, 26, 7, 8, 29, 10], [1, 15, 36, 17, 18, 39, 20]])
A, W = 11, 12


def _hf_metric(family: str, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = tiny_hf_model(family)(ids).logits[:, -1]
    return (logits[:, A] - logits[:, W]).double()


@pytest.mark.parametrize("family", EDGE_FAMILIES)
def test_all_edges_is_the_clean_run_and_none_the_corrupt_run(family):
    model = tiny_model(family)
    hc, hk = _hf_metric(family, CLEAN), _hf_metric(family, CORRUPT)
    full = evaluate_circuit(model, CLEAN, CORRUPT, list(circuit_graph(model).edges), metric=LogitDiff(A, W))
    assert (full.per_prompt[0] - hc).abs().max() <= 1e-5 and (full.per_prompt[2] - hk).abs().max() <= 1e-5
    none = evaluate_circuit(model, CLEAN, CORRUPT, [], metric=LogitDiff(A, W))
    assert (none.per_prompt[0] - hk).abs().max() <= 1e-5
    assert full.faithfulness == pytest.approx(1.0, abs=1e-4) and none.faithfulness == pytest.approx(0.0, abs=1e-4)


def _final_scale(m, ids):
    st, _ = capture(m, Batch(ids, torch.ones_like(ids)), ["ln_final.hook_scale"])
    return st["ln_final.hook_scale"][:, -1, 0]


@pytest.mark.parametrize("family", [f for f in EDGE_FAMILIES if f in LINEAR_LOGITS])  # DLA: linear logits
def test_eap_edges_into_the_metric_are_the_ledger_differences(family):
    m = tiny_model(family)
    s = edge_attribution(m, CLEAN, CORRUPT, metric=LogitDiff(A, W), method="eap", scale="frozen", progress=False)
    ac = interp.attribute_logits(m, CLEAN, answer=A, wrong=W, unit="head")
    ak = interp.attribute_logits(m, CORRUPT, answer=A, wrong=W, unit="head")
    ratio = (_final_scale(m, CORRUPT) / _final_scale(m, CLEAN)).double()
    df = s.to_dataframe()
    into = df[df["reader"] == "unembed"]
    assert len(into) > 0
    checked = 0
    scale = float(ac.values.abs().max())
    for writer, score in zip(into["writer"], into["score"]):
        if writer not in ac.labels:
            continue
        j = ac.labels.index(writer)
        # positive when the edge supports the metric: the clean term minus the corrupt one carried to the clean scale
        want = float((ac.values[j].double() - ak.values[j].double() * ratio).mean())
        assert score == pytest.approx(want, abs=2e-5 * scale), writer
        checked += 1
    assert checked >= m.arch.n_layers * (m.arch.n_heads + 1)


@pytest.mark.parametrize("family", EDGE_FAMILIES)
def test_eap_ig_completeness_error_shrinks(family):
    m = tiny_model(family)
    errs = [
        edge_attribution(
            m, CLEAN, CORRUPT, metric=LogitDiff(A, W), method="eap-ig", ig_steps=k, progress=False
        ).completeness_error
        for k in (1, 32)
    ]
    assert errs[1] < errs[0], errs


@pytest.mark.parametrize("family", EDGE_FAMILIES)
def test_edge_patch_is_evaluation_without_that_edge(family):
    """Two implementations (the engine's patched forward, the edge forward's evaluation), one definition:
    patching w → r equals evaluating every edge but w → r — through sandwich norms and QK-norm too."""
    from interp.edges import edge_patch

    m = tiny_model(family, dtype=torch.float64)
    edges_all = list(circuit_graph(m).edges)
    g = torch.Generator().manual_seed(3)
    picks = [edges_all[int(i)] for i in torch.randperm(len(edges_all), generator=g)[:4]]
    r = edge_patch(m, CLEAN, CORRUPT, picks, metric=LogitDiff(A, W), progress=False)
    for i, e in enumerate(picks):
        ev = evaluate_circuit(m, CLEAN, CORRUPT, [x for x in edges_all if x != e], metric=LogitDiff(A, W))
        torch.testing.assert_close(r.per_prompt[i].double(), ev.per_prompt[0], rtol=1e-9, atol=1e-9)
