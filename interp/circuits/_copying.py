"""Copying scores and diagonal statistics of each head's full OV circuit W_E W_OV W_U.

Elhage et al. 2021 ("A Mathematical Framework for Transformer Circuits", §"Copying / primitive
in-context learning" and "Detecting copying behavior"), docs/math.md §11. A head that copies
maps token t to a higher logit for t itself: its full OV circuit [d_vocab, d_vocab] has mostly
positive eigenvalues. The copying score is

    c = Σ_i λ_i / Σ_i |λ_i|  ∈ [−1, 1]     (λ: eigenvalues of W_E W_V W_O W_U; = 1 for a positive
                                            semi-definite circuit such as W_E W_Eᵀ, −1 for its negative)

computed without the vocab² matrix: with A = W_E W_V [d_vocab, d_head] and B = W_O W_U
[d_head, d_vocab], the nonzero eigenvalues of AB are those of the d_head × d_head cyclic product

    BA = W_O (W_U W_E) W_V,

and W_U W_E [d_model, d_model] is shared by all heads (one d_vocab-long product for the model).
Σλ is the (real) trace; Σ|λ| sums the moduli of the complex eigenvalues.

``ov_diagonal_stats`` asks the same question row by row: for how many input tokens t is t the
top-1 / top-k output of the full OV circuit? It streams the [d_vocab, d_vocab] product in row
chunks through one reused buffer (bounded memory) and compares each row's top-k with its
diagonal entry (or, with ``exact_ranks=True``, counts every output above it).
Weights follow the folding convention of :mod:`interp.circuits._common`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool, check_positive_int, is_int
from interp.circuits._common import (
    check_model,
    check_head,
    check_layer,
    convention,
    fold_read,
    fold_write,
    folded_qkv,
    folded_unembed,
    folds_gains,
    need_unembed,
    post_gain,
)
from interp.errors import ArgumentError, LabelError
from interp.labels import Head

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model

__all__ = ["HeadScores", "OVDiagonalStats", "copying_scores", "ov_diagonal_stats"]


@dataclass(frozen=True, eq=False)
class HeadScores(Result):
    """One number per attention head: ``scores`` [n_layers, n_heads], named by ``metric``.

    Contract (:class:`interp._result.Result`): ``s["L3.H5"]`` is that head's score; ``to_dataframe()``
    has one row per head (column ``head``); ``top`` ranks by the score itself, largest first (signed:
    a copying score of −1 is the opposite of copying, not a strong copier). ``fold_norms``: whether
    the norm gains were folded into the weights (``convention`` says it in words).
    """

    label_column: ClassVar[str] = "head"
    default_absolute: ClassVar[bool] = False

    metric: str
    scores: Float[Tensor, "n_layers n_heads"] = field(repr=False)
    convention: str = ""
    model_name: str = ""
    fold_norms: bool = True

    @property
    def n_layers(self) -> int:
        return int(self.scores.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.scores.shape[1])

    @property
    def labels(self) -> list[str]:
        """Head labels ``L{layer}.H{head}``, layer-major (the rows of :meth:`to_dataframe`)."""
        return [str(Head(l, h)) for l in range(self.n_layers) for h in range(self.n_heads)]

    @property
    def default_column(self) -> str:
        return self.metric

    def _index(self, label: Any) -> int:
        try:
            head = Head.parse(label)
        except LabelError:
            head = None
        if head is None or head.layer >= self.n_layers or head.head >= self.n_heads:
            raise LabelError(
                f"label={label!r} is not a head of this result; heads are L0.H0 … "
                f"{Head(self.n_layers - 1, self.n_heads - 1)}"
            )
        return head.layer * self.n_heads + head.head

    def _row(self, index: int) -> float:
        return float(self.scores.reshape(-1)[index])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per head: head label, layer, head_index and the score (column named ``metric``)."""
        L, H = self.n_layers, self.n_heads
        v = self.scores.double().cpu().reshape(-1).numpy()
        return pd.DataFrame(
            {
                "head": self.labels,
                "layer": [l for l in range(L) for _ in range(H)],
                "head_index": [h for _ in range(L) for h in range(H)],
                self.metric: v,
            }
        )

    def plot(self) -> go.Figure:
        """Layer × head heatmap (a plotly Figure)."""
        from interp.plots import head_score_map  # plots reads the result's attributes; imported on use

        return head_score_map(self)

    def __repr__(self) -> str:
        return f"HeadScores({self.metric}, shape {tuple(self.scores.shape)})"


_VOCAB_BLOCK = 4096  # vocabulary rows per block of the W_U W_E product


