"""attribute_logits refuses an answer that is its own wrong token (logit[a] − logit[a] = 0 on every run), as
LogitDiff does, by string, by id or both (compared by id)."""

from __future__ import annotations

import pytest
from tiny_models import tiny_model

import interp
import interp.stream.internal

PROMPT = "w1 w2 w3"


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.mark.parametrize(
    "answer, wrong",
    [("w9", "w9"), (13, 13), ("w9", 13), (["w9", "w1"], ["w9", "w2"]), ("w9 w1", "w9 w1")],
)
def test_the_same_answer_and_wrong_token_are_refused_like_logit_diff(model, answer, wrong):
    multi = isinstance(answer, str) and " " in answer  # a continuation of two tokens
    prompts = [PROMPT, PROMPT] if isinstance(answer, list) else PROMPT
    with pytest.raises(interp.InterpError, match=r"attribute_logits\(answer=.*the same token.*wrong=None"):
        interp.attribute_logits(model, prompts, answer=answer, wrong=wrong, multi_token=multi)
    with pytest.raises(interp.InterpError, match=r"are the same"):  # the metric refuses the same pair
        interp.LogitDiff(answer, wrong, multi_token=multi).bind(model, interp.stream.internal.as_batch(model, prompts))


def test_different_tokens_and_wrong_sets_still_run(model):
    one = interp.attribute_logits(model, PROMPT, answer="w9", wrong="w10")
    alone = interp.attribute_logits(model, PROMPT, answer="w9")
    other = interp.attribute_logits(model, PROMPT, answer="w10")
    assert abs(float(one.logit[0]) - (float(alone.logit[0]) - float(other.logit[0]))) < 1e-5
    # a wrong set that contains the answer is a mean over several wrongs, not zero: allowed
    s = interp.attribute_logits(model, PROMPT, answer="w9", wrong={"w9", "w10"})
    assert abs(float(s.logit[0]) - float(one.logit[0]) / 2) < 1e-5
