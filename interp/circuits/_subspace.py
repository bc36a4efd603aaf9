"""Residual-stream bandwidth: how heads' write subspaces overlap, and who erases whom.

Elhage et al. 2021 §"Subspaces and residual
stream bandwidth" and "memory management". Each head writes into the d_head-dimensional row space
of its W_O^h (row convention) — a small subspace of the d_model-dimensional stream.

1. Overlap. With U_h [d_model, r_h] an orthonormal basis of head h's write subspace,

       overlap(h₁, h₂) = ‖U₁ᵀ U₂‖_F² / min(r₁, r₂) = mean cos² of the principal angles  ∈ [0, 1]

   (1: one subspace contains the other; 0: orthogonal). Two random d_head-dimensional subspaces
   of R^d_model overlap by d_head / d_model on average (``baseline``). All pairs come from one
   packed-Gram product ⟨U₁U₁ᵀ, U₂U₂ᵀ⟩ (:mod:`._gram`).

2. Erasure ("memory management"). A later head d erases what an earlier write s put in the stream
   if its OV map sends s's directions back onto their negatives. With U_s [d_model, k] the top-k
   right singular directions of s's write matrix (all of a head's write subspace for k = d_head;
   the principal ones of an MLP's W_out or of W_E), the restricted map and its symmetric part

       E = U_sᵀ W_V^d W_O^d U_s   [k, k],     S = (E + Eᵀ)/2

   say how a unit write along s's subspace comes back: ``mean_gain`` = tr(E)/k (< 0: on average
   erased), ``max_eig`` = λ_max(S) (< 0: *every* direction is erased: S negative-definite).
   tr(E) for all pairs is one packed-Gram product (⟨sym(W_V W_O), U_s U_sᵀ⟩); the eigenvalues are
   computed exactly for the ``screen`` most negative pairs. Gains are with the reader's norm
   scale frozen at 1 (the real gain is divided by the norm's σ at that token); weights use the
   folding convention of :mod:`interp.circuits._common`. Only heads are destinations (an MLP's
   nonlinearity has no fixed linear map to test for negative-definiteness).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool, check_positive_int
from interp.circuits._common import check_model, convention, fold_write, folded_qkv, post_gain
from interp.circuits._gram import chunks, pack_symmetric, packed_gram_left
from interp.circuits._labels import parse_write, write_labels, write_matrix
from interp.errors import LabelError
from interp.labels import ARROW, Head, HeadInput, as_label
from interp.models.internal import program_position

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model

__all__ = ["SubspaceOverlap", "ErasureTable", "write_subspace_overlap", "erasure_candidates"]


def _row_bases(M: Tensor, rtol: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Orthonormal bases U [n, d, r] of the row spaces of M [n, r, d] (r ≤ d), zero-padded past each
    rank, and the ranks [n]. Any orthonormal basis will do (overlaps, traces and eigenvalues of
    UᵀXU do not depend on the choice): U = Mᵀ L⁻ᵀ with M Mᵀ = L Lᵀ (batched Cholesky, fast on CPU),
    with a thin SVD for the rank-deficient or ill-conditioned ones."""
    M = M.double()
    n, r, _ = M.shape
    L, info = torch.linalg.cholesky_ex(M @ M.transpose(-2, -1))  # [n, r, r]
    dL = torch.diagonal(L, dim1=-2, dim2=-1).abs()
    good = (info == 0) & (dL.min(-1).values > rtol * dL.max(-1).values)
    U = torch.zeros(n, M.shape[2], r, dtype=torch.float64, device=M.device)
    ranks = torch.full((n,), r, dtype=torch.int64, device=M.device)
    if bool(good.any()):
        U[good] = torch.linalg.solve_triangular(L[good], M[good], upper=False).transpose(-2, -1)
    for i in (~good).nonzero().flatten().tolist():
        _, S, Vh = torch.linalg.svd(M[i], full_matrices=False)
        kk = int((S > rtol * S[0]).sum()) if S[0] > 0 else 0
        U[i, :, :kk] = Vh[:kk].T
        ranks[i] = kk
    return U, ranks


def _head_bases(model: Model, fold_norms: bool, rtol: float = 1e-6) -> tuple[Tensor, Tensor]:
    """(U [N, d, dh] orthonormal columns, zero-padded past each head's rank, ranks [N])."""
    a = model.arch
    pa = post_gain(model, "attn")
    W_O = fold_write(model, model.weights.W_O, fold_norms, None if pa is None else pa[:, None, None, :]).reshape(
        a.n_layers * a.n_heads, a.d_head, a.d_model
    )
    return _row_bases(W_O, rtol)


