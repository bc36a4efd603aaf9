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

from interp._validate import is_int
from interp.errors import ArgumentError
from interp.models.internal import check_device, check_dtype

__all__ = [
    "ACTIVATIONS",
    "CrossLayerTranscoder",
    "Dictionary",
    "Transcoder",
    "activate",
    "check_layers",
    "fvu",
    "mlp_input",
    "placement",
]

#: the activation functions a dictionary may use
ACTIVATIONS = ("relu", "jumprelu", "topk", "batchtopk")


_D = TypeVar("_D", bound="Dictionary")


def activate(pre: Tensor, activation: str, threshold: Optional[Tensor], k: Optional[int]) -> Tensor:
    """act(pre) over the last axis (the module docstring): relu; jumprelu pre·[pre > θ_i]; topk relu with the k
    largest kept; batchtopk relu(pre)·[pre > θ]. The one implementation, for per-layer and cross-layer dictionaries
    (their constructors check ``threshold`` and ``k``)."""
    if activation == "jumprelu":
        return pre * (pre > threshold)  # type: ignore[operator]
    f = torch.relu(pre)
    if activation == "batchtopk":
        return f * (pre > threshold)  # type: ignore[operator]
    if activation == "topk":
        vals, idx = f.topk(int(k), dim=-1)  # type: ignore[arg-type]
        f = torch.zeros_like(f).scatter_(-1, idx, vals)
    return f


def placement(args: tuple, kwargs: dict[str, Any]) -> tuple[Optional[torch.device], Optional[torch.dtype]]:
    """The (device, dtype) that ``.to(*args, **kwargs)`` asks for, read as ``torch.nn.Module.to`` reads them:
    ``.to(device)``, ``.to(dtype)``, ``.to(device, dtype)``, ``.to(tensor)`` (its device and dtype), and the
    keywords ``device=`` / ``dtype=``; None where not asked. The one reading for every dictionary's ``.to``; a device
    or dtype that cannot be honoured, an argument given twice or an unknown one is an :class:`ArgumentError`."""
    unknown = sorted(set(kwargs) - {"device", "dtype"})
    if unknown:
        raise ArgumentError(f"to() got the keyword(s) {unknown}; it takes device= and dtype= (like torch's .to)")
    if len(args) > 2:
        raise ArgumentError(
            f"to() takes at most 2 positional arguments (device, dtype), got {len(args)}: {args!r:.120}"
        )
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    pos: list[Any] = list(args)
    if len(pos) == 1 and isinstance(pos[0], Tensor):  # .to(tensor): its device and dtype
        pos = [pos[0].device, pos[0].dtype]
    for i, a in enumerate(pos):
        if isinstance(a, torch.dtype):
            name = "dtype"
        elif i == 0:
            name = "device"
        else:
            raise ArgumentError(f"to()'s second positional argument {a!r:.80} must be a torch.dtype (device, dtype)")
        if (name == "device" and device is not None) or (name == "dtype" and dtype is not None):
            raise ArgumentError(f"to() got {name} twice ({a!r} and {name}=); give it once")
        if name == "device":
            device = a
        else:
            dtype = a
    if is_int(device):  # torch reads an int as a CUDA index
        device = f"cuda:{device}"
    if device is not None and not isinstance(device, (str, torch.device)):
        raise ArgumentError(f"device={device!r:.80} must be a torch device ('cpu', 'cuda:0', a torch.device) or None")
    dev = None if device is None else check_device(device)
    return dev, None if dtype is None else check_dtype(dtype)


