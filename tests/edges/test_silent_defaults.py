"""Calls that used to return plausible wrong numbers now raise a typed error or warn (interp.InterpWarning).

* ``evaluate_circuit`` with the EdgeScores itself (every edge: faithfulness 1 by construction) or with no
  circuit (the empty circuit: 0) is an ArgumentError saying to pass ``scores.circuit(n=…)``.
* ``faithfulness_curve``'s ablations start with "corrupt" (MIB's counterfactual ablation); with one prompt
  pair, mean and resample over the corrupt prompts are the corrupt ablation: an AblationWarning (and an
  ArgumentError when ``reference`` is that prompt).
* ``edge_attribution`` defaults to EAP-IG and warns (CompletenessWarning) when the completeness error
  exceeds COMPLETENESS_TOLERANCE of |M(corrupt) − M(clean)|.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import pytest
import torch

import interp
from interp.causal import LogitDiff
from interp.edges import COMPLETENESS_TOLERANCE, edge_attribution, evaluate_circuit, faithfulness_curve
from interp.errors import AblationWarning, ArgumentError, CompletenessWarning
from tiny_models import tiny_model

from .conftest import CLEAN, CORRUPT

M = LogitDiff("w12", "w13")
REFERENCE = ["w20 w21 w22 w23 w24", "w30 w31 w32 w33 w34", "w40 w41 w42 w43 w44"]
SIZES = (0.1, 0.5, 1.0)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def scores(llama):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompletenessWarning)
        return edge_attribution(llama, CLEAN, CORRUPT, metric=M, progress=False)


def _caught(fn, category):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in rec if issubclass(w.category, category)]


# --- evaluate_circuit: a circuit argument is required, and EdgeScores is not one ------------------------------


def test_evaluate_circuit_refuses_the_scores_themselves(llama, scores):
    with pytest.raises(ArgumentError, match=r"circuit=EdgeScores.*not a circuit.*scores\.circuit\(n=…\)"):
        evaluate_circuit(llama, CLEAN, CORRUPT, scores, metric=M)
    with pytest.raises(ArgumentError, match=r"scores\.circuit\(n="):
        evaluate_circuit(llama, CLEAN, CORRUPT, circuit=scores, metric=M)


def test_evaluate_circuit_requires_a_circuit(llama):
    for call in (
        lambda: evaluate_circuit(llama, CLEAN, CORRUPT, metric=M),
        lambda: evaluate_circuit(llama, CLEAN, CORRUPT, None, metric=M),
    ):
        with pytest.raises(ArgumentError, match=r"circuit is required.*scores\.circuit\(n="):
            call()


def test_the_empty_circuit_is_still_a_circuit_when_asked_for(llama, scores):
    none = evaluate_circuit(llama, CLEAN, CORRUPT, [], metric=M)
    assert none.n_edges == 0 and none.faithfulness == pytest.approx(0.0, abs=1e-6)
    some = evaluate_circuit(llama, CLEAN, CORRUPT, scores.circuit(n=10), metric=M)
    assert 0 < some.n_edges <= 10


# --- faithfulness_curve: corrupt ablation first; one prompt pair says what mean/resample reduce to ------------


def test_faithfulness_curve_default_ablations_start_with_corrupt(llama, scores):
    default = inspect.signature(faithfulness_curve).parameters["ablations"].default
    assert tuple(default) == ("corrupt", "zero", "mean", "resample")
    curve = faithfulness_curve(llama, CLEAN, CORRUPT, scores, metric=M, sizes=SIZES, progress=False)
    assert curve.ablations == ["corrupt", "zero", "mean", "resample"]
    # the corrupt ablation's empty circuit is the corrupt run; the curve's default reading is that ablation
    ev = evaluate_circuit(llama, CLEAN, CORRUPT, [], metric=M)
    assert float(curve.empty[0]) == pytest.approx(ev.empty, abs=1e-5)
    assert curve.smallest(0.0) == curve.smallest(0.0, ablation="corrupt")


def test_default_ablations_need_the_corrupt_prompts(llama, scores):
    with pytest.raises(ArgumentError, match=r"ablations=.*'corrupt'.*corrupt=None"):
        faithfulness_curve(llama, CLEAN, None, scores, metric=M, sizes=SIZES, progress=False)


def test_one_prompt_pair_warns_that_mean_and_resample_are_the_corrupt_ablation(llama, scores):
    curve, msgs = _caught(
        lambda: faithfulness_curve(llama, CLEAN[0], CORRUPT[0], scores, metric=M, sizes=SIZES, progress=False),
        AblationWarning,
    )
    assert len(msgs) == 1 and "'mean' and 'resample'" in msgs[0] and "reference=" in msgs[0]
    # what the warning says: their curves are the corrupt ablation's
    for a in ("mean", "resample"):
        i = curve.ablations.index(a)
        torch.testing.assert_close(curve.faithfulness[i], curve.faithfulness[0])
    _, msgs = _caught(
        lambda: faithfulness_curve(
            llama, CLEAN[0], CORRUPT[0], scores, metric=M, sizes=SIZES, ablations=("corrupt", "zero"), progress=False
        ),
        AblationWarning,
    )
    assert msgs == []


def test_a_reference_that_is_the_corrupt_prompt_is_an_error(llama, scores):
    with pytest.raises(ArgumentError, match=r"reference=.*single corrupt prompt.*corrupt ablation"):
        faithfulness_curve(
            llama, CLEAN[0], CORRUPT[0], scores, metric=M, sizes=SIZES, reference=CORRUPT[0], progress=False
        )


def test_a_spread_reference_or_several_pairs_do_not_warn(llama, scores):
    for kw in (dict(clean=CLEAN[0], corrupt=CORRUPT[0], reference=REFERENCE), dict(clean=CLEAN, corrupt=CORRUPT)):
        _, msgs = _caught(
            lambda: faithfulness_curve(llama, scores=scores, metric=M, sizes=SIZES, progress=False, **kw),
            AblationWarning,
        )
        assert msgs == [], kw


def test_evaluate_circuit_mean_over_one_pair_warns(llama):
    _, msgs = _caught(
        lambda: evaluate_circuit(llama, CLEAN[0], CORRUPT[0], [], metric=M, ablation="mean"), AblationWarning
    )
    assert len(msgs) == 1 and "ablation='mean'" in msgs[0] and "ablation='corrupt'" in msgs[0]


# --- edge_attribution: EAP-IG by default, a warning when completeness is far off -----------------------------


def test_edge_attribution_defaults_to_eap_ig(llama, scores):
    assert inspect.signature(edge_attribution).parameters["method"].default == "eap-ig"
    assert scores.method == "eap-ig" and scores.ig_steps == 5


def test_eap_far_from_complete_warns(llama):
    s, msgs = _caught(
        lambda: edge_attribution(llama, CLEAN, CORRUPT, metric=M, method="eap", progress=False), CompletenessWarning
    )
    assert s.completeness_error > COMPLETENESS_TOLERANCE * abs(s.target)  # the case the warning is for
    assert len(msgs) == 1 and "method='eap'" in msgs[0] and "method='eap-ig'" in msgs[0]


def test_complete_enough_scores_do_not_warn(llama):
    s, msgs = _caught(
        lambda: edge_attribution(llama, CLEAN, CORRUPT, metric=M, ig_steps=32, progress=False), CompletenessWarning
    )
    assert s.completeness_error <= COMPLETENESS_TOLERANCE * abs(s.target) and msgs == []


def test_the_tolerance_is_a_fraction_of_the_target(scores):
    from interp.edges._attribution import check_completeness

    assert COMPLETENESS_TOLERANCE == 0.1 and interp.CompletenessWarning is CompletenessWarning
    t = scores.target
    for frac, warns in ((0.09, False), (0.11, True)):
        r = dataclasses.replace(scores, completeness=t * (1 + frac))
        _, msgs = _caught(lambda: check_completeness(r), CompletenessWarning)
        assert bool(msgs) is warns, (frac, msgs)
        if warns:
            assert "ig_steps" in msgs[0]
