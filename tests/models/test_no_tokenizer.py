"""A model without a tokenizer runs on token ids: ``model_from_hf(hf, None, ...)`` boots offline (the bridge gets a
stand-in it would otherwise download by name, dropped after boot), every analysis on int tensors and int answers
equals the same call on the same weights with a tokenizer, and text is refused naming the call."""

from __future__ import annotations

import pytest
import torch

import interp
from interp.errors import UnsupportedOperationError
from interp.models import model_from_hf_unchecked as model_from_hf
from tiny_models import DEVICE, tiny_hf_model, tiny_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore::interp.CompletenessWarning")

CLEAN, CORRUPT = ["w1 w2 w3 w4 w1 w2", "w5 w6 w7 w8 w5 w6"], ["w1 w2 w3 w4 w13 w14", "w5 w6 w7 w8 w15 w16"]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def pair(request):
    with_tok = model_from_hf(tiny_hf_model(request.param), tiny_tokenizer(), name="tok", device=DEVICE)
    no_tok = model_from_hf(tiny_hf_model(request.param), None, name="ids", device=DEVICE)
    return with_tok, no_tok


def _ids(m, words):
    return [m.tokenizer.convert_tokens_to_ids(w) for w in words]


def test_boots_without_a_tokenizer(pair):
    tok, ids = pair
    assert ids.tokenizer is None and ids.bridge.tokenizer is None
    assert ids.bridge.cfg.d_vocab == tok.bridge.cfg.d_vocab == tok.arch.d_vocab  # the stand-in set nothing


def test_analyses_on_ids_equal_the_tokenizer_model(pair):
    tok, ids = pair
    clean, corrupt = tok.to_tokens(CLEAN), tok.to_tokens(CORRUPT)
    ans, wrong = _ids(tok, ["w3", "w7"]), _ids(tok, ["w4", "w8"])

    a = interp.attribute_logits(tok, CLEAN, answer=["w3", "w7"], wrong=["w4", "w8"])
    b = interp.attribute_logits(ids, clean, answer=ans, wrong=wrong)
    assert a.labels == b.labels
    torch.testing.assert_close(b.values, a.values, rtol=0, atol=0)

    p = interp.patch(tok, CLEAN, CORRUPT, metric=interp.LogitDiff(["w3", "w7"], ["w4", "w8"]), progress=False)
    q = interp.patch(ids, clean, corrupt, metric=interp.LogitDiff(ans, wrong), progress=False)
    torch.testing.assert_close(q.effect, p.effect, rtol=0, atol=0)

    e = interp.edge_attribution(
        tok, CLEAN, CORRUPT, metric=interp.LogitDiff(["w3", "w7"], ["w4", "w8"]), method="eap", progress=False
    )
    f = interp.edge_attribution(ids, clean, corrupt, metric=interp.LogitDiff(ans, wrong), method="eap", progress=False)
    assert e.labels == f.labels
    torch.testing.assert_close(f.scores, e.scores, rtol=0, atol=0)


@pytest.mark.parametrize(
    "call, fn",
    [
        ("attribute_logits", lambda m: interp.attribute_logits(m, "w1 w2 w3", answer=5)),
        ("patch", lambda m: interp.patch(m, "w1 w2", "w3 w4", metric=interp.LogitDiff(5, 6), progress=False)),
        (
            "edge_attribution",
            lambda m: interp.edge_attribution(m, ["w1 w2"], ["w3 w4"], metric=interp.LogitDiff(5, 6), progress=False),
        ),
        ("to_tokens", lambda m: m.to_tokens("w1 w2")),
    ],
)
def test_text_is_refused_naming_the_call(pair, call, fn):
    with pytest.raises(UnsupportedOperationError, match=rf"^{call}\(\): .*has no tokenizer.*token ids"):
        fn(pair[1])
