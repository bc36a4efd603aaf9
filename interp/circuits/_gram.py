"""Frobenius norms of many low-rank products at once, through packed Gram matrices.

For thin factors, ‖X Y‖_F² = tr(Yᵀ Xᵀ X Y) = ⟨XᵀX, Y Yᵀ⟩  (DESIGN.md "Math" 8), an inner product
of two symmetric d_model × d_model matrices. Packing each symmetric matrix into its upper
triangle (off-diagonal entries counted twice on one side) turns *all* pairwise norms into one
[n_left, F] × [F, n_right] matrix product, F = d_model (d_model + 1) / 2, instead of one
d_head × d_model × d_head product per pair: for d_model = 576, d_head = 64 that is 0.33 MFLOP
per pair instead of 4.7. Low-rank factors are first reduced to d_head-sized ones with a QR
decomposition: for OV = W_V W_O with W_V = Q R, ‖W_V W_O Y‖ = ‖R W_O Y‖ (Q has orthonormal columns).
"""

from __future__ import annotations

from typing import Iterator

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["qr_r", "packed_gram_left", "packed_gram_right", "triu_index", "chunks"]


def chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def triu_index(d: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Flat indices of the upper triangle of a d×d matrix and the weight (1 diag, 2 off-diag)."""
    r, c = torch.triu_indices(d, d, device=device)
    return r * d + c, torch.where(r == c, 1.0, 2.0)


def qr_r(A: Float[Tensor, "n d k"]) -> Float[Tensor, "n k k"]:
    """The R factor of A = Q R (so AᵀA = RᵀR); A has more rows than columns."""
    return torch.linalg.qr(A, mode="r").R


def _pack(G: Tensor, idx: Tensor, weight: Tensor | None) -> Tensor:
    flat = G.reshape(G.shape[0], -1)[:, idx]  # [n, F]
    return flat if weight is None else flat * weight.to(flat.dtype)


def packed_gram_left(B: Float[Tensor, "n k d"], *, weighted: bool, chunk: int = 32) -> Float[Tensor, "n F"]:
    """Packed BᵀB [n, F] for row factors B [n, k, d] (the left factor's side of ⟨BᵀB, ·⟩)."""
    n, _, d = B.shape
    idx, w = triu_index(d, B.device)
    out = torch.empty(n, idx.shape[0], dtype=B.dtype, device=B.device)
    for sl in chunks(n, chunk):
        G = B[sl].transpose(-2, -1) @ B[sl]  # [c, d, d]
        out[sl] = _pack(G, idx, w if weighted else None)
    return out


def packed_gram_right(A: Float[Tensor, "n d k"], *, weighted: bool, chunk: int = 32) -> Float[Tensor, "n F"]:
    """Packed A Aᵀ [n, F] for column factors A [n, d, k]."""
    return packed_gram_left(A.transpose(-2, -1), weighted=weighted, chunk=chunk)
