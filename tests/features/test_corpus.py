"""The offline corpora: modern English (Wikipedia and the Python reference, from gensim's test data and CPython) and
its held-out text of another source (the Lee news corpus), and how documents become token rows."""

from __future__ import annotations

import re

import pytest
import torch

from interp.errors import ArgumentError
from interp.dictionaries import _corpus as C
from tiny_models import tiny_model


@pytest.fixture(scope="module")
def modern():
    return C.modern_corpus()


@pytest.mark.slow
def test_modern_corpus_is_varied_modern_english_and_some_code(modern):
    train, held = modern
    assert len(train) > 1500 and len(held) > 150 and not set(train) & set(held)
    words = sum(len(p.split()) for p in train)
    assert words > 400_000  # enough for 131,072 training tokens and more
    text = "\n".join(train)
    # modern encyclopedic prose: the 20th and 21st centuries, and no archaic pronouns to speak of
    assert len(re.findall(r"\b(19|20)\d\d\b", text)) > 2000
    assert text.count(" thee ") + text.count(" thou ") < 50
    # the Python reference: code and grammar
    assert sum(1 for p in train if ">>> " in p or "def " in p) > 50
    # the markup is stripped
    assert text.count("{{") + text.count("[[") + text.count("<ref") < 100
    # the first pieces already span many articles (shuffled): the first 40 share few opening words
    assert len({p.split()[0] for p in train[:40]}) > 20


def _windows(tok, text, n=32):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}


@pytest.mark.real
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_modern_corpus_held_out_shares_no_32_token_window_with_training(modern, name):
    """No held-out piece shares a window of 32 consecutive tokens with the training text, in the catalog's own
    tokenizers (training concatenates pieces with EOS between them, so a shared window lies within one piece)."""
    import interp

    tok = interp.load_model(name).tokenizer
    train, held = modern
    seen = set().union(*(_windows(tok, p) for p in train))
    shared = [p[:60] for p in held if not seen.isdisjoint(_windows(tok, p))]
    assert shared == []
    # the held-out side still scores the default eval_tokens many times over
    assert sum(len(tok(p, add_special_tokens=False)["input_ids"]) for p in held) > 32_768


def test_modern_corpus_is_split_by_source_document(modern):
    """Every held-out piece comes from a held-out document (every tenth article or topic), none from a training one."""
    of = {}
    for docs in (C._wiki_articles(), [t.replace("\n\n", "\n") for t in C._python_reference()]):
        for i, d in enumerate(docs):
            for p in C._pieces(d):
                of.setdefault(p, set()).add(i % 10 == 9)
    train, held = modern
    assert all(of[p] == {True} for p in held)
    assert all(False in of[p] for p in train)


@pytest.mark.slow
def test_modern_corpus_is_deterministic(modern):
    assert C.modern_corpus() == modern
    assert re.fullmatch(r"modern-[0-9a-f]{16}", C.modern_corpus_name())


def test_held_out_corpus_is_another_source(modern):
    docs = C.held_out_corpus()
    assert len(docs) == 350
    assert docs[0].startswith("Hundreds of people have been forced to vacate their homes")
    train = set(modern[0]) | set(modern[1])
    assert not train & set(docs)


def test_token_rows_cut_documents_as_training_does():
    model = tiny_model("llama")
    tok = model.tokenizer
    docs = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9"]
    rows = C.token_rows(model, docs, 4)
    ids = []
    for d in docs:
        ids += tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert rows.shape == (len(ids) // 4, 4)
    assert rows.flatten().tolist() == ids[: rows.numel()]
    assert C.token_rows(model, docs, 4, 1).shape == (1, 4)
    with pytest.raises(ArgumentError, match="less than one row of seq_len=64"):
        C.token_rows(model, docs, 64)
    assert rows.dtype == torch.long
