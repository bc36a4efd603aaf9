"""What a feature intervention is — set (clamp) or scale one transcoder feature, at one position or every one —
and the validation every entry point that takes interventions shares (:func:`interp.features.intervene`,
:func:`interp.features.generate`): typed errors naming the item, its value and what is allowed; no two on one
feature at one position."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._validate import check_finite_float, is_int
from interp.dictionaries import DictionarySet
from interp.errors import ArgumentError, LabelError
from interp.labels import Feature, parse

__all__ = ["MODES", "Intervention", "check_overlap"]


MODES = ("set", "scale")


@dataclass(frozen=True)
class Intervention:
    """Set (``mode="set"``) or multiply (``mode="scale"``) the activation of feature ``feature`` of layer
    ``layer``'s transcoder at position ``pos`` by ``value``. ``pos`` is always said: a position (negative counts back
    from the end) or None for every position. Build one with :meth:`clamp`, :meth:`scale` or :meth:`ablate` from a
    label (``"L3.F12@5"``, ``"L3.F12@*"``) or a tuple (layer, feature, pos)."""

    layer: int
    feature: int
    pos: Optional[int]
    mode: Literal["set", "scale"] = "set"
    value: float = 0.0

    @classmethod
    def clamp(cls, feature: Union[Feature, str, tuple], value: float) -> "Intervention":
        """Set the feature's activation to ``value``."""
        l, f, p = _feature(feature)
        return cls(l, f, p, "set", value)

    @classmethod
    def scale(cls, feature: Union[Feature, str, tuple], factor: float) -> "Intervention":
        """Multiply the feature's activation by ``factor``."""
        l, f, p = _feature(feature)
        return cls(l, f, p, "scale", factor)

    @classmethod
    def ablate(cls, feature: Union[Feature, str, tuple]) -> "Intervention":
        """Set the feature's activation to 0."""
        l, f, p = _feature(feature)
        return cls(l, f, p, "set", 0.0)

    def __str__(self) -> str:
        at = "@*" if self.pos is None else f"@{self.pos}"
        what = f"= {self.value:g}" if self.mode == "set" else f"× {self.value:g}"
        return f"L{self.layer}.F{self.feature}{at} {what}"


def _feature(x: Any) -> tuple[int, int, Optional[int]]:
    """(layer, feature, pos) from a Feature label, its text, or a tuple (layer, feature, pos) — the position always
    said (None: every position), as a label always says it."""
    if isinstance(x, str):
        try:
            lab = parse(x)
        except LabelError as e:
            raise ArgumentError(f"feature={x!r}: {e}") from None
        if not isinstance(lab, Feature):
            raise ArgumentError(
                f"feature={x!r} is not a feature label: 'L3.F12@5' (position 5) or 'L3.F12@*' (every position)"
            )
        x = lab
    if isinstance(x, Feature):
        return x.layer, x.feature, x.pos
    if isinstance(x, tuple) and len(x) == 2 and is_int(x[0]) and is_int(x[1]):
        l, f = int(x[0]), int(x[1])
        raise ArgumentError(
            f"feature={x!r} has no position (as the label 'L{l}.F{f}' has none): give ({l}, {f}, 5) for position 5, "
            f"({l}, {f}, -1) for the last, or ({l}, {f}, None) — 'L{l}.F{f}@*' — for every position"
        )
    if isinstance(x, tuple) and len(x) == 3 and is_int(x[0]) and is_int(x[1]) and (x[2] is None or is_int(x[2])):
        return int(x[0]), int(x[1]), None if x[2] is None else int(x[2])
    raise ArgumentError(
        f"feature={_describe(x)} must be a Feature label, its text ('L3.F12@5', or 'L3.F12@*' for every "
        "position) or (layer, feature, pos) (pos None: every position)"
    )


def _describe(x: Any) -> str:
    """``x`` for a message: a tensor as its shape and norm (never its values), a dataclass field by field, anything
    else its repr cut at 80 characters."""
    if isinstance(x, Tensor):
        norm = f", norm {float(x.detach().double().norm()):.4g}" if x.is_floating_point() and x.numel() else ""
        return f"<tensor of shape {list(x.shape)}, {x.dtype}{norm}>"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        inner = ", ".join(f"{f.name}={_describe(getattr(x, f.name))}" for f in dataclasses.fields(x))
        return f"{type(x).__name__}({inner})"
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _value(name: str, v: Any) -> float:
    """An intervention's value or factor as a float: a finite Python or numpy number or a one-element real tensor."""
    if isinstance(v, Tensor):
        if v.numel() != 1 or v.is_complex() or v.dtype == torch.bool:
            raise ArgumentError(
                f"{name}={_describe(v)} must be one finite real number (a float, or a tensor of one element)"
            )
        v = v.item()
    return check_finite_float(name, v)


