"""ToyConfig: the shape of a native (toy) transformer, and its translation to transformer-lens.

The toys are the models of "A Mathematical Framework for Transformer Circuits" (Elhage et al.
2021, sections "Zero-Layer", "One-Layer" and "Two-Layer Attention-Only Transformers"): no MLPs,
optionally no norms, learned / rotary / no positional embedding. They run on transformer-lens's
TL-native source (``TransformerBridge.boot_native``), so every interp analysis treats them like
any other model.

Vocabulary layout (fixed, so that training data and the tokenizer agree):

    id 0  "<bos>"   prepended to every sequence (also the tokenizer's eos and pad token)
    id 1  "<unk>"   what the word-level tokenizer maps unknown words to (never trained on)
    id 2… words     the ``d_vocab - 2`` "content" tokens the synthetic data is made of
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Optional

from interp._validate import check_positive_int
from interp.errors import ArgumentError

__all__ = ["ToyConfig", "BOS_ID", "UNK_ID", "FIRST_WORD_ID", "toy_words"]

BOS_ID = 0
UNK_ID = 1
FIRST_WORD_ID = 2

_NORMS = ("none", "layernorm", "rmsnorm")
_POSITIONAL = ("learned", "rotary", "none")

# Short, distinct, lower-case English words: figures read "cat → dog" instead of "w17 → w3".
_WORDS = (
    "cat dog sun moon tree leaf rock sand fish bird frog bear wolf deer lion duck "
    "rain snow wind fire lake hill road ship boat car bus train door wall roof bed "
    "cup pot pan knife fork bowl milk tea rice bread egg salt corn bean pear plum "
    "red blue green gold pink gray black white king queen knight pawn bell drum harp horn"
).split()


def toy_words(n: int) -> list[str]:
    """The first ``n`` content words ("cat", "dog", …; then "w64", "w65", … past the list)."""
    return [(_WORDS[i] if i < len(_WORDS) else f"w{i}") for i in range(n)]


@dataclass(frozen=True)
class ToyConfig:
    """An attention-only transformer: sizes, norm, positional scheme and init seed.

    ``n_kv_heads`` < ``n_heads`` gives grouped-query attention; ``norm`` is applied before each
    attention layer and before the unembedding (pre-norm) unless it is "none".
    """

    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 64
    d_head: int = 16
    d_vocab: int = 66  # <bos>, <unk> and 64 words
    n_ctx: int = 32
    n_kv_heads: Optional[int] = None  # None: n_heads (no GQA)
    norm: Literal["none", "layernorm", "rmsnorm"] = "none"
    positional: Literal["learned", "rotary", "none"] = "learned"
    norm_eps: float = 1e-5
    seed: int = 0  # initialisation seed

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads", "d_model", "d_head", "n_ctx"):
            check_positive_int(name, getattr(self, name))
        if not isinstance(self.d_vocab, int) or self.d_vocab < FIRST_WORD_ID + 2:
            raise ArgumentError(
                f"d_vocab={self.d_vocab!r} must be an int >= {FIRST_WORD_ID + 2} (<bos>, <unk>, 2+ words)"
            )
        if self.n_kv_heads is not None and (
            not isinstance(self.n_kv_heads, int) or self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads
        ):
            raise ArgumentError(f"n_kv_heads={self.n_kv_heads!r} must be a positive divisor of n_heads={self.n_heads}")
        if self.norm not in _NORMS:
            raise ArgumentError(f"norm={self.norm!r}; allowed: {list(_NORMS)}")
        if self.positional not in _POSITIONAL:
            raise ArgumentError(f"positional={self.positional!r}; allowed: {list(_POSITIONAL)}")
        if self.positional == "rotary" and self.d_head % 2:
            raise ArgumentError(f"d_head={self.d_head} must be even for positional='rotary'")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def n_words(self) -> int:
        return self.d_vocab - FIRST_WORD_ID

    def bridge_config(self) -> dict[str, Any]:
        """The transformer-lens ``TransformerBridgeConfig`` fields for ``boot_native``.

        positional="none" is a learned table held at zero (the native source has no "none").
        """
        return dict(
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_key_value_heads=self.n_kv_heads,
            d_model=self.d_model,
            d_head=self.d_head,
            d_vocab=self.d_vocab,
            n_ctx=self.n_ctx,
            attn_only=True,
            d_mlp=None,
            act_fn="gelu",  # no MLP: act_fn is never used
            normalization_type={"none": None, "layernorm": "LN", "rmsnorm": "RMS"}[self.norm],
            positional_embedding_type="rotary" if self.positional == "rotary" else "standard",
            eps=self.norm_eps,
            seed=self.seed,
            original_architecture="TransformerLensNative",
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ToyConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ArgumentError(f"toy config has unknown fields {unknown}; allowed: {sorted(known)}")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