@dataclass(frozen=True, eq=False)
class SubspaceOverlap(Result):
    """``overlap`` [n_layers, n_heads, n_layers, n_heads]: mean cos² of the principal angles between
    two heads' write subspaces (symmetric, 1 on the diagonal); ``baseline`` = d_head / d_model.

    Contract (:class:`interp._result.Result`): rows are the unordered pairs of distinct heads,
    labelled ``a→b`` with a before b (``ov["L0.H1→L1.H2"]``, either order or a (a, b) tuple, is the
    overlap); ``to_dataframe()`` column ``pair``; ``top`` ranks by ``overlap``. ``fold_norms``:
    whether LayerNorm writes were centred (``convention`` says it in words)."""

    label_column: ClassVar[str] = "pair"
    default_by: ClassVar[str] = "overlap"

    overlap: Float[Tensor, "n_layers n_heads n_layers n_heads"] = field(repr=False)
    baseline: float
    convention: str = ""
    model_name: str = ""
    fold_norms: bool = True

    def _heads(self) -> list[str]:
        L, H = self.overlap.shape[:2]
        return [str(Head(l, h)) for l in range(L) for h in range(H)]

    @property
    def labels(self) -> list[str]:
        """``a→b`` for every pair of distinct heads, a before b (layer-major), in :meth:`to_dataframe` order."""
        lab = self._heads()
        i, j = torch.triu_indices(len(lab), len(lab), offset=1)
        return [f"{lab[a]}{ARROW}{lab[b]}" for a, b in zip(i.tolist(), j.tolist())]

    def _index(self, label: Any) -> int:
        """Flat index a × n + b into the [n_heads_total, n_heads_total] overlap matrix."""
        pair = tuple(label.split(ARROW, 1)) if isinstance(label, str) else label
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise LabelError(f"label={label!r} must be a head pair 'L0.H1{ARROW}L1.H2' or (a, b)")
        L, H = self.overlap.shape[:2]
        a, b = (as_label(x, Head, name="label") for x in pair)
        if not all(x.layer < L and x.head < H for x in (a, b)):
            raise LabelError(f"label={label!r} names a head outside {Head(0, 0)} … {Head(L - 1, H - 1)}")
        return (a.layer * H + a.head) * L * H + b.layer * H + b.head

    def _row(self, index: int) -> float:
        return float(self.overlap.reshape(-1)[index])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per unordered pair of distinct heads: pair ``a→b``, head_a, head_b, overlap, vs_baseline."""
        L, H = self.overlap.shape[:2]
        flat = self.overlap.reshape(L * H, L * H)
        i, j = torch.triu_indices(L * H, L * H, offset=1)
        v = flat[i, j].double().numpy()
        lab = self._heads()
        a, b = [lab[x] for x in i.tolist()], [lab[x] for x in j.tolist()]
        return pd.DataFrame(
            {
                "pair": [f"{x}{ARROW}{y}" for x, y in zip(a, b)],
                "head_a": a,
                "head_b": b,
                "overlap": v,
                "vs_baseline": v / self.baseline,
            }
        )

    def plot(self) -> go.Figure:
        """Heatmap of all pairs (a plotly Figure)."""
        from interp.plots import subspace_overlap_map  # plots reads the result's attributes; imported on use

        return subspace_overlap_map(self)

    def __repr__(self) -> str:
        return f"SubspaceOverlap(shape {tuple(self.overlap.shape)}, baseline {self.baseline:.3f})"


def write_subspace_overlap(model: Model, *, fold_norms: bool = True) -> SubspaceOverlap:
    """Principal-angle overlap between every pair of heads' write subspaces (row spaces of W_O^h)."""
    check_model(model)
    check_bool("fold_norms", fold_norms)
    a = model.arch
    U, r = _head_bases(model, fold_norms)
    Ut = U.transpose(-2, -1).float()  # [N, dh, d]
    sq = packed_gram_left(Ut, weighted=False) @ packed_gram_left(Ut, weighted=True).T  # ‖U_iᵀ U_j‖_F²
    ov = (sq.double() / torch.minimum(r[:, None], r[None, :]).clamp_min(1)).clamp(0, 1)
    return SubspaceOverlap(
        overlap=ov.float().reshape(a.n_layers, a.n_heads, a.n_layers, a.n_heads),
        baseline=a.d_head / a.d_model,
        convention=convention(model, fold_norms),
        model_name=model.name,
        fold_norms=fold_norms,
    )


