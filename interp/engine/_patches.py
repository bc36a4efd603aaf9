"""Patches: what a forward may replace (or shift) at its patch points, a variant run's patches, and how they
are written into a batch's rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
from torch import Tensor

__all__ = ["HEADED_SITES", "MLPWrite", "Patch", "SITES", "Variant", "apply_patches", "merge_patches"]

#: The activations a patch can replace (or, with ``add``, shift).
SITES = (
    "embed.token",
    "embed.pos",
    "embed.type",
    "resid_pre",
    "q",
    "k",
    "v",
    "q_in",
    "k_in",
    "v_in",
    "pattern",
    "z",
    "attn_out",
    "resid_mid",
    "mlp_in",
    "mlp_out",
    "resid_post",
    "final",
)
#: The sites that carry a head axis (a patch of one needs ``head``).
HEADED_SITES = ("q", "k", "v", "q_in", "k_in", "v_in", "pattern", "z")


@dataclass
class Patch:
    """Replace (or with ``add``, shift) ``site`` of layer ``layer`` for some rows of the batch.

    ``rows`` [n] index the rows; ``head`` [n] the head (query head for q/z/pattern, KV head for k/v)
    or None; ``pos`` [n] one absolute position per row, or None for every position; ``value`` the
    new values: [n, T, ...] (all positions; T = the rows' suffix length) or [n, ...] (one position).
    For ``q_in``/``k_in``/``v_in``/``mlp_in`` (``add`` only) ``value`` is a residual-stream shift
    [n, T, d_model] seen by that one reader only (path patching).
    """

    site: str
    layer: int
    rows: Tensor
    value: Tensor
    head: Optional[Tensor] = None
    pos: Optional[Tensor] = None
    add: bool = False


@dataclass
class MLPWrite:
    """Replace (or with ``add``, shift) layer ``layer``'s MLP write ``mlp_out`` for rows ``rows`` [n] by a function of
    what the MLP read in this run: ``write(h)`` [n, T, d_model] of its input h [n, T, d_model] (after its read norm),
    or None to leave the rows as they are. A replacement MLP (a transcoder's reconstruction, an intervened feature's
    change) in one pass of the layer: the input is this run's, not a base run's."""

    layer: int
    rows: Tensor
    write: Callable[[Tensor], Optional[Tensor]]
    add: bool = False

    site: ClassVar[str] = "mlp_out"

    def patch(self, h: Tensor) -> Optional[Patch]:
        """The :class:`Patch` of this write given the MLP's input h [R, T, d] of the batch's rows."""
        value = self.write(h[self.rows])
        return None if value is None else Patch("mlp_out", self.layer, self.rows, value, add=self.add)


def apply_patches(
    t: Tensor,
    patches: Optional[list[Patch]],
    t0: int,
    *,
    headed: bool = False,
    pattern: bool = False,
    inplace: bool = False,
) -> Tensor:
    """``t`` [R, T, ...] with each patch written into its rows (a copy if anything changes, unless ``inplace``)."""
    if not patches:
        return t
    t = t if inplace else t.clone()
    for p in patches:
        if headed and p.head is None:
            raise RuntimeError(f"patch of {p.site} needs heads")
        idx: tuple[Any, ...]
        if pattern:  # [R, H, T(query), N]
            idx = (p.rows, p.head) if p.pos is None else (p.rows, p.head, p.pos - t0)
        elif headed:  # [R, T, heads, dh]
            idx = (p.rows, slice(None), p.head) if p.pos is None else (p.rows, p.pos - t0, p.head)
        else:  # [R, T, d]
            idx = (p.rows,) if p.pos is None else (p.rows, p.pos - t0)
        if p.add:
            t[idx] = t[idx] + p.value.to(t.dtype)
        else:
            t[idx] = p.value.to(t.dtype)
    return t


@dataclass
class Variant:
    """One patched run: ``make(row, t0)`` gives its patches once it joins the batch at ``layer``
    (−1: at the embedding) as row ``row``; ``t0`` is the first position it carries."""

    layer: int
    prompt: int
    t0: int
    make: Callable[[int, int], list[Patch]]

    def patches(self, row: int, t0: int) -> list[Patch]:
        return self.make(row, t0)


def merge_patches(patches: list[Patch]) -> list[Patch]:
    """Merge single-row patches of the same kind into one batched patch per (site, layer, mode)."""
    groups: dict[tuple, list[Patch]] = {}
    for p in patches:
        key = (p.site, p.layer, p.add, p.head is None, p.pos is None, tuple(p.value.shape[1:]))
        groups.setdefault(key, []).append(p)
    out = []
    for (site, layer, add, _, _, _), ps in groups.items():
        out.append(
            Patch(
                site=site,
                layer=layer,
                add=add,
                rows=torch.cat([p.rows for p in ps]),
                value=torch.cat([p.value for p in ps]),
                head=None if ps[0].head is None else torch.cat([p.head for p in ps if p.head is not None]),
                pos=None if ps[0].pos is None else torch.cat([p.pos for p in ps if p.pos is not None]),
            )
        )
    return out
