"""Circuit: transformer-lens's ``FactoredMatrix`` with a label, a note and a memory cap on ``.AB``.

A circuit such as W_OV = W_V W_O ([d_model, d_model], rank ≤ d_head) or the full OV circuit
W_E W_V W_O W_U ([d_vocab, d_vocab]) is kept as its two thin factors A [.., ldim, mdim] and
B [.., mdim, rdim]; everything useful (norm, SVD, eigenvalues via BA, products with vectors)
is computed from them (Framework paper, "Virtual weights and low rank", and docs/math.md §11).

``Circuit`` subclasses ``transformer_lens.FactoredMatrix`` so every FactoredMatrix method works
(``.A .B .BA .T .svd() .eigenvalues .norm() @``); what it adds:

* ``label`` (what the circuit is, e.g. ``"L3.H5 OV"``), ``convention`` (folded or raw weights),
  ``note`` (caveats — for a rotary model's QK circuit without ``rel_pos``: that QK ignores
  position). These are plain attributes; products and transposes return ordinary
  FactoredMatrix objects without them.
* ``.AB`` refuses to build a dense product larger than ``max_bytes`` (default 1 GiB) with a
  :class:`~interp.errors.MemoryCapError` that names the size and the chunked alternatives;
  ``.materialize(max_bytes=...)`` raises the cap for one call.
"""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens import FactoredMatrix

from interp.circuits._common import DEFAULT_MAX_BYTES, check_max_bytes, refuse_materialise

__all__ = ["Circuit", "POSITION_NOTE"]

#: The note a rotary model's QK circuit carries when no ``rel_pos`` was given.
POSITION_NOTE = (
    "QK ignores position: this model is rotary (RoPE), so its real attention score between a query "
    "and a key depends on their distance; this circuit is the Δ = 0 (no rotation) bilinear form. "
    "Pass rel_pos=Δ for the circuit of a query/key pair Δ positions apart."
)


class Circuit(FactoredMatrix):
    """A labelled, memory-capped FactoredMatrix (see module docstring)."""

    def __init__(
        self,
        A: torch.Tensor,
        B: torch.Tensor,
        *,
        label: str = "",
        note: str = "",
        convention: str = "",
        max_bytes: int = DEFAULT_MAX_BYTES,
        **meta: Any,
    ):
        super().__init__(A, B)
        self.label = label
        self.note = note
        self.convention = convention
        self.max_bytes = check_max_bytes(max_bytes)
        self.meta = dict(meta)

    @property
    def AB(self) -> torch.Tensor:
        """The dense product A @ B, refused past ``max_bytes`` (MemoryCapError)."""
        refuse_materialise(
            f"circuit {self.label or 'product'} (.AB)",
            tuple(self.shape),
            self.A.dtype,
            self.max_bytes,
            "keep it factored (.A, .B, .BA, .svd(), .eigenvalues, .norm(), circuit @ vector), use a chunked "
            "statistic such as interp.circuits.ov_diagonal_stats, or call .materialize(max_bytes=...) to raise the cap",
        )
        return self.A @ self.B

    def materialize(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> torch.Tensor:
        """The dense product, with an explicit memory cap in bytes."""
        refuse_materialise(
            f"circuit {self.label or 'product'}",
            tuple(self.shape),
            self.A.dtype,
            check_max_bytes(max_bytes),
            "keep it factored or use a chunked statistic (interp.circuits.ov_diagonal_stats)",
        )
        return self.A @ self.B

    def __repr__(self) -> str:
        extra = f", note={self.note[:40]!r}…" if self.note else ""
        return f"Circuit({self.label!r}: shape {tuple(self.shape)}, hidden dim {self.mdim}{extra})"