def _interventions(
    items: Any, transcoders: Optional[DictionarySet], n: int, n_layers: Optional[int] = None
) -> list[Intervention]:
    """Validated interventions, positions made non-negative (typed errors name the item, the value and what is
    allowed), no two on one feature at one position. ``n_layers``: the model's layers (default: the set's, which
    then covers them all); a layer of the model without an encoder in ``transcoders`` (None: no set) is refused.
    An item is an :class:`Intervention`, a tuple (layer, pos,
    feature, value) (circuit-tracer's order: clamp), or a feature label / its text (ablate)."""
    if (
        isinstance(items, (Intervention, Feature, str))
        or _steer_like(items)
        or (isinstance(items, tuple) and len(items) == 4 and is_int(items[0]))
    ):
        items = [items]
    if not isinstance(items, (list, tuple)) or not items:
        raise ArgumentError(
            f"interventions={_describe(items)} must be a non-empty list of Intervention, (layer, pos, feature, "
            "value) tuples or feature labels"
        )
    L = n_layers if n_layers is not None else (transcoders.n_layers if transcoders is not None else 0)
    out = [_intervention(f"interventions[{i}]", it, transcoders, n, L) for i, it in enumerate(items)]
    check_overlap(out, [f"interventions[{i}]" for i in range(len(out))])
    return out


def _intervention(name: str, it: Any, transcoders: Optional[DictionarySet], n: int, L: int) -> Intervention:
    """One item of ``interventions`` validated (:func:`_interventions`), its position in [0, n) (None: every)."""
    if isinstance(it, (Feature, str)):
        it = Intervention.ablate(it)
    elif isinstance(it, tuple) and len(it) == 4:
        l, p, f, v = it
        if not (is_int(l) and is_int(f) and (p is None or is_int(p))):
            raise ArgumentError(
                f"{name}={_describe(it)}: a tuple is (layer: int, pos: int | None, feature: int, value)"
            )
        it = Intervention(l, f, p, "set", v)
    elif not isinstance(it, Intervention):
        raise ArgumentError(
            f"{name}={_describe(it)} must be an Intervention, a (layer, pos, feature, value) tuple or a feature "
            "label such as 'L3.F12@5'"
            + (
                "; steering vectors (Steer) act in interp.features.generate, not in intervene"
                if _steer_like(it)
                else ""
            )
        )
    if it.mode not in MODES:
        raise ArgumentError(f"{name}: mode={it.mode!r} is not one of {MODES}")
    if not is_int(it.layer) or not 0 <= it.layer < L:
        raise ArgumentError(f"{name}: layer={it.layer!r} must be an int in [0, {L - 1}] (one transcoder per layer)")
    if transcoders is None or it.layer not in transcoders.layers:
        raise ArgumentError(
            f"{name}: layer={it.layer!r} has no transcoder: the transcoders given are those of "
            f"layers {[] if transcoders is None else list(transcoders.layers)}"
        )
    F_ = transcoders.n_features(it.layer)
    if not is_int(it.feature) or not 0 <= it.feature < F_:
        raise ArgumentError(
            f"{name}: feature {it.feature!r} of layer {it.layer} does not exist: its transcoder has "
            f"n_features={F_} (indices 0..{F_ - 1})"
        )
    if it.pos is not None and (not is_int(it.pos) or not -n <= it.pos < n):
        raise ArgumentError(
            f"{name}: pos={it.pos!r} must be None (every position) or an int in [{-n}, {n - 1}] "
            f"for a prompt of {n} tokens"
        )
    value = _value(f"{name}: value", it.value)
    at = None if it.pos is None else int(it.pos) % n
    return Intervention(int(it.layer), int(it.feature), at, it.mode, value)


def _steer_like(x: Any) -> bool:
    """A steering vector (:class:`interp.features.Steer`, which :func:`intervene` does not take)."""
    return hasattr(x, "vector") and hasattr(x, "alpha") and hasattr(x, "site")


def check_overlap(ivs: Sequence[Intervention], names: Sequence[str]) -> None:
    """Refuse two interventions on one feature at one position — the same position, or one of them at every position
    (``pos`` None) — since only one value can hold there: an :class:`ArgumentError` naming both."""
    seen: dict[tuple[int, int], list[int]] = {}
    for j, it in enumerate(ivs):
        for i in seen.get((it.layer, it.feature), []):
            other = ivs[i]
            if other.pos is None or it.pos is None or other.pos == it.pos:
                where = (
                    "every position"
                    if other.pos is None and it.pos is None
                    else (f"position {it.pos if other.pos is None else other.pos}")
                )
                raise ArgumentError(
                    f"{names[i]} ({other}) and {names[j]} ({it}) both act on feature {it.feature} of layer "
                    f"{it.layer} at {where}: one value can hold there. Keep one, or give the other positions one "
                    "by one"
                )
        seen.setdefault((it.layer, it.feature), []).append(j)


def _apply(f: Tensor, ivs: list[Intervention]) -> Tensor:
    """Activations f [n, F] of one layer with its interventions applied (in order)."""
    if not ivs:
        return f
    f = f.clone()
    for it in ivs:
        idx = (slice(None) if it.pos is None else it.pos, it.feature)
        f[idx] = it.value if it.mode == "set" else f[idx] * it.value
    return f