@dataclass(frozen=True, eq=False)
class ErasureTable(Result):
    """Candidate (earlier write → later head) erasures, most negative ``mean_gain`` first.

    Columns: src, dst, mean_gain = tr(E)/k, max_eig / min_eig of the symmetric part S of
    E = U_sᵀ OV_d U_s, negative_definite (max_eig < 0).

    Contract (:class:`interp._result.Result`): rows are candidates labelled ``src→dst``
    (``t["L0.H1→L2.H3"]`` is that row as a dict); ``to_dataframe()`` column ``pair``; ``top()`` lists
    the strongest erasures: negative-definite ones first, then the most negative ``mean_gain``
    (``top(by=..., absolute=...)`` ranks by one column like every result). ``fold_norms``: whether
    the norm gains were folded into the weights."""

    label_column: ClassVar[str] = "pair"
    default_by: ClassVar[str] = "mean_gain"

    table: pd.DataFrame = field(repr=False)
    k: int
    convention: str = ""
    model_name: str = ""
    fold_norms: bool = True

    @property
    def labels(self) -> list[str]:
        """``src→dst`` of every candidate, in table order."""
        return [f"{s}{ARROW}{d}" for s, d in zip(self.table["src"], self.table["dst"])]

    def _row(self, index: int) -> dict[str, Any]:
        """The candidate's columns (src, dst, mean_gain, max_eig, min_eig, negative_definite)."""
        return {
            c: self.table[c].iloc[index].item()
            if hasattr(self.table[c].iloc[index], "item")
            else self.table[c].iloc[index]
            for c in self.table.columns
        }

    def to_dataframe(self) -> pd.DataFrame:
        """The candidates: pair ``src→dst`` and the table's columns."""
        df = self.table.copy()
        df.insert(0, "pair", self.labels)
        return df

    def _default_order(self, df: pd.DataFrame) -> pd.Index:
        """Strongest erasure first: negative-definite candidates, then the most negative mean gain."""
        return df.sort_values(["negative_definite", "mean_gain"], ascending=[False, True], kind="stable").index

    def plot(self) -> go.Figure:
        """Bar chart of the strongest candidates' mean gains (a plotly Figure)."""
        from interp.plots import erasure_figure  # plots reads the result's attributes; imported on use

        return erasure_figure(self)

    def __repr__(self) -> str:
        n = int(self.table["negative_definite"].sum()) if len(self.table) else 0
        return f"ErasureTable({len(self.table)} candidates, {n} negative-definite, k={self.k})"


def _write_bases(model: Model, labels: list[str], k: int, fold_norms: bool) -> Tensor:
    """Top-k right singular directions [n, d, k] of each write's matrix (zero-padded past its rank).

    A head's W_O has only d_head ≤ k rows: its whole row space is used, in any orthonormal basis."""
    out = torch.zeros(len(labels), model.arch.d_model, k, dtype=torch.float64, device=model.device)
    heads = [i for i, lab in enumerate(labels) if parse_write(model, lab).kind == "head"]
    if heads and k >= model.arch.d_head:
        M = torch.stack([write_matrix(model, parse_write(model, labels[i]), fold_norms) for i in heads])
        out[heads, :, : model.arch.d_head] = _row_bases(M)[0]
    tall: dict[tuple[int, ...], list[int]] = {}  # MLPs' W_out, W_E: top-k eigenvectors of the d×d Gram
    for i, lab in enumerate(labels):
        if i in heads and k >= model.arch.d_head:
            continue
        M = write_matrix(model, parse_write(model, lab), fold_norms)  # [rows, d]
        if M.shape[0] > M.shape[1]:
            tall.setdefault(tuple(M.shape), []).append(i)
            continue
        _, S, Vh = torch.linalg.svd(M.double(), full_matrices=False)  # thin SVD (a head with k < d_head)
        kk = min(k, int((S > S[0] * 1e-6).sum()))
        out[i, :, :kk] = Vh[:kk].T
    for idx in tall.values():
        G = torch.stack(
            [(lambda M: M.T @ M)(write_matrix(model, parse_write(model, labels[i]), fold_norms).double()) for i in idx]
        )  # [n, d, d]
        evals, evecs = torch.linalg.eigh(G)  # one batched call: eigh is the slow step
        for j, i in enumerate(idx):
            kk = min(k, int((evals[j] > evals[j, -1] * 1e-12).sum()))
            out[i, :, :kk] = evecs[j, :, -kk:].flip(-1)
    return out


