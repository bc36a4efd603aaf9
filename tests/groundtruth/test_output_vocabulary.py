"""Target ids are checked against the model's output width, not its input vocabulary.

tracr's hist reads {BOS, a, b, c} (plus padding: d_vocab 5) and outputs a count 0…5 (W_U has 6 columns).
"""

import pytest
import torch

import interp
from interp.errors import ArgumentError


@pytest.fixture(scope="module")
def hist(tracr_programs):
    return tracr_programs("hist")


def test_hist_vocabularies_differ(hist):
    m = hist.model
    assert m.weights.W_U.shape[1] == 6 > m.arch.d_vocab == 5


def test_attribute_logits_accepts_every_output_id(hist):
    m = hist.model
    tokens = hist.encode([("a", "b", "a", "a", "c")])
    with torch.no_grad():
        logits = m.bridge(tokens)[0, -1]  # the model's own forward: [6]
    res = interp.attribute_logits(m, tokens, answer=5, wrong=0, pos=-1)
    assert abs(float(res.logit[0]) - float(logits[5] - logits[0])) < 1e-5
    assert float(res.values[:, 0].sum()) == pytest.approx(float(res.logit[0]), abs=1e-4)
    with pytest.raises(ArgumentError, match=r"answer=6 .*\[0, 5\]"):
        interp.attribute_logits(m, tokens, answer=6, wrong=0, pos=-1)


def test_metrics_accept_every_output_id(hist):
    m = hist.model
    clean = hist.encode([("a", "b", "a"), ("c", "c", "c")])
    corrupt = hist.encode([("a", "b", "c"), ("a", "b", "c")])
    with torch.no_grad():
        want = m.bridge(clean)[:, -1]  # [2, 6]
    res = interp.patch(m, clean, corrupt, metric=interp.LogitDiff(answer=[2, 3], wrong=[1, 1]), nodes="heads")
    got = res.clean_per_prompt
    assert torch.allclose(
        got.double(), torch.stack([want[0, 2] - want[0, 1], want[1, 3] - want[1, 1]]).double(), atol=1e-5
    )
    with pytest.raises(ArgumentError, match="wrong"):
        interp.patch(m, clean, corrupt, metric=interp.LogitDiff(answer=5, wrong=6), nodes="heads")
