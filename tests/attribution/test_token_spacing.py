"""An answer / wrong / metric token written without its leading space warns (interp.TokenSpacingWarning).

``wrong="Rome"`` after "The capital of Spain is" reads logit['Rome'] (a word-initial token that rarely
follows "is"), not logit[' Rome']: a silent wrong target. Every reader of token strings after a prompt
(attribute_logits, the metrics LogitDiff / Logit / LogProb / Prob, logit_lens, report) warns, naming the
spaced form, exactly when the string has no leading space, the prompt token it follows does not end in
whitespace and its space-prefixed form is one token. A tiny decoder with a byte-level word tokenizer
(GPT-2 style: ' Rome' and 'Rome' are different tokens) shows it.
"""

from __future__ import annotations

import functools
import tempfile
import warnings

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import interp
from interp.models import model_from_hf_unchecked as model_from_hf
from tiny_models import VOCAB, tiny_hf_model

PROMPT = "The capital of Spain is"
CORRUPT = "The capital of Italy is"
WORDS = ["The", "Ġcapital", "Ġof", "ĠSpain", "ĠItaly", "Ġis", "ĠRome", "Rome", "ĠMadrid", "Madrid", "Ġ", "Paris"]


@functools.lru_cache(maxsize=None)
def _tokenizer_dir() -> str:
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    for w in WORDS:
        vocab[w] = len(vocab)
    while len(vocab) < VOCAB:
        vocab[f"x{len(vocab)}"] = len(vocab)
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=t, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    d = tempfile.mkdtemp(prefix="interp-spaced-tok-")
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def model():
    tok = AutoTokenizer.from_pretrained(_tokenizer_dir())
    assert tok(" Rome", add_special_tokens=False)["input_ids"] != tok("Rome", add_special_tokens=False)["input_ids"]
    return model_from_hf(tiny_hf_model("gpt2"), tok, name="tiny-gpt2-bpe")


def _spacing(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, interp.TokenSpacingWarning)]


def _run(fn):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fn()
    return out, _spacing(rec)


def test_the_warning_class_is_interps_and_filterable():
    assert issubclass(interp.TokenSpacingWarning, interp.InterpWarning)
    assert issubclass(interp.InterpWarning, UserWarning)
    assert {"InterpWarning", "TokenSpacingWarning", "AblationWarning", "CompletenessWarning"} <= set(interp.__all__)


def test_attribute_logits_warns_for_wrong_without_space(model):
    a, msgs = _run(lambda: interp.attribute_logits(model, PROMPT, answer=" Madrid", wrong="Rome"))
    assert len(msgs) == 1, msgs
    assert "wrong='Rome'" in msgs[0] and "' Rome'" in msgs[0] and "' is'" in msgs[0]
    # it still reads what was asked (the warning changes nothing)
    assert int(a.wrong_ids[0]) == model.tokenizer("Rome", add_special_tokens=False)["input_ids"][0]
    _, msgs = _run(lambda: interp.attribute_logits(model, PROMPT, answer="Madrid", wrong=" Rome"))
    assert len(msgs) == 1 and "answer='Madrid'" in msgs[0] and "' Madrid'" in msgs[0]


def test_no_warning_when_spaced_or_after_a_space_or_an_id_or_no_spaced_token(model):
    rome = model.tokenizer("Rome", add_special_tokens=False)["input_ids"][0]
    for kw in (
        dict(answer=" Madrid", wrong=" Rome"),  # spaced: what was meant
        dict(answer=" Madrid", wrong=rome),  # a token id says exactly which token
        dict(answer=" Madrid", wrong="Paris"),
    ):  # ' Paris' is not a single token here
        _, msgs = _run(lambda: interp.attribute_logits(model, PROMPT, **kw))
        assert msgs == [], (kw, msgs)
    _, msgs = _run(lambda: interp.attribute_logits(model, PROMPT + " ", answer="Madrid", wrong="Rome"))
    assert msgs == []  # the prompt ends in a space: the unspaced word is what comes next


def test_per_prompt_lists_and_sets_name_the_entry(model):
    _, msgs = _run(
        lambda: interp.attribute_logits(
            model, [PROMPT, CORRUPT], answer=[" Madrid", " Rome"], wrong=[" Rome", "Madrid"]
        )
    )
    assert len(msgs) == 1 and "wrong[1]='Madrid'" in msgs[0] and "prompt 1" in msgs[0]
    _, msgs = _run(lambda: interp.attribute_logits(model, PROMPT, answer=" Madrid", wrong={"Rome", " Italy"}))
    assert len(msgs) == 1 and "wrong='Rome'" in msgs[0]


@pytest.mark.parametrize(
    "metric",
    [interp.LogitDiff(" Madrid", "Rome"), interp.Logit("Rome"), interp.LogProb("Rome"), interp.Prob("Rome")],
    ids=["LogitDiff", "Logit", "LogProb", "Prob"],
)
def test_every_token_metric_warns(model, metric):
    _, msgs = _run(lambda: interp.patch(model, PROMPT, CORRUPT, metric=metric, nodes="mlps"))
    assert len(msgs) == 1, msgs
    assert type(metric).__name__ in msgs[0] and "'Rome'" in msgs[0] and "' Rome'" in msgs[0]


def test_edge_analyses_warn_through_their_metric(model):
    _, msgs = _run(
        lambda: interp.edge_attribution(
            model, PROMPT, CORRUPT, metric=interp.LogitDiff(" Madrid", "Rome"), progress=False
        )
    )
    assert len(msgs) == 1 and "LogitDiff: wrong='Rome'" in msgs[0]


def test_logit_lens_warns(model):
    _, msgs = _run(lambda: interp.logit_lens(model, PROMPT, answer=" Madrid", wrong="Rome"))
    assert len(msgs) == 1 and "logit_lens: wrong='Rome'" in msgs[0]


def test_the_warning_can_be_made_an_error(model):
    with warnings.catch_warnings():
        warnings.simplefilter("error", interp.TokenSpacingWarning)
        with pytest.raises(interp.TokenSpacingWarning, match="' Rome'"):
            interp.attribute_logits(model, PROMPT, answer=" Madrid", wrong="Rome")


def test_the_warning_points_at_the_callers_line(model):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        interp.attribute_logits(model, PROMPT, answer=" Madrid", wrong="Rome")
    (w,) = [w for w in rec if issubclass(w.category, interp.TokenSpacingWarning)]
    assert w.filename == __file__
