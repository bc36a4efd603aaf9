"""Tokenisation as the bridge does it: text -> token ids [batch, pos] + attention mask.

BOS is prepended for decoders that have one; an encoder gets the tokenizer's own special tokens
([CLS] … [SEP]); several strings are right-padded and the mask marks the padding.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import torch
from jaxtyping import Int
from torch import Tensor

from interp.errors import ArgumentError, UnknownTokenWarning, VocabularyWarning, warn_user
from interp.models._native_config import BOS_ID, FIRST_WORD_ID

if TYPE_CHECKING:
    from interp.models._model import Model

__all__ = [
    "Batch",
    "check_token_ids",
    "ordinary_tokens",
    "tokenize",
    "readable_token",
    "public_call",
    "text_ids",
    "warn_tokenizer_larger",
]


@dataclass(frozen=True)
class Batch:
    """Token ids [batch, pos] and the attention mask (1 = real token, 0 = padding)."""

    tokens: Int[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"]

    @property
    def has_padding(self) -> bool:
        return bool((self.attention_mask == 0).any())

    def last_positions(self) -> Int[Tensor, " batch"]:
        """Index of each row's last real token (right padding) or the last column (left padding)."""
        pos = torch.arange(self.tokens.shape[1], device=self.tokens.device)
        return (self.attention_mask.bool() * pos).amax(dim=1)


def public_call() -> str:
    """The call the user made: the outermost function of interp's own modules on the stack that is not private
    (``attribute_logits``, ``patch``, ``to_tokens``…), for error messages; "" when there is none."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    f: Optional[FrameType] = sys._getframe(1)
    name = ""
    while f is not None:
        code = f.f_code
        if (
            os.path.abspath(code.co_filename).startswith(root)
            and not code.co_name.startswith(("_", "<"))
            and code.co_name != "wrapper"
        ):
            name = code.co_name
        f = f.f_back
    return name


def _unknown(tok: Any, text: str, ids: Sequence[int]) -> int:
    """How many of ``ids`` are the tokenizer's unknown-word token while ``text`` does not spell that token."""
    unk = getattr(tok, "unk_token_id", None)
    if unk is None or (getattr(tok, "unk_token", None) or "\0") in text:
        return 0
    return sum(1 for i in ids if i == unk)


def text_ids(model: Model, text: str, arg: str) -> list[int]:
    """The token ids of ``text`` read as a token to score (an answer, a wrong token, a metric's or a graph's
    target): no special tokens added. A text with a word the vocabulary lacks is an ArgumentError — its
    unknown-word id would stand for every unknown word (the toy models read " Mary" and " John" as one id)."""
    tok = model._need_tokenizer(f"{arg}={text!r}")
    ids = [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]]
    if _unknown(tok, text, ids):
        known = [t for t in list(tok.get_vocab())[:8] if t != tok.unk_token] if hasattr(tok, "get_vocab") else []
        raise ArgumentError(
            f"{arg}={text!r} is not in model {model.name!r}'s vocabulary: it tokenises to the unknown-word token "
            f"{tok.unk_token!r} (id {tok.unk_token_id}), which every unknown word shares; pass a word of its "
            f"vocabulary (e.g. {known[:5]}) or a token id"
        )
    return ids


def tokenize(model: Model, text: Union[str, Sequence[str]]) -> Batch:
    """Tokenise like the bridge: BOS prepended for decoders that have one; [CLS] … [SEP] for BERT.

    Several strings are right-padded; the mask marks the padding.
    """
    tok = model._need_tokenizer(f"inputs={text!r:.60}")
    texts = [text] if isinstance(text, str) else list(text)
    if not texts or any(not isinstance(t, str) for t in texts):
        raise ArgumentError(f"inputs must be a non-empty string or list of strings, got {text!r:.80}")
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise ArgumentError(
            f"inputs has an empty (or blank) string at index {empty[0]}; every prompt needs at least one token"
        )
    rows = [tok(t, add_special_tokens=not model.arch.causal)["input_ids"] for t in texts]
    unknown = [(i, n) for i, (t, r) in enumerate(zip(texts, rows)) if (n := _unknown(tok, t, r))]
    if unknown:
        i, n = unknown[0]
        warn_user(
            f"inputs[{i}]={texts[i]!r:.80} has {n} word(s) that model {model.name!r}'s tokenizer does not know: each "
            f"became the unknown-word token {tok.unk_token!r}, so different words read as one token"
            + (f" ({len(unknown)} prompts have such words)" if len(unknown) > 1 else ""),
            UnknownTokenWarning,
        )
    if model.prepend_bos:
        rows = [[tok.bos_token_id] + r for r in rows]
    if any(len(r) == 0 for r in rows):
        raise ArgumentError(f"inputs={text!r:.80} tokenises to an empty sequence")
    n = max(len(r) for r in rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    tokens = torch.tensor([r + [pad] * (n - len(r)) for r in rows], dtype=torch.long, device=model.device)
    mask = torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows], dtype=torch.long, device=model.device)
    return Batch(tokens, mask)


