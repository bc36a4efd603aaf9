"""Model: a loaded transformer as interp sees it — bridge, tokenizer, ArchInfo, frozen weights."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence, TypeVar, Union

import torch
from jaxtyping import Int
from torch import Tensor

from interp.errors import ArgumentError, UnsupportedOperationError
from interp.models._arch import ArchInfo
from interp.models._block import Block, describe_block
from interp.models._tokenize import tokenize
from interp.models._weights import Weights

__all__ = ["Model"]


_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class Model:
    """A loaded model.

    ``bridge`` is the transformer-lens ``TransformerBridge`` used for every forward pass (and
    its hook points); ``weights`` are the model's own (unfolded) weights in TL layout, which
    the pure weight maths in :mod:`interp.circuits` reads; ``arch`` says which block family
    the decompositions must follow. ``source`` records where the weights came from and
    ``provenance`` what they are (e.g. a quantized release, dequantized), so results can say so.
    ``block_devices`` is where accelerate placed each block (``"cpu"``, ``"disk"``, ``"cuda:0"``) for a model
    loaded with ``device_map``, else empty (every block on ``device``).
    """

    name: str
    bridge: Any
    tokenizer: Any
    arch: ArchInfo
    weights: Weights
    source: str = ""
    prepend_bos: bool = field(default=True)
    provenance: str = ""
    block_devices: tuple[str, ...] = ()

    @property
    def device(self) -> torch.device:
        return self.weights.W_E.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.W_E.dtype

    @property
    def has_mlp(self) -> bool:
        """Whether the blocks have an MLP sublayer (dense, or routed experts): the one check every engine uses."""
        return not self.arch.attn_only and (self.weights.W_in.shape[-1] > 0 or self.arch.n_experts > 0)

    @property
    def block(self) -> Block:
        """One layer's wiring as ordered steps (:func:`interp.models.describe_block`): what every forward
        interprets and every analysis asks about the block."""
        return describe_block(self.arch, self.has_mlp)

    def derived(self, key: str, stamp: Hashable, build: Callable[[], "_T"]) -> "_T":
        """State derived from the model (an engine's fused weights, the edge graph), kept on it under ``key`` and
        rebuilt by ``build()`` when ``stamp`` (what the state depends on) differs from the kept one's."""
        kept = self.__dict__.get(key)
        if kept is None or kept[0] != stamp:
            kept = (stamp, build())
            object.__setattr__(self, key, kept)  # the model is frozen; this is derived state, not a field
        return kept[1]

    def forget(self, key: str) -> None:
        """Drop the derived state kept under ``key`` (:meth:`derived`)."""
        self.__dict__.pop(key, None)

    def _need_tokenizer(self, what: str = "text") -> Any:
        """The tokenizer, or UnsupportedOperationError naming the user's call and ``what`` was text."""
        if self.tokenizer is None:
            from interp.models._tokenize import public_call

            call = public_call()
            raise UnsupportedOperationError(
                f"{call + '(): ' if call else ''}{what} is text, but model {self.name!r} has no tokenizer (it was "
                "loaded with tokenizer=None); pass token ids (an int tensor [batch, pos]) instead"
            )
        return self.tokenizer

    def to_tokens(self, text: Union[str, Sequence[str]]) -> Int[Tensor, "batch pos"]:
        """Token ids as the bridge tokenises them (BOS prepended for decoders; [CLS]/[SEP] for BERT).

        A list of strings is right-padded with the tokenizer's pad token; use
        :func:`interp.models.tokenize` to also get the attention mask.
        """
        return tokenize(self, text).tokens

    def to_str_tokens(self, tokens: Union[str, Tensor, Sequence[int]]) -> list[str] | list[list[str]]:
        """Each token id as its string; a [batch, pos] tensor gives one list per row."""
        tok = self._need_tokenizer()
        if isinstance(tokens, str):
            tokens = self.to_tokens(tokens)[0]
        t = torch.as_tensor(tokens)
        if t.ndim not in (1, 2):
            raise ArgumentError(f"tokens must be 1-D or 2-D token ids, got shape {tuple(t.shape)}")
        ids = t.to(torch.long).tolist()  # one read of the device, not one per token
        if t.ndim == 2:
            return [[tok.decode([i]) for i in row] for row in ids]
        return [tok.decode([i]) for i in ids]

    def __repr__(self) -> str:
        a = self.arch
        norms = a.norm_layout if a.norm == "none" else f"{a.norm_layout} {a.norm}"
        where = f"device={self.device}"
        if self.block_devices:  # placed by accelerate: say where the blocks are, not only where it computes
            counts: dict[str, int] = {}
            for d in self.block_devices:
                counts[d] = counts.get(d, 0) + 1
            where += " (blocks: " + ", ".join(f"{n} on {d}" for d, n in counts.items()) + ")"
        return (
            f"Model({self.name!r}: {a.family}, {a.n_layers} layers, {a.n_heads} heads"
            f"{f' ({a.n_kv_heads} KV)' if a.n_kv_heads != a.n_heads else ''}, d_model={a.d_model}, "
            f"{norms}, {where}, dtype={self.dtype})"
        )
