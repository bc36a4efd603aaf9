"""Frobenius norms of many low-rank products at once, through packed Gram matrices.

For thin factors, ‖X Y‖_F² = tr(Yᵀ Xᵀ X Y) = ⟨XᵀX, Y Yᵀ⟩  (docs/math.md §11), an inner product
of two symmetric d_model × d_model matrices. Packing each
symmetric matrix into its upper block-triangle (entries off the diagonal blocks counted twice on
one side) turns *all* pairwise norms into one [n_left, F] × [F, n_right] matrix product,
F ≈ d_model²/2, instead of one d_head × d_model × d_head product per pair: for d_model = 576,
d_head = 64 that is 0.37 MFLOP per pair instead of 4.7. Low-rank factors are first reduced to
d_head-sized ones: for OV = W_V W_O and any R with RᵀR = W_VᵀW_V (a QR's R, or Λ^{1/2}Vᵀ from
the d_head × d_head Gram matrix), ‖W_V W_O Y‖ = ‖R W_O Y‖.
"""

from __future__ import annotations

from typing import Iterator

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["gram_r", "packed_gram_left", "packed_gram_right", "pack_symmetric", "chunks"]

_BLOCK = 64


def chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def gram_r(A: Float[Tensor, "n d k"]) -> Float[Tensor, "n k k"]:
    """A k×k factor R with RᵀR = AᵀA (so ‖A X‖_F = ‖R X‖_F for any X), for tall A [n, d, k].

    From the k×k Gram matrix in float64: R = Lᵀ of its Cholesky factor (much faster than a
    batched QR of the tall matrices on CPU); rank-deficient Grams, where Cholesky fails, fall
    back to R = Λ^{1/2} Vᵀ from their eigendecomposition."""
    G = A.transpose(-2, -1).double() @ A.double()  # [n, k, k]
    L, info = torch.linalg.cholesky_ex(G)
    R = L.transpose(-2, -1)
    bad = info != 0
    if bool(bad.any()):
        lam, V = torch.linalg.eigh(G[bad])
        R[bad] = lam.clamp_min(0).sqrt()[..., :, None] * V.transpose(-2, -1)
    return R.to(A.dtype)


def _blocks(d: int) -> list[tuple[int, int]]:
    return [(s, min(d, s + _BLOCK)) for s in range(0, d, _BLOCK)]


def packed_size(d: int) -> int:
    return sum((e - s) * (d - s) for s, e in _blocks(d))


def packed_gram_left(B: Float[Tensor, "n k d"], *, weighted: bool) -> Float[Tensor, "n F"]:
    """Packed BᵀB [n, F] for row factors B [n, k, d].

    Layout: the upper block-triangle of the symmetric d×d Gram matrix in row blocks of 64
    (block row [s:e] keeps columns s:d), F = Σ (e−s)(d−s) ≈ d²/2. With ``weighted`` the
    entries right of each diagonal block are doubled (they stand for their mirror image too), so
    ⟨X, Z⟩ = packed(X, weighted=False) · packed(Z, weighted=True)."""
    n, _, d = B.shape
    out = torch.empty(n, packed_size(d), dtype=B.dtype, device=B.device)
    off = 0
    for s, e in _blocks(d):
        G = B[:, :, s:e].transpose(-2, -1) @ B[:, :, s:]  # [n, e−s, d−s], one block row
        if weighted:
            G[:, :, e - s :] *= 2
        size = (e - s) * (d - s)
        out[:, off : off + size] = G.reshape(n, size)
        off += size
    return out


def packed_gram_right(A: Float[Tensor, "n d k"], *, weighted: bool) -> Float[Tensor, "n F"]:
    """Packed A Aᵀ [n, F] for column factors A [n, d, k] (same layout as packed_gram_left)."""
    return packed_gram_left(A.transpose(-2, -1), weighted=weighted)


def pack_symmetric(S: Float[Tensor, "n d d"], *, weighted: bool) -> Float[Tensor, "n F"]:
    """A symmetric S [n, d, d] in the packed layout of :func:`packed_gram_left`."""
    n, d, _ = S.shape
    parts = []
    for s, e in _blocks(d):
        G = S[:, s:e, s:].clone()
        if weighted:
            G[:, :, e - s :] *= 2
        parts.append(G.reshape(n, -1))
    return torch.cat(parts, dim=1)
