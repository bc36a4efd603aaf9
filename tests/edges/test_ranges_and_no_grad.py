"""Thresholds and sizes outside their documented ranges are typed errors (not every edge kept silently), and every
edge method that differentiates works after ``torch.set_grad_enabled(False)`` (it turns gradients on for itself)."""

from __future__ import annotations

import math

import pytest
import torch

from interp.causal import LogitDiff
from interp.edges import edge_attribution, faithfulness_curve
from interp.errors import ArgumentError
from tiny_models import tiny_model

from .conftest import CLEAN, CORRUPT

M = LogitDiff("w12", "w13")


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def scores(llama):
    return edge_attribution(llama, CLEAN, CORRUPT, metric=M, method="eap", progress=False)


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")
@pytest.mark.parametrize("threshold", [-1, 0, -0.5, 0.0])
@pytest.mark.parametrize("absolute", [True, False])
def test_circuit_threshold_must_be_positive(scores, threshold, absolute):
    """threshold=-1 kept every edge (|score| ≥ −1 always holds): refused, naming the argument and the range."""
    assert bool((scores.scores.abs() >= threshold).all())  # what the old selection kept: every edge
    with pytest.raises(ArgumentError, match=rf"threshold={float(threshold)!r} must be > 0"):
        scores.circuit(threshold=threshold, absolute=absolute, prune=False)
    t = float(scores.scores.abs().median())  # in range: the edges with |score| ≥ t, counted independently
    assert len(scores.circuit(threshold=t, prune=False)) == int((scores.scores.abs() >= t).sum())


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")
def test_curve_smallest_target_and_ablation(llama, scores):
    curve = faithfulness_curve(
        llama, CLEAN, CORRUPT, scores, metric=M, ablations=("corrupt", "zero"), sizes=(0.5, 1.0), progress=False
    )
    for bad in (math.nan, math.inf, True, "0.8"):
        with pytest.raises(ArgumentError, match="target=.* must be a finite number"):
            curve.smallest(bad)
    with pytest.raises(ArgumentError, match="ablation='mean' must be one of \\['corrupt', 'zero'\\]"):
        curve.smallest(0.8, ablation="mean")
    assert float(curve.faithfulness[1, -1]) == pytest.approx(1.0)  # every edge: the clean run
    assert curve.smallest(0.99, ablation="zero") <= 1.0


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")
@pytest.mark.parametrize("bad", [(0.5, 0.2), (0.0, 1.0), (0.5, 1.5), "0.5", ()])
def test_curve_sizes_in_range(llama, scores, bad):
    with pytest.raises(ArgumentError, match="sizes=.* must be increasing fractions in \\(0, 1\\]"):
        faithfulness_curve(llama, CLEAN, CORRUPT, scores, metric=M, ablations=("zero",), sizes=bad, progress=False)


@pytest.fixture
def no_grad():
    """The first line of many users' notebooks: gradients off globally (restored after the test)."""
    was = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        yield
    finally:
        torch.set_grad_enabled(was)


@pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")
@pytest.mark.parametrize("method,ig_at", [("eap", "inputs"), ("eap-ig", "inputs"), ("eap-ig", "activations")])
def test_edge_attribution_under_no_grad(llama, no_grad, method, ig_at):
    """EAP and EAP-IG give the same scores with gradients globally off as with them on, and leave them off."""
    assert not torch.is_grad_enabled()
    got = edge_attribution(llama, CLEAN, CORRUPT, metric=M, method=method, ig_at=ig_at, ig_steps=3, progress=False)
    assert not torch.is_grad_enabled()
    with torch.enable_grad():
        want = edge_attribution(llama, CLEAN, CORRUPT, metric=M, method=method, ig_at=ig_at, ig_steps=3, progress=False)
    assert float(want.scores.abs().max()) > 0
    torch.testing.assert_close(got.scores, want.scores, rtol=0, atol=0)
