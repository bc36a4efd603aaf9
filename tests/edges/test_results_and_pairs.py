"""A result that names its model refuses another model, and prompt pairs whose corrupt prompt is the clean one warn:
every edge would score 0 on them (Δa = 0) without it being a finding."""

from __future__ import annotations

import warnings

import pytest
import torch
from tiny_models import tiny_hf_model, tiny_model, tiny_tokenizer

import interp
from interp.engine import model_from_hf
from interp.errors import ModelMismatchError

CLEAN = ["w1 w2 w3 w4 w5", "w6 w7 w8 w9 w10"]
CORRUPT = ["w1 w9 w3 w4 w5", "w6 w11 w8 w9 w10"]
METRIC = interp.LogitDiff("w20", "w21")


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def scores(llama):
    return interp.edge_attribution(llama, CLEAN, CORRUPT, metric=METRIC, method="eap", progress=False)


def test_a_circuit_of_one_model_is_refused_on_another_naming_both(llama, scores):
    circuit = scores.circuit(n=10)
    assert circuit.model_name == "tiny-llama"
    other = model_from_hf(tiny_hf_model("llama", seed=1), tiny_tokenizer(), name="other-llama")  # the same graph
    with pytest.raises(ModelMismatchError, match=r"computed on model 'tiny-llama'.*runs model 'other-llama'"):
        interp.evaluate_circuit(other, CLEAN, CORRUPT, circuit, metric=METRIC)
    with pytest.raises(ModelMismatchError, match=r"'tiny-llama'.*'tiny-gpt2'"):
        interp.evaluate_circuit(tiny_model("gpt2"), CLEAN, CORRUPT, circuit, metric=METRIC)
    with pytest.raises(ModelMismatchError, match=r"scores=EdgeScores\('tiny-llama'.*'other-llama'"):
        interp.faithfulness_curve(other, CLEAN, CORRUPT, scores, metric=METRIC, ablations=("zero",), progress=False)
    # the labels themselves are accepted (the same graph under another name): the same evaluation as by hand
    by_labels = interp.evaluate_circuit(other, CLEAN, CORRUPT, list(circuit.edges), metric=METRIC)
    assert by_labels.n_edges == len(circuit.edges) > 0
    # and on its own model the circuit evaluates as its labels do
    own = interp.evaluate_circuit(llama, CLEAN, CORRUPT, circuit, metric=METRIC)
    assert torch.equal(
        own.per_prompt, interp.evaluate_circuit(llama, CLEAN, CORRUPT, list(circuit.edges), metric=METRIC).per_prompt
    )


def test_one_unchanged_pair_among_others_warns_naming_it(llama):
    corrupt = [CORRUPT[0], CLEAN[1]]
    with pytest.warns(interp.MetricGapWarning, match=r"1 of 2 prompt pairs .*\(prompts 1\)"):
        s = interp.edge_attribution(llama, CLEAN, corrupt, metric=METRIC, method="eap", progress=False)
    assert float(s.per_prompt[:, 1].abs().max()) < 1e-6 < float(s.per_prompt[:, 0].abs().max())


def test_pairs_that_all_differ_do_not_warn(llama):
    with warnings.catch_warnings():
        warnings.simplefilter("error", interp.MetricGapWarning)
        interp.edge_attribution(llama, CLEAN, CORRUPT, metric=METRIC, method="eap", progress=False)


@pytest.mark.real
@pytest.mark.slow
def test_identical_pairs_warn_when_their_metrics_average_to_zero():
    """Two prompts whose metrics nearly cancel in the mean (+5.29, −5.65): M(clean) − M(corrupt) is batching noise
    (~1e-5) but not small against |mean M| = 0.18, so the gap test alone passes it (and a CompletenessWarning blamed
    the method); the pairs themselves say what is wrong."""
    model = interp.load_model("smollm2-135m", progress=False)
    p = [
        "When Mary and John went to the store, John gave a drink to",
        "When Mary and John went to the park, John gave a drink to",
    ]
    metric = interp.LogitDiff([" Mary", " John"], [" John", " Mary"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = interp.edge_attribution(model, p, p, metric=metric, method="eap", progress=False)
    gap = [str(c.message) for c in caught if issubclass(c.category, interp.MetricGapWarning)]
    assert len(gap) == 1 and "corrupt is the clean input again (2 prompts)" in gap[0], gap
    assert not [c for c in caught if issubclass(c.category, interp.CompletenessWarning)]
    assert float(s.scores.abs().max()) < 1e-4