def _cyclic_products(model: Model, fold_norms: bool) -> Float[Tensor, "n_layers n_heads d_head d_head"]:
    """W_O^h (W_U W_E) W_V^g for every head (float64), the full OV circuits' cyclic products."""
    W_U_raw = need_unembed(model)
    a, w = model.arch, model.weights
    # UE = W_U W_E [d, d], the one vocab-long product, summed over vocab blocks (the folds act on
    # the d_model side, so they apply block by block): no float64 copy of either [V, d] matrix
    d, V = a.d_model, W_U_raw.shape[1]
    UE = torch.zeros(d, d, dtype=torch.float64, device=W_U_raw.device)
    for s in range(0, V, _VOCAB_BLOCK):
        U = fold_read(model, W_U_raw[:, s : s + _VOCAB_BLOCK], w.lnf_w, fold_norms).double()  # [d, block]
        UE += U @ fold_write(model, w.W_E[s : s + _VOCAB_BLOCK], fold_norms).double()
    _, _, W_V = folded_qkv(model, fold_norms)
    kv = torch.tensor([a.kv_head(h) for h in range(a.n_heads)], device=W_U_raw.device)
    W_V = W_V[:, kv].double()  # [L, H, d, dh]
    pa = post_gain(model, "attn")
    W_O = fold_write(
        model, model.weights.W_O, fold_norms, None if pa is None else pa[:, None, None, :]
    ).double()  # [L, H, dh, d]
    return W_O @ UE @ W_V  # [L, H, dh, dh]


def copying_scores(model: Model, *, fold_norms: bool = True) -> HeadScores:
    """Σλ/Σ|λ| of every head's full OV circuit W_E W_V W_O W_U (eigenvalues from the d_head×d_head
    cyclic product). Models without an unembedding (MiniLM) raise UnsupportedOperationError."""
    check_model(model)
    check_bool("fold_norms", fold_norms)
    K = _cyclic_products(model, fold_norms)
    lam = torch.linalg.eigvals(K)  # [L, H, dh] complex
    score = lam.real.sum(-1) / lam.abs().sum(-1).clamp_min(torch.finfo(torch.float64).tiny)
    out_dtype = torch.float64 if model.dtype == torch.float64 else torch.float32
    return HeadScores(
        metric="copying_score",
        scores=score.to(out_dtype),
        convention=convention(model, fold_norms),
        model_name=model.name,
        fold_norms=fold_norms,
    )