def erasure_candidates(
    model: Model,
    *,
    k: int | None = None,
    screen: int = 200,
    fold_norms: bool = True,
    include_embed: bool = True,
    include_mlps: bool = True,
) -> ErasureTable:
    """Heads whose OV map is negative on an earlier write's subspace (see module docstring).

    ``k``: dimensions of each source's subspace (default d_head); ``screen``: how many of the most
    negative mean gains get their exact eigenvalues. Sources: heads, plus MLPs and the embedding
    (their top-k write directions) unless excluded; destinations: heads in later layers.
    """
    check_model(model)
    check_bool("fold_norms", fold_norms)
    check_positive_int("screen", screen)
    a = model.arch
    k = a.d_head if k is None else check_positive_int("k", k)
    srcs = [s for s in write_labels(model) if s.startswith("L") and not s.endswith("mlp")]
    if include_mlps:
        srcs += [s for s in write_labels(model) if s.endswith(".mlp")]
    if include_embed:
        srcs = ["embed"] + srcs
    src_objs = [parse_write(model, s) for s in srcs]
    Us = _write_bases(model, srcs, k, fold_norms)  # [S, d, k]
    # destination OV maps, folded: T_d = W_V^g W_O^h  [N, d, d] (as factors)
    _, _, W_V = folded_qkv(model, fold_norms)
    kv = torch.tensor([a.kv_head(h) for h in range(a.n_heads)], device=model.device)
    W_V = W_V[:, kv].double().reshape(-1, a.d_model, a.d_head)
    pa = post_gain(model, "attn")
    W_O = (
        fold_write(model, model.weights.W_O, fold_norms, None if pa is None else pa[:, None, None, :])
        .double()
        .reshape(-1, a.d_head, a.d_model)
    )
    # screen: tr(E) = ⟨sym(T_d), U_s U_sᵀ⟩ for all pairs
    Ps = packed_gram_left(Us.transpose(-2, -1).float(), weighted=False)  # [S, F] float32 (screen only)
    tr = torch.empty(len(srcs), W_V.shape[0], dtype=torch.float64, device=W_V.device)
    for sl in chunks(W_V.shape[0], 32):
        T = (W_V[sl] @ W_O[sl]).float()  # [c, d, d]
        Tsym = (T + T.transpose(-2, -1)) / 2
        tr[:, sl] = (Ps @ pack_symmetric(Tsym, weighted=True).T).double()
    ranks = torch.tensor(
        [min(k, int((Us[i].abs().sum(0) > 0).sum())) for i in range(len(srcs))], dtype=torch.float64, device=tr.device
    )
    gain = tr / ranks.clamp_min(1)[:, None]
    src_pos = torch.tensor([w.position(model) for w in src_objs], device=tr.device)
    # destination head j = l * n_heads + h reads its values at L{l}.attn.v[H{kv_head(h)}]
    dst_pos = torch.tensor(
        [program_position(a, HeadInput(l, "v", a.kv_head(h))) for l in range(a.n_layers) for h in range(a.n_heads)],
        device=tr.device,
    )
    valid = src_pos[:, None] < dst_pos[None, :]
    gain = torch.where(valid, gain, torch.full_like(gain, float("inf")))
    n_valid = int(valid.sum())
    flat = gain.reshape(-1)
    order = torch.argsort(flat)[: min(screen, n_valid)]
    rows = []
    for f in order.tolist():
        i, j = divmod(f, gain.shape[1])
        U = Us[i][:, : int(ranks[i])]
        E = (U.T @ W_V[j]) @ (W_O[j] @ U)  # [k, k]
        ev = torch.linalg.eigvalsh((E + E.T) / 2)
        rows.append(
            {
                "src": srcs[i],
                "dst": str(Head(*divmod(j, a.n_heads))),
                "mean_gain": float(torch.trace(E) / U.shape[1]),
                "max_eig": float(ev[-1]),
                "min_eig": float(ev[0]),
                "negative_definite": bool(ev[-1] < 0),
            }
        )
    table = pd.DataFrame(rows, columns=["src", "dst", "mean_gain", "max_eig", "min_eig", "negative_definite"])
    return ErasureTable(
        table=table, k=k, convention=convention(model, fold_norms), model_name=model.name, fold_norms=fold_norms
    )