def tokenizer_size(tokenizer: Any) -> int:
    """1 + the largest id ``tokenizer`` can produce (its vocabulary with the added tokens)."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return max(max(vocab.values(), default=-1) + 1, len(tokenizer))


def warn_tokenizer_larger(tokenizer: Any, d_vocab: int, name: str) -> None:
    """A :class:`interp.errors.VocabularyWarning` when ``tokenizer`` can produce ids ≥ ``d_vocab`` (the model's
    embedding rows).

    A warning, not a refusal: a tokenizer with a few tokens past the embedding is common and harmless (a pad or
    chat token added to the tokenizer without resizing the model), and text that never produces them runs exactly;
    a prompt or an answer that does produce one is refused where it is read (:func:`check_token_ids`), naming it.
    A tokenizer far larger than the model (the wrong one saved beside it) is warned of the same way: its first
    prompt with a large id is refused."""
    if tokenizer is None:
        return
    n = tokenizer_size(tokenizer)
    if n > d_vocab:
        warn_user(
            f"model {name!r}: its tokenizer has {n:,} tokens but the model embeds {d_vocab:,} (d_vocab): the "
            f"{n - d_vocab:,} ids from {d_vocab} on have no embedding, so a prompt or answer that tokenises to one "
            "is refused. If the tokenizer is not the model's, save the model's own tokenizer beside it",
            VocabularyWarning,
        )


def check_token_ids(model: Model, tokens: Tensor, arg: str = "inputs") -> None:
    """ArgumentError when a token id of ``tokens`` is < 0 or ≥ the model's ``d_vocab`` (its embedding rows), naming
    the id (and its token, where the tokenizer has one) — torch's ``IndexError`` otherwise, deep in a forward."""
    if tokens.numel() == 0:
        return
    d_vocab = model.arch.d_vocab
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo >= 0 and hi < d_vocab:
        return
    bad = lo if lo < 0 else hi
    tok = model.tokenizer
    piece = ""
    if tok is not None and bad >= 0:
        try:
            name = tok.convert_ids_to_tokens(bad)
        except (IndexError, KeyError, TypeError, ValueError, OverflowError):
            name = None
        piece = f" (token {name!r})" if isinstance(name, str) else ""
    why = (
        f"; model {model.name!r}'s tokenizer produces ids its embedding does not have (a tokenizer larger than the "
        "model: save the model's own tokenizer beside it)"
        if piece
        else ""
    )
    raise ArgumentError(f"{arg} has token id {bad}{piece}; ids must be in [0, {d_vocab - 1}] (d_vocab={d_vocab}){why}")


def _byte_decoder() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2, SmolLM2, Llama-3-style tokenizers) back to bytes: printable
    bytes stand for themselves, the other 68 are shifted to code points 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(shifted)}}


def readable_token(tokenizer: Any, token_id: int) -> str:
    """Token ``token_id`` as text a person can read in a figure.

    ``tokenizer.decode`` turns a token holding part of a multi-byte UTF-8 character into U+FFFD
    (or, drawn in some fonts, into look-alike glyphs); such a token is shown as its bytes instead,
    escaped as ``\\xNN`` (e.g. ``\\xe2\\x80`` for the first two bytes of a curly quote).
    """
    text = tokenizer.decode([int(token_id)])
    if "\ufffd" not in text:
        return text
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    if not isinstance(piece, str):
        return text
    if piece.startswith("<0x") and piece.endswith(">"):  # SentencePiece byte fallback, e.g. <0xE2>
        return "\\x" + piece[3:-1].lower()
    dec = _byte_decoder()
    if not all(c in dec for c in piece):
        return text
    raw = bytes(dec[c] for c in piece)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(f"\\x{b:02x}" if b >= 0x80 else chr(b) for b in raw)


def ordinary_tokens(model: "Model", need: int) -> tuple[Any, int]:
    """(the BOS id or None, the first id of the ordinary tokens) for prompts of random tokens: the toys'
    own layout (BOS, UNK, then words), else the ids after the tokenizer's special ones, lowered when needed
    so that ``need`` ids remain."""
    if model.arch.family == "native":
        return BOS_ID, FIRST_WORD_ID
    tok = model.tokenizer
    bos = getattr(tok, "bos_token_id", None) if tok is not None else None
    special = set(getattr(tok, "all_special_ids", []) or []) if tok is not None else set()
    low = max(special) + 1 if special else 0
    return bos, min(low, model.arch.d_vocab - need)
