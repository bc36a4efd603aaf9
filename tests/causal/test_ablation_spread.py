"""Mean and resample ablation over one distinct prompt are that prompt's run, in the causal analyses too.

``patch``, ``effects`` and ``path_patch`` with ``ablation="mean"`` or ``"resample"`` over a reference of one
distinct prompt used to return the numbers of ablating with that one prompt (the corrupt ablation when it is
the corrupt prompt) without a word. Now: a reference that is the single corrupt prompt is an ArgumentError
(it is the corrupt ablation, not a distribution); another single distinct prompt warns
(:class:`interp.AblationWarning`); several distinct reference prompts are silent. The check is the one
``evaluate_circuit`` / ``faithfulness_curve`` use (one implementation).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from interp.causal import LogitDiff, effects, patch, path_patch
from interp.errors import AblationWarning, ArgumentError
from tiny_models import tiny_model

M = LogitDiff("w12", "w13")
CLEAN, CORRUPT, OTHER = "w1 w2 w3 w4 w5", "w1 w9 w3 w4 w5", "w6 w7 w8 w10 w11"
SPREAD = ["w20 w21 w22 w23 w24", "w30 w31 w32 w33 w34", "w40 w41 w42 w43 w44"]

CALLS = {
    "patch": lambda m, **kw: patch(m, CLEAN, CORRUPT, metric=M, nodes="mlps", direction="noise", progress=False, **kw),
    "effects": lambda m, **kw: effects(m, CLEAN, CORRUPT, metric=M, nodes="mlps", progress=False, **kw),
    "path_patch": lambda m, **kw: path_patch(m, CLEAN, CORRUPT, metric=M, sender="L0.H0", progress=False, **kw),
}


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", dtype=torch.float64)


def _caught(fn):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in rec if issubclass(w.category, AblationWarning)]


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("ablation", ["mean", "resample"])
def test_the_single_corrupt_prompt_as_reference_is_an_error(llama, name, ablation):
    for ref in (CORRUPT, [CORRUPT, CORRUPT]):  # one distinct prompt, however many times it is given
        with pytest.raises(
            ArgumentError,
            match=rf"reference=.*single corrupt prompt.*ablation='{ablation}'.*"
            r"ablation='corrupt'",
        ):
            CALLS[name](llama, ablation=ablation, reference=ref)


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("ablation", ["mean", "resample"])
def test_one_other_reference_prompt_warns(llama, name, ablation):
    r, msgs = _caught(lambda: CALLS[name](llama, ablation=ablation, reference=[OTHER, OTHER]))
    assert len(msgs) == 1 and f"ablation={ablation!r}" in msgs[0] and "1 distinct prompt" in msgs[0], msgs
    # what the warning says: mean = resample = ablation with that one prompt
    other, _ = _caught(
        lambda: CALLS[name](llama, ablation="resample" if ablation == "mean" else "mean", reference=OTHER)
    )
    torch.testing.assert_close(r.per_prompt, other.per_prompt)


@pytest.mark.parametrize("name", CALLS)
def test_a_spread_reference_does_not_warn(llama, name):
    for ablation in ("mean", "resample"):
        _, msgs = _caught(lambda: CALLS[name](llama, ablation=ablation, reference=SPREAD))
        assert msgs == [], (name, ablation)
    _, msgs = _caught(lambda: CALLS[name](llama))  # the corrupt ablation itself
    assert msgs == []


def test_one_implementation():
    from interp.causal import _common
    from interp.edges import _evaluate

    assert _evaluate.check_reference_spread is _common.check_reference_spread