@dataclass(frozen=True, eq=False)
class OVDiagonalStats(Result):
    """How often each token is its own top output under one head's full OV circuit.

    ``ranks`` [d_vocab]: for input token t, the number of output tokens with a strictly higher
    entry than the diagonal (t, t) — 0 means t is the top-1 output — capped at ``k`` (k means
    "k or more") unless computed with ``exact_ranks=True`` (``ranks_exact``). ``top1`` /
    ``topk``: the fractions of tokens with rank 0 / rank < k.

    Contract (:class:`interp._result.Result`): rows are input tokens, labelled by their id
    (``stats[17]`` or ``stats["17"]`` is token 17's (rank, diagonal)); ``to_dataframe()`` column
    ``token``; ``top()`` lists the tokens copied most strongly (rank 0 first, then the largest
    diagonal entry); ``top(by="diagonal")`` ranks by |diagonal|.
    """

    label_column: ClassVar[str] = "token"
    default_by: ClassVar[str] = "diagonal"

    layer: int
    head: int
    k: int
    top1: float
    topk: float
    ranks: Int[Tensor, " d_vocab"] = field(repr=False)
    diagonal: Float[Tensor, " d_vocab"] = field(repr=False)
    ranks_exact: bool = False
    convention: str = ""
    fold_norms: bool = True

    @property
    def label(self) -> str:
        return str(Head(self.layer, self.head))

    @property
    def labels(self) -> list[str]:
        """Token ids as text, ``"0"`` … ``str(d_vocab − 1)``."""
        return [str(t) for t in range(self.ranks.shape[0])]

    def _index(self, label: Union[int, str]) -> int:
        n = int(self.ranks.shape[0])
        t = int(label) if is_int(label) else (int(label) if isinstance(label, str) and label.isdigit() else None)
        if t is None or not 0 <= t < n:
            raise LabelError(f"label={label!r} is not a token of this result; tokens are ids 0 … {n - 1}")
        return t

    def _row(self, index: int) -> tuple[int, float]:
        """(rank of the token in its own row, diagonal entry)."""
        return int(self.ranks[index]), float(self.diagonal[index])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per input token: token id, rank of itself (capped at k unless exact), diagonal entry."""
        return pd.DataFrame(
            {
                "token": range(self.ranks.shape[0]),
                "rank": self.ranks.cpu().numpy(),
                "diagonal": self.diagonal.double().cpu().numpy(),
            }
        )

    def _default_order(self, df: pd.DataFrame) -> pd.Index:
        """Copied most strongly first: rank 0 first, then the largest diagonal entry."""
        return df.sort_values(["rank", "diagonal"], ascending=[True, False], kind="stable").index

    def plot(self) -> go.Figure:
        """Histogram of the self-ranks (a plotly Figure; log-spaced if the ranks are exact)."""
        from interp.plots import self_rank_histogram  # plots reads the result's attributes; imported on use

        return self_rank_histogram(self)

    def __repr__(self) -> str:
        return f"OVDiagonalStats({self.label}: top1={self.top1:.3f}, top{self.k}={self.topk:.3f})"


def _full_ov_factors(model: Model, layer: int, head: int, fold_norms: bool) -> tuple[Tensor, Tensor]:
    """(W_E W_V [d_vocab, d_head], W_O W_U [d_head, d_vocab]) with the folding convention, without
    copying the [d_vocab, d_model] matrices: the folds act on the d_model side of the small factor."""
    w = model.weights
    g = model.arch.kv_head(head)
    _, _, W_V = folded_qkv(model, fold_norms, layer=layer)
    pa = post_gain(model, "attn")
    W_O = fold_write(model, w.W_O[layer, head], fold_norms, None if pa is None else pa[layer])  # [d_head, d_model]
    if fold_norms and folds_gains(model) and w.lnf_w is not None:
        # W_E P · P diag(γ1) W_V = W_E · (folded W_V): the read is already centred
        left = w.W_E @ W_V[g]
        # W_O P · P diag(γ_f) W_U = ((W_O P) P ⊙ γ_f) W_U
        if model.arch.norm == "layernorm":
            W_O = W_O - W_O.mean(-1, keepdim=True)
        right = (W_O * w.lnf_w) @ need_unembed(model)
    else:
        left = fold_write(model, w.W_E, fold_norms) @ W_V[g]
        right = W_O @ folded_unembed(model, fold_norms)
    return left, right


def ov_diagonal_stats(
    model: Model,
    layer: int,
    head: int,
    k: int = 5,
    *,
    fold_norms: bool = True,
    exact_ranks: bool = False,
    chunk_rows: Optional[int] = None,
    max_chunk_bytes: int = 256 << 20,
) -> OVDiagonalStats:
    """Top-1 / top-``k`` self-prediction rates of head ``(layer, head)``'s full OV circuit.

    Rows of W_E W_V W_O W_U are computed ``chunk_rows`` at a time into one reused buffer
    (default: as many rows as fit in ``max_chunk_bytes``, 256 MiB), so memory stays near
    max_chunk_bytes whatever d_vocab is. Per row, ``torch.topk(k)`` decides top-1 / top-k;
    ``exact_ranks=True`` also counts every output above the diagonal (about 2× slower).
    """
    check_model(model)
    layer, head = check_layer(model, layer), check_head(model, head)
    check_positive_int("k", k)
    check_bool("fold_norms", fold_norms)
    check_bool("exact_ranks", exact_ranks)
    need_unembed(model)
    V = model.arch.d_vocab
    if k > V:
        raise ArgumentError(f"k={k} exceeds d_vocab={V}")
    check_positive_int("max_chunk_bytes", max_chunk_bytes)
    if chunk_rows is None:
        chunk_rows = max(1, min(V, max_chunk_bytes // (4 * V)))
    check_positive_int("chunk_rows", chunk_rows)
    left, right = _full_ov_factors(model, layer, head, fold_norms)
    ranks = torch.empty(V, dtype=torch.int64, device=left.device)
    diag = torch.empty(V, dtype=left.dtype, device=left.device)
    buf = torch.empty(min(chunk_rows, V), V, dtype=left.dtype, device=left.device)
    with torch.no_grad():
        for start in range(0, V, chunk_rows):
            stop = min(V, start + chunk_rows)
            rows = torch.matmul(left[start:stop], right, out=buf[: stop - start])  # [c, V]
            ids = torch.arange(start, stop, device=rows.device)
            dg = rows[ids - start, ids]  # [c]
            if exact_ranks:  # 128 rows at a time: the count's int64 temporary is 8 bytes per entry
                for s0 in range(0, stop - start, 128):
                    s1 = min(stop - start, s0 + 128)
                    ranks[start + s0 : start + s1] = (rows[s0:s1] > dg[s0:s1, None]).sum(dim=1)
            else:
                top = rows.topk(k, dim=1, sorted=False).values  # [c, k]
                ranks[start:stop] = (top > dg[:, None]).sum(dim=1)
            diag[start:stop] = dg
    return OVDiagonalStats(
        layer=layer,
        head=head,
        k=k,
        top1=float((ranks == 0).double().mean()),
        topk=float((ranks < k).double().mean()),
        ranks=ranks,
        diagonal=diag,
        ranks_exact=exact_ranks,
        convention=convention(model, fold_norms),
        fold_norms=fold_norms,
    )
