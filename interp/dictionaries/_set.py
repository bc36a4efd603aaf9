"""One type for a set of transcoders: per-layer or cross-layer, the same fields and the same methods.

Encoder i reads the MLP input x of model layer ``layers[i]`` and its features write to the MLP outputs of that layer
and of the m_i − 1 layers of the set after it::

    f_i   = act_i(x W_enc[i]ᵀ + b_enc[i])                                         [..., F_i]
    ŷ_j   = Σ_{i ≤ j < i + m_i} f_i W_dec[i][:, j − i] + b_dec[j] (+ x_j W_skip[j]ᵀ)    [..., d_model]

with ``W_dec[i]`` [F_i, m_i, d]: m_i = 1 for a per-layer set (each layer writes only its own output), m_i = n − i for
a cross-layer transcoder (every later layer of the set). A list of :class:`Transcoder` and a
:class:`CrossLayerTranscoder` are the two ways to build one (:meth:`DictionarySet.of`); the analyses read either
through this one method set, as circuit-tracer's ``TranscoderSet`` and ``CrossLayerTranscoder`` share theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from interp._validate import is_int
from interp.dictionaries._sae import SAE
from interp.dictionaries._transcoder import (
    CrossLayerTranscoder,
    Transcoder,
    activate,
    check_layers,
    placement,
)
from interp.errors import ArgumentError, ShapeError

__all__ = ["DictionarySet", "check_transcoder", "replacement_set"]


@dataclass(frozen=True, eq=False)
class DictionarySet:
    """A set of transcoders (module docstring), per encoder i at model layer ``layers[i]`` (ascending): ``W_enc[i]``
    [F_i, d], ``b_enc[i]`` [F_i], ``W_dec[i]`` [F_i, m_i, d] (its writes to the outputs of layers[i .. i + m_i − 1]),
    ``b_dec[i]`` [d] (the bias of layer layers[i]'s output), ``W_skip[i]`` [d, d] or None, ``activation[i]`` with
    its ``threshold[i]`` and ``k[i]`` (as :class:`Transcoder`'s), ``context_lengths[i]`` the sequence length it was
    trained on (None: unknown). Every encoder reads the MLP input of its layer and writes MLP outputs."""

    layers: tuple[int, ...]
    W_enc: tuple[Tensor, ...]
    b_enc: tuple[Tensor, ...]
    W_dec: tuple[Tensor, ...]
    b_dec: tuple[Tensor, ...]
    W_skip: tuple[Optional[Tensor], ...]
    activation: tuple[str, ...]
    threshold: tuple[Optional[Tensor], ...]
    k: tuple[Optional[int], ...]
    context_lengths: tuple[Optional[int], ...]

    def __post_init__(self) -> None:
        n = len(self.layers)
        if n == 0 or any(not is_int(l) or l < 0 for l in self.layers) or list(self.layers) != sorted(set(self.layers)):
            raise ArgumentError(f"layers={self.layers!r} must be ascending distinct model layer indices ≥ 0")
        for name in ("W_enc", "b_enc", "W_dec", "b_dec", "W_skip", "activation", "threshold", "k", "context_lengths"):
            if len(getattr(self, name)) != n:
                raise ArgumentError(f"{name} has {len(getattr(self, name))} entries; the set has {n} layers")
        d = int(self.W_enc[0].shape[-1])
        for i, (we, wd) in enumerate(zip(self.W_enc, self.W_dec)):
            F_ = int(we.shape[0])
            if we.ndim != 2 or we.shape[1] != d or wd.ndim != 3 or wd.shape[0] != F_ or wd.shape[2] != d:
                raise ArgumentError(
                    f"encoder {i}: W_enc {list(we.shape)} must be [F, {d}] and W_dec {list(wd.shape)} [F, m, {d}]"
                )
            if not 1 <= wd.shape[1] <= n - i:
                raise ArgumentError(
                    f"encoder {i} writes to {wd.shape[1]} layers; from position {i} the set has {n - i} layers"
                )

    # ------------------------------------------------------------------------------------------ building

    @classmethod
    def of(cls, dicts: Any, name: str = "transcoders") -> "DictionarySet":
        """The set of ``dicts``: a :class:`DictionarySet` (itself), a :class:`CrossLayerTranscoder`, one
        :class:`Transcoder` (its ``layer`` known), a list of them (each at its ``layer``, or at its index where the
        layer is unknown), a {layer: Transcoder} dict, or a training result (its ``.transcoders``). Anything else,
        or a transcoder whose layer disagrees with its place, is an :class:`ArgumentError` naming ``name``."""
        if isinstance(dicts, DictionarySet):
            return dicts
        inner = getattr(dicts, "transcoders", None)  # train_transcoders' result
        if inner is not None and not isinstance(dicts, (list, tuple, dict)):
            dicts = inner
        if isinstance(dicts, CrossLayerTranscoder):
            L = dicts.n_layers
            return cls(
                layers=dicts.model_layers,
                W_enc=tuple(dicts.W_enc.unbind(0)),
                b_enc=tuple(dicts.b_enc.unbind(0)),
                W_dec=tuple(dicts.W_dec),
                b_dec=tuple(dicts.b_dec.unbind(0)),
                W_skip=(None,) * L if dicts.W_skip is None else tuple(dicts.W_skip.unbind(0)),
                activation=(dicts.activation,) * L,
                threshold=(None,) * L if dicts.threshold is None else tuple(dicts.threshold.unbind(0)),
                k=(dicts.k,) * L,
                context_lengths=(dicts.context_length,) * L,
            )
        if isinstance(dicts, Transcoder):
            if dicts.layer is None:
                raise ArgumentError(f"{name} is one Transcoder whose layer is unknown; set layer= or pass a list")
            items = [(dicts.layer, dicts)]
        elif isinstance(dicts, dict):
            items = list(dicts.items())
        elif isinstance(dicts, (list, tuple)) and dicts:
            items = [(t.layer if getattr(t, "layer", None) is not None else i, t) for i, t in enumerate(dicts)]
        else:
            raise ArgumentError(
                f"{name}={type(dicts).__name__} must be a list of interp.features.Transcoder (one per layer, or any "
                "layers with .layer set), a {layer: Transcoder} dict or an interp.features.CrossLayerTranscoder"
            )
        seen: dict[int, Transcoder] = {}
        for key, t in items:
            where = f"{name}[{key}]"
            if not isinstance(t, Transcoder):
                raise ArgumentError(f"{where} is a {type(t).__name__}, not an interp.features.Transcoder")
            if not is_int(key) or key < 0 or int(key) in seen:
                raise ArgumentError(f"{where}: a layer must be an int ≥ 0, given once")
            if t.layer is not None and t.layer != key:
                raise ArgumentError(f"{where} is the transcoder of layer {t.layer}, given for layer {key}")
            seen[int(key)] = t
        ts = [seen[l] for l in sorted(seen)]
        return cls(
            layers=tuple(sorted(seen)),
            W_enc=tuple(t.W_enc for t in ts),
            b_enc=tuple(t.b_enc for t in ts),
            W_dec=tuple(t.W_dec[:, None] for t in ts),
            b_dec=tuple(t.b_dec for t in ts),
            W_skip=tuple(t.W_skip for t in ts),
            activation=tuple(t.activation for t in ts),
            threshold=tuple(t.threshold for t in ts),
            k=tuple(t.k for t in ts),
            context_lengths=tuple(t.context_length for t in ts),
        )

    # ------------------------------------------------------------------------------------------ shape

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def d_model(self) -> int:
        return int(self.W_enc[0].shape[1])

    @property
    def context_length(self) -> Optional[int]:
        """The shortest sequence length the set's encoders were trained on (None: unknown)."""
        known = [c for c in self.context_lengths if c is not None]
        return min(known) if known else None

    def encoder(self, l: int) -> Transcoder:
        """Layer l's encoding as a one-layer :class:`Transcoder`: its encoder, its own layer's decoder W_dec[l → l],
        b_dec[l] and skip — what the analyses read layer l's features with, beside the set, which holds the writes
        to later layers of a cross-layer set (:meth:`writes`)."""
        i = self.index(l)
        return Transcoder(
            self.W_enc[i],
            self.b_enc[i],
            self.W_dec[i][:, 0],
            self.b_dec[i],
            W_skip=self.W_skip[i],
            activation=self.activation[i],
            threshold=self.threshold[i],
            k=self.k[i],
            context_length=self.context_lengths[i],
            layer=int(l),
        )

    def n_features(self, l: int) -> int:
        """F of model layer l's encoder."""
        return int(self.W_enc[self.index(l)].shape[0])

    def index(self, l: int) -> int:
        """The position of model layer ``l`` in the set (an :class:`ArgumentError` where it has no encoder)."""
        if not is_int(l) or l not in self.layers:
            raise ArgumentError(f"layer={l!r} has no encoder in this set; its layers are {list(self.layers)}")
        return self.layers.index(int(l))

    def targets(self, l: int) -> tuple[int, ...]:
        """The model layers whose MLP outputs layer l's features write to (l itself first)."""
        i = self.index(l)
        return self.layers[i : i + int(self.W_dec[i].shape[1])]

    # ------------------------------------------------------------------------------------------ maths

    def pre_activation(self, l: int, x: Tensor) -> Tensor:
        """x W_enc[l]ᵀ + b_enc[l] of layer l's MLP input x [..., d] → [..., F]."""
        i = self.index(l)
        return x @ self.W_enc[i].T + self.b_enc[i]

    def activate(self, l: int, pre: Tensor) -> Tensor:
        """Layer l's feature activations from its pre-activations."""
        i = self.index(l)
        return activate(pre, self.activation[i], self.threshold[i], self.k[i])

    def encode(self, l: int, x: Tensor) -> Tensor:
        """f_l = act(x W_enc[l]ᵀ + b_enc[l]) of layer l's MLP input x."""
        return self.activate(l, self.pre_activation(l, x))

    def writers(self, l: int) -> tuple[int, ...]:
        """The model layers of the set whose features write to layer l's MLP output (ascending; l itself last)."""
        self.index(l)
        return tuple(k for k in self.layers if k <= l and l in self.targets(k))

    def decoder(self, l: int, target: int) -> Tensor:
        """W_dec[l → target] [F, d]: where layer l's features write in the output of layer ``target``."""
        t = self.targets(l)
        if target not in t:
            raise ArgumentError(f"target={target!r}: layer {l}'s features write to layers {list(t)}")
        return self.W_dec[self.index(l)][:, t.index(target)]

    def writes(self, l: int, features: Tensor) -> list[tuple[int, Tensor]]:
        """Where layer l's ``features`` (ids [n]) write per unit activation: [(model layer, decoder rows [n, d])], its
        own layer's output first, then each later one it writes to."""
        i = self.index(l)
        return [(j, self.W_dec[i][features, t]) for t, j in enumerate(self.targets(l))]

    def skip(self, l: int, x: Tensor) -> Tensor:
        """The skip term x W_skip[l]ᵀ of layer l's output (zeros without W_skip)."""
        w = self.W_skip[self.index(l)]
        return torch.zeros_like(x) if w is None else x @ w.T

    def decode(self, fs: Sequence[Tensor], xs: Optional[Sequence[Tensor]] = None) -> list[Tensor]:
        """ŷ_j = Σ_i f_i W_dec[i → j] + b_dec[j] (+ x_j W_skip[j]ᵀ) for every layer j of the set, from the
        features ``fs[i]`` [..., F_i] of each encoder (in the set's order) and, where the set has skip weights,
        the MLP inputs ``xs[i]`` [..., d]."""
        if len(fs) != self.n_layers:
            raise ShapeError(f"decode takes the features of all {self.n_layers} layers of the set, got {len(fs)}")
        out = [self.b_dec[j].expand(*fs[j].shape[:-1], self.d_model).clone() for j in range(self.n_layers)]
        for i, f in enumerate(fs):
            F_, m, d = self.W_dec[i].shape
            w = (f @ self.W_dec[i].reshape(F_, m * d)).unflatten(-1, (m, d))
            for t in range(m):
                out[i + t] += w[..., t, :]
        for j, w_skip in enumerate(self.W_skip):
            if w_skip is not None:
                if xs is None:
                    raise ArgumentError("this set has W_skip: decode(fs, xs) needs the MLP inputs xs")
                out[j] = out[j] + xs[j] @ w_skip.T
        return out

    # ------------------------------------------------------------------------------------------ placement, checks

    def to(self, *args: Any, **kwargs: Any) -> "DictionarySet":
        """A copy with every tensor moved and cast, as ``torch.nn.Module.to`` reads its arguments."""
        device, dtype = placement(args, kwargs)

        def mv(ts: tuple[Optional[Tensor], ...]) -> tuple[Any, ...]:
            return tuple(None if t is None else t.to(device=device, dtype=dtype) for t in ts)

        return replace(
            self,
            W_enc=mv(self.W_enc),
            b_enc=mv(self.b_enc),
            W_dec=mv(self.W_dec),
            b_dec=mv(self.b_dec),
            W_skip=mv(self.W_skip),
            threshold=mv(self.threshold),
        )

    def check(self, model: Any, *, whole: bool = False, name: str = "transcoders") -> "DictionarySet":
        """The set fits ``model``: its layers are the model's and its d_model the model's (else a
        :class:`ShapeError` naming both); ``whole=True`` (a replacement model) also needs an encoder at every layer
        (an :class:`ArgumentError` naming the missing ones). Returns the set."""
        a = model.arch
        bad = [l for l in self.layers if l >= a.n_layers]
        if bad or self.d_model != a.d_model:
            raise ShapeError(
                f"{name} ({self!r}) is not a dictionary set of model {model.name!r} ({a.n_layers} layers, "
                f"d_model={a.d_model})"
            )
        missing = [l for l in range(a.n_layers) if l not in self.layers]
        if whole and missing:
            raise ArgumentError(
                f"{name} has encoders at layers {list(self.layers)}; model {model.name!r} has {a.n_layers} layers and "
                f"the replacement model needs one at each: layers {missing} are missing"
            )
        return self

    def __repr__(self) -> str:
        cross = any(w.shape[1] > 1 for w in self.W_dec)
        widths = sorted({int(w.shape[0]) for w in self.W_enc})
        return (
            f"DictionarySet({'cross-layer' if cross else 'per-layer'}, layers {list(self.layers)}, "
            f"{'/'.join(map(str, widths))} features, d_model {self.d_model})"
        )


def replacement_set(model: Any, transcoders: Any) -> DictionarySet:
    """The set that replaces every MLP of ``model``: a list of :class:`Transcoder` of the model's width, one per layer
    in layer order, or a :class:`CrossLayerTranscoder` / :class:`DictionarySet` with an encoder at each of the
    model's layers; anything else an :class:`ArgumentError` naming what is wrong. The one check of the dictionaries
    every analysis over the replacement model takes."""
    a = model.arch
    if isinstance(transcoders, (CrossLayerTranscoder, DictionarySet)):
        s = DictionarySet.of(transcoders)
        if s.layers != tuple(range(a.n_layers)) or s.d_model != a.d_model:
            raise ArgumentError(
                f"transcoders is a {transcoders!r}; model {model.name!r} needs an encoder at each of its "
                f"{a.n_layers} layers 0..{a.n_layers - 1} with d_model={a.d_model}"
            )
        return s
    if not isinstance(transcoders, (list, tuple)):
        raise ArgumentError(
            "transcoders must be a list of interp.features.Transcoder, one per layer, or an "
            "interp.features.CrossLayerTranscoder"
        )
    for i, t in enumerate(transcoders):
        check_transcoder(f"transcoders[{i}]", t)
    if len(transcoders) != a.n_layers:
        have = [t.layer for t in transcoders]
        missing = [l for l in range(a.n_layers) if l not in have] if None not in have else None
        raise ArgumentError(
            f"transcoders has {len(transcoders)} entries; model {model.name!r} has {a.n_layers} layers"
            + (f" and the replacement model needs one at each: layers {missing} are missing" if missing else "")
        )
    check_layers(transcoders)
    for l, t in enumerate(transcoders):
        if t.d_model != a.d_model:
            raise ArgumentError(f"transcoders[{l}] has d_model={t.d_model}; the model's is {a.d_model}")
    return DictionarySet.of(list(transcoders))


def check_transcoder(name: str, t: Any) -> None:
    """``t`` is a :class:`Transcoder`, else an :class:`~interp.errors.ArgumentError` naming ``name``; an SAE (which
    reconstructs a point of the residual stream, not an MLP's write) is refused saying what to load instead. The
    one check of every analysis that replaces or intervenes on MLP writes."""
    if isinstance(t, SAE):
        raise ArgumentError(
            f"{name} is an SAE of the residual stream ({t.hook_name}); the replacement model and feature "
            "interventions replace MLP writes, so each needs transcoders (MLP input → MLP output): "
            "interp.features.load_transcoders or train_transcoders"
        )
    if not isinstance(t, Transcoder):
        raise ArgumentError(f"{name} is a {type(t).__name__}, not an interp.features.Transcoder")
