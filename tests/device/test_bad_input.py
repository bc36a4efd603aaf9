"""Typed refusals found by the CUDA sweep that hold on the CPU too."""

from __future__ import annotations

import pytest

import interp
from interp.errors import InterpError, UnsupportedOperationError
from tiny_models import tiny_model


@pytest.mark.slow
def test_privileged_basis_report_refuses_mixture_of_experts_typed():
    """Mixtral has no one MLP per layer: a typed refusal naming the experts, not a KeyError for a missing hook."""
    m = tiny_model("mixtral")
    with pytest.raises(UnsupportedOperationError, match="mixture-of-experts") as e:
        interp.circuits.privileged_basis_report(m, ["w1 w2 w3 w4 w5 w6"])
    assert isinstance(e.value, InterpError)