@dataclass(frozen=True)
class Dictionary:
    """A sparse dictionary's weights and maths (see the module docstring): W_enc [F, d], b_enc [F], W_dec [F, d],
    b_dec [d], an optional W_skip [d, d] (out += x W_skipᵀ), ``activation`` in :data:`ACTIVATIONS`, ``threshold``
    [F] for "jumprelu" or the global θ (a 0-d tensor) for "batchtopk", ``k`` for "topk". ``context_length``: the
    sequence length it was trained on, where known. Used through :class:`Transcoder` and
    :class:`interp.features.SAE`."""

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
            raise ArgumentError(
                f"W_enc {tuple(self.W_enc.shape)} and W_dec {tuple(self.W_dec.shape)} must both be "
                "[n_features, d_model]"
            )
        F_, d = self.W_enc.shape
        if tuple(self.b_enc.shape) != (F_,) or tuple(self.b_dec.shape) != (d,):
            raise ArgumentError(
                f"b_enc {tuple(self.b_enc.shape)} must be [{F_}] and b_dec {tuple(self.b_dec.shape)} [{d}]"
            )
        if self.W_skip is not None and tuple(self.W_skip.shape) != (d, d):
            raise ArgumentError(f"W_skip {tuple(self.W_skip.shape)} must be [{d}, {d}]")
        if self.activation == "jumprelu" and (self.threshold is None or tuple(self.threshold.shape) != (F_,)):
            raise ArgumentError(f"activation='jumprelu' needs threshold of shape [{F_}]")
        if self.activation == "batchtopk" and (self.threshold is None or self.threshold.ndim != 0):
            raise ArgumentError(
                "activation='batchtopk' needs threshold: the global θ, a 0-d tensor (got "
                f"{None if self.threshold is None else tuple(self.threshold.shape)})"
            )
        if self.context_length is not None and not (is_int(self.context_length) and self.context_length > 0):
            raise ArgumentError(f"context_length={self.context_length!r} must be a positive int (or None: unknown)")
        if self.activation == "topk" and not (is_int(self.k) and 0 < self.k <= F_):
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
        return activate(pre, self.activation, self.threshold, self.k)

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

    def to(self: "_D", *args: Any, **kwargs: Any) -> "_D":
        """A copy (of the same class) with every tensor moved and cast: ``.to(device)``, ``.to(dtype)``,
        ``.to(device, dtype)``, ``.to(device=…, dtype=…)`` as ``torch.nn.Module.to`` (:func:`placement`)."""
        device, dtype = placement(args, kwargs)
        mv = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
        opt = lambda t: None if t is None else mv(t)  # noqa: E731
        return replace(
            self,
            W_enc=mv(self.W_enc),
            b_enc=mv(self.b_enc),
            W_dec=mv(self.W_dec),
            b_dec=mv(self.b_dec),
            W_skip=opt(self.W_skip),
            threshold=opt(self.threshold),
        )


@dataclass(frozen=True)
class Transcoder(Dictionary):
    """One layer's transcoder (see the module docstring): W_enc [F, d], b_enc [F], W_dec [F, d], b_dec [d],
    an optional W_skip [d, d] (out += x W_skipᵀ), ``activation`` in :data:`ACTIVATIONS`, ``threshold`` [F]
    for "jumprelu" (the global θ, 0-d, for "batchtopk") and ``k`` for "topk". ``context_length``: the sequence
    length it was trained on, where known (longer prompts warn with :class:`interp.ContextLengthWarning`).
    ``layer``: the model layer whose MLP it reads and replaces (its input hook is that MLP's input, its output
    the MLP's write), where known — set by the loaders and by training, None for one built by hand; every
    analysis checks it against the position the transcoder is given at (:func:`check_layers`). Every write of its
    features is its W_dec: a cross-layer transcoder's encoder with later writes is not a :class:`Transcoder`
    (:meth:`CrossLayerTranscoder.encoder`)."""

    layer: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layer is not None and (not is_int(self.layer) or self.layer < 0):
            raise ArgumentError(f"layer={self.layer!r} must be an int ≥ 0 (the model layer) or None (unknown)")
        if self.layer is not None:
            object.__setattr__(self, "layer", int(self.layer))


def fvu(y: Tensor, yhat: Tensor) -> Tensor:
    """Per layer: the fraction of variance unexplained Σ‖y − ŷ‖² / Σ‖y − ȳ‖² over the token axis of y, ŷ [n, N, d]
    → [n] (ȳ the mean over tokens: predicting it scores 1). The one definition, for training and SAE quality."""
    return (y - yhat).pow(2).sum((1, 2)) / (y - y.mean(1, keepdim=True)).pow(2).sum((1, 2)).clamp_min(1e-12)


def check_layers(transcoders: Sequence[Transcoder], name: str = "transcoders") -> None:
    """Each transcoder whose ``layer`` is known sits at that index of the list (one per layer, in layer order);
    otherwise an :class:`~interp.errors.ArgumentError` naming the entry, its layer and the fix."""
    for i, t in enumerate(transcoders):
        if t.layer is not None and t.layer != i:
            got = [getattr(u, "layer", None) for u in transcoders]
            raise ArgumentError(
                f"{name}[{i}] is the transcoder of layer {t.layer}, but the list gives it to layer {i} "
                f"(its layers in order: {got}); pass one transcoder per layer in layer order, e.g. "
                "sorted(transcoders, key=lambda t: t.layer)"
            )


