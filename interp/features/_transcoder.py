"""Sparse dictionaries' maths, and per-layer transcoders: a dictionary that reads an MLP's input and writes its output.

A dictionary maps an input x to feature activations and decodes them::

    pre  = x W_encᵀ + b_enc                      [..., F]
    f    = act(pre)                              relu | jumprelu (pre · [pre > θ_i]) | topk (relu, k largest kept)
                                                 | batchtopk (relu(pre) · [pre > θ], one global θ)
    out  = f W_dec + b_dec (+ x W_skipᵀ)         [..., d_model]

"batchtopk" is a BatchTopK dictionary at inference: trained keeping the k·batch largest activations of a whole
batch, it is run per token with the global threshold θ learnt in training (SAELens saves it so, as JumpReLU with
θ in every feature; dictionary_learning's BatchTopKSAE keeps the scalar ``threshold``).

A transcoder of layer l reads the MLP's input x (the second norm's output) and estimates the MLP's write; a
*skip* transcoder adds the linear term x W_skipᵀ. The MLP's real write minus ``out`` is the layer's error node in
an attribution graph (docs/math.md §26). A residual-stream SAE (:class:`interp.features.SAE`) is the same maths
on a point of the stream, reconstructing its own input.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence, TypeVar

import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import ArgumentError

__all__ = ["ACTIVATIONS", "Dictionary", "Transcoder", "check_layers", "mlp_input"]

#: the activation functions a dictionary may use
ACTIVATIONS = ("relu", "jumprelu", "topk", "batchtopk")


_D = TypeVar("_D", bound="Dictionary")


@dataclass(frozen=True)
class Dictionary:
    """A sparse dictionary's weights and maths (see the module docstring): W_enc [F, d], b_enc [F], W_dec [F, d],
    b_dec [d], an optional W_skip [d, d] (out += x W_skipᵀ), ``activation`` in :data:`ACTIVATIONS`, ``threshold``
    [F] for "jumprelu" or the global θ (a 0-d tensor) for "batchtopk", ``k`` for "topk". ``context_length``: the
    sequence length it was trained on, where known. Used through :class:`Transcoder` and :class:`interp.features.SAE`."""

    W_enc: Float[Tensor, "n_features d_model"]
    b_enc: Float[Tensor, "n_features"]
    W_dec: Float[Tensor, "n_features d_model"]
    b_dec: Float[Tensor, "d_model"]
    W_skip: Optional[Float[Tensor, "d_model d_model"]] = None
    activation: str = "relu"
    threshold: Optional[Float[Tensor, "n_features"]] = None
    k: Optional[int] = None
    context_length: Optional[int] = None

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise ArgumentError(f"activation={self.activation!r} is not one of {ACTIVATIONS}")
        if self.W_enc.ndim != 2 or self.W_dec.shape != self.W_enc.shape:
            raise ArgumentError(f"W_enc {tuple(self.W_enc.shape)} and W_dec {tuple(self.W_dec.shape)} must both be "
                                "[n_features, d_model]")
        F_, d = self.W_enc.shape
        if tuple(self.b_enc.shape) != (F_,) or tuple(self.b_dec.shape) != (d,):
            raise ArgumentError(f"b_enc {tuple(self.b_enc.shape)} must be [{F_}] and b_dec {tuple(self.b_dec.shape)} [{d}]")
        if self.W_skip is not None and tuple(self.W_skip.shape) != (d, d):
            raise ArgumentError(f"W_skip {tuple(self.W_skip.shape)} must be [{d}, {d}]")
        if self.activation == "jumprelu" and (self.threshold is None or tuple(self.threshold.shape) != (F_,)):
            raise ArgumentError(f"activation='jumprelu' needs threshold of shape [{F_}]")
        if self.activation == "batchtopk" and (self.threshold is None or self.threshold.ndim != 0):
            raise ArgumentError("activation='batchtopk' needs threshold: the global θ, a 0-d tensor (got "
                                f"{None if self.threshold is None else tuple(self.threshold.shape)})")
        if self.context_length is not None and not (isinstance(self.context_length, int) and self.context_length > 0):
            raise ArgumentError(f"context_length={self.context_length!r} must be a positive int (or None: unknown)")
        if self.activation == "topk" and not (isinstance(self.k, int) and 0 < self.k <= F_):
            raise ArgumentError(f"activation='topk' needs k in [1, {F_}], got k={self.k!r}")

    @property
    def n_features(self) -> int:
        return int(self.W_enc.shape[0])

    @property
    def d_model(self) -> int:
        return int(self.W_enc.shape[1])

    def pre_activation(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... n_features"]:
        """x W_encᵀ + b_enc."""
        return x @ self.W_enc.T + self.b_enc

    def activate(self, pre: Float[Tensor, "... n_features"]) -> Float[Tensor, "... n_features"]:
        """The feature activations from the pre-activations."""
        if self.activation == "jumprelu":
            return pre * (pre > self.threshold)  # type: ignore[operator]  # checked in __post_init__
        f = torch.relu(pre)
        if self.activation == "batchtopk":
            return f * (pre > self.threshold)  # type: ignore[operator]  # checked in __post_init__
        if self.activation == "topk":
            vals, idx = f.topk(int(self.k), dim=-1)  # type: ignore[arg-type]
            f = torch.zeros_like(f).scatter_(-1, idx, vals)
        return f

    def encode(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... n_features"]:
        """Feature activations act(x W_encᵀ + b_enc)."""
        return self.activate(self.pre_activation(x))

    def decode(self, f: Float[Tensor, "... n_features"], x: Optional[Tensor] = None) -> Float[Tensor, "... d_model"]:
        """f W_dec + b_dec, plus the skip term x W_skipᵀ when the transcoder has one (then ``x`` is required)."""
        out = f @ self.W_dec + self.b_dec
        if self.W_skip is not None:
            if x is None:
                raise ArgumentError("this transcoder has W_skip: decode(f, x) needs the MLP input x")
            out = out + x @ self.W_skip.T
        return out

    def skip(self, x: Tensor) -> Tensor:
        """The linear skip term x W_skipᵀ (zeros without W_skip)."""
        return torch.zeros_like(x) if self.W_skip is None else x @ self.W_skip.T

    def to(self: "_D", device: Any = None, dtype: Optional[torch.dtype] = None) -> "_D":
        """A copy (of the same class) with every tensor moved (floating tensors cast to ``dtype``)."""
        mv = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
        opt = lambda t: None if t is None else mv(t)  # noqa: E731
        return replace(self, W_enc=mv(self.W_enc), b_enc=mv(self.b_enc), W_dec=mv(self.W_dec), b_dec=mv(self.b_dec),
                       W_skip=opt(self.W_skip), threshold=opt(self.threshold))


@dataclass(frozen=True)
class Transcoder(Dictionary):
    """One layer's transcoder (see the module docstring): W_enc [F, d], b_enc [F], W_dec [F, d], b_dec [d],
    an optional W_skip [d, d] (out += x W_skipᵀ), ``activation`` in :data:`ACTIVATIONS`, ``threshold`` [F]
    for "jumprelu" (the global θ, 0-d, for "batchtopk") and ``k`` for "topk". ``context_length``: the sequence
    length it was trained on, where known (longer prompts warn with :class:`interp.ContextLengthWarning`).
    ``layer``: the model layer whose MLP it reads and replaces (its input hook is that MLP's input, its output
    the MLP's write), where known — set by the loaders and by training, None for one built by hand; every
    analysis checks it against the position the transcoder is given at (:func:`check_layers`)."""

    layer: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layer is not None and (isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer < 0):
            raise ArgumentError(f"layer={self.layer!r} must be an int ≥ 0 (the model layer) or None (unknown)")


def check_layers(transcoders: Sequence[Transcoder], name: str = "transcoders") -> None:
    """Each transcoder whose ``layer`` is known sits at that index of the list (one per layer, in layer order);
    otherwise an :class:`~interp.errors.ArgumentError` naming the entry, its layer and the fix."""
    for i, t in enumerate(transcoders):
        if t.layer is not None and t.layer != i:
            got = [getattr(u, "layer", None) for u in transcoders]
            raise ArgumentError(f"{name}[{i}] is the transcoder of layer {t.layer}, but the list gives it to layer {i} "
                                f"(its layers in order: {got}); pass one transcoder per layer in layer order, e.g. "
                                "sorted(transcoders, key=lambda t: t.layer)")


def mlp_input(e: Any, x: Tensor, mid: Optional[Tensor], l: int) -> Tensor:
    """What layer l's MLP reads, from the stream entering the layer ``x`` and the stream after its attention ``mid``:
    the block's MLP read (its read norm, or the stream raw) of ``mid`` where the MLP sees the attention's write, of
    ``x`` where it does not (a parallel block). The one definition of a transcoder's input, for training, the
    graph, interventions and contexts."""
    stream = mid if e.block.sees("mlp", "attn") else x
    if stream is None:
        raise RuntimeError("the engine did not keep resid_mid, which a sequential block's MLP reads")
    return e.read_norm(stream, l, "mlp")