@dataclass(frozen=True)
class CrossLayerTranscoder:
    """A cross-layer transcoder (CLT; Ameisen et al. 2025, "Circuit Tracing" §2.1; circuit-tracer's
    ``model_kind: cross_layer_transcoder``): one encoder per layer reads that layer's MLP input x_l
    (:func:`mlp_input`), and the features of layer l write to the MLP outputs of layer l and of every later one::

        f_l  = act(x_l W_enc[l]ᵀ + b_enc[l])                                      [..., F]
        ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l'] + b_dec[l'] (+ x_l' W_skip[l']ᵀ)      [..., d_model]

    Stored as circuit-tracer stores it: ``W_enc`` [L, F, d], ``b_enc`` [L, F], ``W_dec`` a tuple of L tensors,
    ``W_dec[l]`` [F, L − l, d] whose column t is W_dec[l → l + t], ``b_dec`` [L, d] (``b_dec[l']`` belongs to the
    output of l'), an optional ``W_skip`` [L, d, d]. ``activation`` in :data:`ACTIVATIONS` as for :class:`Dictionary`,
    per layer: ``threshold`` [L, F] for "jumprelu" ([L]: one global θ per layer for "batchtopk"), ``k`` features
    kept per layer and token for "topk". Indices here are encoder indices 0..L−1; ``layers`` gives the model layer
    of each (ascending), where known — set by the loader and by training, None for one built by hand (then encoder
    i is model layer i). The MLP's real write at l' minus ŷ_l' is layer l''s error node in an attribution graph.
    """

    W_enc: Float[Tensor, "n_layers n_features d_model"]
    b_enc: Float[Tensor, "n_layers n_features"]
    W_dec: tuple[Tensor, ...]
    b_dec: Float[Tensor, "n_layers d_model"]
    W_skip: Optional[Float[Tensor, "n_layers d_model d_model"]] = None
    activation: str = "relu"
    threshold: Optional[Tensor] = None
    k: Optional[int] = None
    context_length: Optional[int] = None
    layers: Optional[tuple[int, ...]] = None

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise ArgumentError(f"activation={self.activation!r} is not one of {ACTIVATIONS}")
        if not isinstance(self.W_enc, Tensor) or self.W_enc.ndim != 3:
            raise ArgumentError(f"W_enc {_shape(self.W_enc)} must be [n_layers, n_features, d_model]")
        L, F_, d = self.W_enc.shape
        if not isinstance(self.W_dec, (tuple, list)) or len(self.W_dec) != L:
            raise ArgumentError(
                f"W_dec must be a tuple of {L} tensors (one per encoder layer; W_dec[l] is "
                f"[{F_}, {L} − l, {d}]), got {type(self.W_dec).__name__} of length "
                f"{len(self.W_dec) if isinstance(self.W_dec, (tuple, list)) else '-'}"
            )
        object.__setattr__(self, "W_dec", tuple(self.W_dec))
        for l, w in enumerate(self.W_dec):
            if not isinstance(w, Tensor) or tuple(w.shape) != (F_, L - l, d):
                raise ArgumentError(
                    f"W_dec[{l}] {_shape(w)} must be [{F_}, {L - l}, {d}] (layer {l}'s features to "
                    f"the outputs of layers {l}..{L - 1})"
                )
        if tuple(self.b_enc.shape) != (L, F_) or tuple(self.b_dec.shape) != (L, d):
            raise ArgumentError(
                f"b_enc {_shape(self.b_enc)} must be [{L}, {F_}] and b_dec {_shape(self.b_dec)} [{L}, {d}]"
            )
        if self.W_skip is not None and tuple(self.W_skip.shape) != (L, d, d):
            raise ArgumentError(f"W_skip {_shape(self.W_skip)} must be [{L}, {d}, {d}]")
        if self.activation == "jumprelu" and (self.threshold is None or tuple(self.threshold.shape) != (L, F_)):
            raise ArgumentError(
                f"activation='jumprelu' needs threshold of shape [{L}, {F_}] (one per layer and "
                f"feature), got {_shape(self.threshold)}"
            )
        if self.activation == "batchtopk" and (self.threshold is None or tuple(self.threshold.shape) != (L,)):
            raise ArgumentError(
                f"activation='batchtopk' needs threshold of shape [{L}] (each layer's global θ), got "
                f"{_shape(self.threshold)}"
            )
        if self.activation == "topk" and (not is_int(self.k) or not 0 < self.k <= F_):
            raise ArgumentError(f"activation='topk' needs k in [1, {F_}], got k={self.k!r}")
        if self.context_length is not None and (not is_int(self.context_length) or self.context_length <= 0):
            raise ArgumentError(f"context_length={self.context_length!r} must be a positive int (or None: unknown)")
        if self.layers is not None:
            ok = (
                isinstance(self.layers, (tuple, list))
                and len(self.layers) == L
                and all(is_int(l) and l >= 0 for l in self.layers)
                and all(a < b for a, b in zip(self.layers, self.layers[1:]))
            )
            if not ok:
                raise ArgumentError(
                    f"layers={self.layers!r} must be {L} ascending model layer indices ≥ 0 (one per "
                    "encoder), or None (unknown: encoder i is layer i)"
                )
            object.__setattr__(self, "layers", tuple(int(l) for l in self.layers))

    @property
    def n_layers(self) -> int:
        """L: the number of encoder (and output) layers."""
        return int(self.W_enc.shape[0])

    @property
    def n_features(self) -> int:
        """F: the features per layer."""
        return int(self.W_enc.shape[1])

    @property
    def d_model(self) -> int:
        return int(self.W_enc.shape[2])

    @property
    def model_layers(self) -> tuple[int, ...]:
        """The model layer of each encoder: ``layers``, or 0..L−1 where unknown."""
        return self.layers if self.layers is not None else tuple(range(self.n_layers))

    def _layer(self, l: int) -> int:
        if not is_int(l) or not 0 <= l < self.n_layers:
            raise ArgumentError(f"layer={l!r} must be an encoder index in [0, {self.n_layers - 1}]")
        return l

    def pre_activation(self, x: Float[Tensor, "... d_model"], l: int) -> Float[Tensor, "... n_features"]:
        """x W_enc[l]ᵀ + b_enc[l]."""
        l = self._layer(l)
        return x @ self.W_enc[l].T + self.b_enc[l]

    def activate(self, pre: Float[Tensor, "... n_features"], l: int) -> Float[Tensor, "... n_features"]:
        """Layer l's feature activations from its pre-activations (:func:`activate`)."""
        l = self._layer(l)
        return activate(pre, self.activation, None if self.threshold is None else self.threshold[l], self.k)

    def encode_layer(self, x: Float[Tensor, "... d_model"], l: int) -> Float[Tensor, "... n_features"]:
        """f_l = act(x W_enc[l]ᵀ + b_enc[l]) of layer l's MLP input x."""
        return self.activate(self.pre_activation(x, l), l)

    def encode(self, xs: Float[Tensor, "n_layers ... d_model"]) -> Float[Tensor, "n_layers ... n_features"]:
        """Every layer's f_l from the layers' MLP inputs stacked on the first axis."""
        self._check_stack(xs, self.d_model, "xs")
        return torch.stack([self.encode_layer(xs[l], l) for l in range(self.n_layers)])

    def encoder(self, l: int) -> Transcoder:
        """Layer l's encoder as a per-layer :class:`Transcoder` (its activation, threshold and k; the decoder to its
        own layer's output, b_dec[l] and W_skip[l]) — for a layer whose features write to no later layer (the last,
        or every layer of a CLT whose later decoders are zero), where the Transcoder holds every write. Its decode is
        *not* the CLT's reconstruction of layer l (which adds the earlier layers' features: :meth:`decode`). A layer
        whose features also write to later layers is an :class:`~interp.errors.ArgumentError`: a per-layer
        transcoder cannot hold those writes, so a list of them would build a replacement model without them; its
        encoding is :meth:`encode_layer`, and every analysis takes the CLT itself."""
        l = self._layer(l)
        if self.W_dec[l].shape[1] > 1 and bool(self.W_dec[l][:, 1:].any()):
            raise ArgumentError(
                f"encoder({l}): the features of layer {l} also write to the outputs of later layers, which a "
                "per-layer Transcoder does not hold (a list of them would drop every cross-layer write); encode "
                f"with clt.encode_layer(x, {l}), and pass the CrossLayerTranscoder itself to the analyses "
                "(transcoders=clt)"
            )
        thr = None if self.threshold is None else self.threshold[l]
        return Transcoder(
            self.W_enc[l],
            self.b_enc[l],
            self.W_dec[l][:, 0],
            self.b_dec[l],
            None if self.W_skip is None else self.W_skip[l],
            self.activation,
            thr,
            self.k,
            self.context_length,
            layer=self.model_layers[l],
        )

    def decoder(self, l: int, target: int) -> Float[Tensor, "n_features d_model"]:
        """W_dec[l → target] [F, d]: where layer l's features write in the output of layer ``target`` ≥ l."""
        l = self._layer(l)
        if not is_int(target) or not l <= target < self.n_layers:
            raise ArgumentError(
                f"target={target!r} must be an encoder index in [{l}, {self.n_layers - 1}]: layer "
                f"{l}'s features write to its own output and the later ones"
            )
        return self.W_dec[l][:, target - l]

    def decode(
        self, fs: Float[Tensor, "n_layers ... n_features"], xs: Optional[Tensor] = None
    ) -> Float[Tensor, "n_layers ... d_model"]:
        """ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l'] + b_dec[l'] for every l' (stacked), plus x_l' W_skip[l']ᵀ when the CLT
        has W_skip (then ``xs``, the MLP inputs stacked, is required)."""
        self._check_stack(fs, self.n_features, "fs")
        L, d = self.n_layers, self.d_model
        lead = fs.shape[1:-1]
        out = self.b_dec.reshape(L, *([1] * len(lead)), d).expand(L, *lead, d).clone()
        for l in range(L):  # f_l [..., F] @ W_dec[l] [F, (L − l)·d] → [L − l, ..., d], added at layers l..L−1
            w = self.W_dec[l].reshape(self.n_features, (L - l) * d)
            out[l:] += (fs[l] @ w).unflatten(-1, (L - l, d)).movedim(-2, 0)
        if self.W_skip is not None:
            if xs is None:
                raise ArgumentError("this cross-layer transcoder has W_skip: decode(fs, xs) needs the MLP inputs xs")
            self._check_stack(xs, d, "xs")
            out = out + torch.stack([self.skip(xs[l], l) for l in range(L)])
        return out

    def reconstruct(self, xs: Float[Tensor, "n_layers ... d_model"]) -> Float[Tensor, "n_layers ... d_model"]:
        """decode(encode(xs), xs): every layer's estimate of its MLP's write from the MLP inputs xs."""
        return self.decode(self.encode(xs), xs)

    def skip(self, x: Tensor, l: int) -> Tensor:
        """The linear skip term x W_skip[l]ᵀ of layer l's output (zeros without W_skip)."""
        l = self._layer(l)
        return torch.zeros_like(x) if self.W_skip is None else x @ self.W_skip[l].T

    def _check_stack(self, t: Any, last: int, name: str) -> None:
        if not isinstance(t, Tensor) or t.ndim < 2 or t.shape[0] != self.n_layers or t.shape[-1] != last:
            raise ArgumentError(
                f"{name} {_shape(t)} must be [n_layers={self.n_layers}, ..., {last}]: one entry per "
                "layer of the cross-layer transcoder, stacked on the first axis"
            )

    def to(self, *args: Any, **kwargs: Any) -> "CrossLayerTranscoder":
        """A copy with every tensor moved and cast: ``.to(device)``, ``.to(dtype)``, ``.to(device, dtype)``,
        ``.to(device=…, dtype=…)`` as ``torch.nn.Module.to`` (:func:`placement`)."""
        device, dtype = placement(args, kwargs)
        mv = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
        opt = lambda t: None if t is None else mv(t)  # noqa: E731
        return replace(
            self,
            W_enc=mv(self.W_enc),
            b_enc=mv(self.b_enc),
            W_dec=tuple(mv(w) for w in self.W_dec),
            b_dec=mv(self.b_dec),
            W_skip=opt(self.W_skip),
            threshold=opt(self.threshold),
        )

    def __repr__(self) -> str:
        act = self.activation + (f" k={self.k}" if self.activation == "topk" else "")
        return (
            f"CrossLayerTranscoder({self.n_layers} layers {list(self.model_layers)}, {self.n_features} features "
            f"per layer, d_model {self.d_model}, {act}{', skip' if self.W_skip is not None else ''})"
        )


def _shape(t: Any) -> str:
    return str(list(t.shape)) if isinstance(t, Tensor) else repr(type(t).__name__)


def mlp_input(e: Any, x: Tensor, mid: Optional[Tensor], l: int) -> Tensor:
    """What layer l's MLP reads, from the stream entering the layer ``x`` and the stream after its attention ``mid``:
    the block's MLP read (its read norm, or the stream raw) of ``mid`` where the MLP sees the attention's write, of
    ``x`` where it does not (a parallel block). The one definition of a transcoder's input, for training, the
    graph, interventions and contexts."""
    stream = mid if e.block.sees("mlp", "attn") else x
    if stream is None:
        raise RuntimeError("the engine did not keep resid_mid, which a sequential block's MLP reads")
    return e.read_norm(stream, l, "mlp")
