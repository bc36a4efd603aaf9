"""Q-, K- and V-composition scores between every pair of attention heads.

Elhage et al. 2021 ("A Mathematical Framework for Transformer Circuits", §"Composition scores"),
docs/math.md §10. For a source head s in an earlier layer and a destination head d (query
head index; under GQA its KV head is h // (n_heads / n_kv_heads)), in transformer-lens's row
convention:

    score(s, d) = ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F) ∈ [0, 1],   W_A = OV_s = W_V^s W_O^s
    Q: W_B = QK_d = W_Q^d W_K^dᵀ     K: W_B = QK_dᵀ = W_K^d W_Q^dᵀ     V: W_B = OV_d

Algorithm (never a d_model × d_model product per pair):

1. Reduce each source to a d_head-sized factor: RᵀR = W_V^sᵀW_V^s (from the d_head × d_head Gram
   matrix), M_s = R W_O^s [d_head, d_model];
   ‖OV_s Y‖ = ‖M_s Y‖ for any Y.
2. Likewise each destination W_B = A B: N_d = A R'ᵀ with R'ᵀR' = B Bᵀ, so ‖X W_B‖ = ‖X N_d‖.
3. ‖M_s N_d‖_F² = ⟨M_sᵀ M_s, N_d N_dᵀ⟩: pack both symmetric Gram matrices (:mod:`._gram`) and get
   all pairs (s before d) from a few [n_src, F] × [F, n_dst] matrix products.
4. Divide by ‖M_s‖_F ‖N_d‖_F; pairs whose destination is not in a later layer are NaN.

With ``heads=[...]`` only the factors of those heads are formed (sources: the chosen heads with a
chosen head in a later layer; destinations: the reverse) and step 3 is one [n_src, F] × [F, n_dst]
product: each score is the same number as in the all-pairs tensor, the rest are NaN.

Weights follow :mod:`interp.circuits._common` (``fold_norms=True``: transformer-lens's
HookedTransformer / compatibility-mode convention; ``fold_norms=False``: the raw weights the
TransformerBridge exposes by default, which is what ``bridge.all_composition_scores`` uses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool, is_int
from interp.circuits._common import check_model, convention, fold_read, fold_write, folded_qkv, post_gain
from interp.circuits._gram import gram_r, packed_gram_left, packed_gram_right
from interp.errors import ArgumentError, LabelError
from interp.labels import ARROW, Head, as_label

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model

__all__ = ["CompositionScores", "composition_scores"]

_KINDS = ("Q", "K", "V")


@dataclass(frozen=True, eq=False)
class CompositionScores(Result):
    """``scores`` [n_layers, n_heads, n_layers, n_heads] (src layer, src head, dst layer, dst head);
    NaN where the destination is not in a later layer (``mask`` is True where defined). ``heads``:
    the head labels the scores were restricted to (``composition_scores(..., heads=...)``; pairs
    outside them are NaN too), or None for all heads.

    Contract (:class:`interp._result.Result`): rows are the defined pairs, labelled ``src→dst``
    (``s["L0.H1→L1.H2"]`` or ``s[("L0.H1", "L1.H2")]`` is the score; NaN for an undefined pair);
    ``to_dataframe()`` column ``pair``; ``top`` ranks by ``score``. ``fold_norms``: whether the
    norm gains were folded into the weights (``convention`` says it in words)."""

    label_column: ClassVar[str] = "pair"
    default_by: ClassVar[str] = "score"

    kind: str
    scores: Float[Tensor, "n_layers n_heads n_layers n_heads"] = field(repr=False)
    convention: str
    model_name: str = ""
    heads: Optional[tuple[str, ...]] = None
    fold_norms: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.heads is not None:  # JSON (load) gives a list
            object.__setattr__(self, "heads", tuple(self.heads))

    @property
    def mask(self) -> Tensor:
        return ~torch.isnan(self.scores)

    @property
    def n_layers(self) -> int:
        return int(self.scores.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.scores.shape[1])

    @property
    def labels(self) -> list[str]:
        """``src→dst`` of every defined pair, in :meth:`to_dataframe` order."""
        return [f"{Head(a, b)}{ARROW}{Head(c, d)}" for a, b, c, d in self.mask.nonzero(as_tuple=False).tolist()]

    def _index(self, label: Any) -> int:
        """Flat index into ``scores`` of a pair given as ``"src→dst"`` or (src, dst) head labels."""
        pair = tuple(label.split(ARROW, 1)) if isinstance(label, str) else label
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise LabelError(f"label={label!r} must be a head pair 'L0.H1{ARROW}L1.H2' or (src, dst)")
        L, H = self.n_layers, self.n_heads
        src, dst = (as_label(x, Head, name="label") for x in pair)
        if not (src.layer < L and dst.layer < L and src.head < H and dst.head < H):
            raise LabelError(f"label={label!r} names a head outside {Head(0, 0)} … {Head(L - 1, H - 1)}")
        return ((src.layer * H + src.head) * L + dst.layer) * H + dst.head

    def _row(self, index: int) -> float:
        return float(self.scores.reshape(-1)[index])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per defined (src, dst) pair: pair label ``src→dst``, src, dst labels, layers, heads, score."""
        idx = self.mask.nonzero(as_tuple=False)
        v = self.scores[self.mask].double().cpu().numpy()
        l1, h1, l2, h2 = (idx[:, i].cpu().numpy() for i in range(4))
        src = [str(Head(int(a), int(b))) for a, b in zip(l1, h1)]
        dst = [str(Head(int(a), int(b))) for a, b in zip(l2, h2)]
        return pd.DataFrame(
            {
                "pair": [f"{s}{ARROW}{d}" for s, d in zip(src, dst)],
                "src": src,
                "dst": dst,
                "src_layer": l1,
                "src_head": h1,
                "dst_layer": l2,
                "dst_head": h2,
                "score": v,
            }
        )

    def plot(self) -> go.Figure:
        """Heatmap of all [src head, dst head] scores (a plotly Figure)."""
        from interp.plots import composition_score_map  # plots reads the result's attributes; imported on use

        return composition_score_map(self)

    def __repr__(self) -> str:
        sub = "" if self.heads is None else f", {len(self.heads)} heads"
        return f"CompositionScores({self.kind}, shape {tuple(self.scores.shape)}{sub}, {self.convention})"


def _parse_heads(model: Model, heads: Any) -> list[tuple[int, int]]:
    """``heads`` (labels "L3.H5", :class:`interp.labels.Head` or (layer, head) pairs) as sorted,
    distinct (layer, head) pairs."""
    L, H = model.arch.n_layers, model.arch.n_heads
    allowed = f"labels like '{Head(L - 1, H - 1)}' or (layer, head) pairs with layer < {L} and head < {H}"
    if isinstance(heads, (str, bytes, Tensor)) or not isinstance(heads, Sequence) or len(heads) == 0:
        raise ArgumentError(f"heads={heads!r:.80} must be a non-empty list of {allowed}")
    out: set[tuple[int, int]] = set()
    for item in heads:
        if isinstance(item, (str, Head)):
            try:
                head = as_label(item, Head, name="heads")
            except LabelError as e:
                raise LabelError(f"{e}; give {allowed}") from None
            lh = (head.layer, head.head)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and all(is_int(x) for x in item):
            lh = (int(item[0]), int(item[1]))
        else:
            raise LabelError(f"heads contains {item!r}; give {allowed}")
        if not (0 <= lh[0] < L and 0 <= lh[1] < H):
            raise LabelError(
                f"heads contains {item!r}, not a head of model {model.name!r} "
                f"(n_layers={L}, n_heads={H}); give {allowed}"
            )
        out.add(lh)
    return sorted(out)


def _factors(
    model: Model, kind: str, ls: Tensor, hs: Tensor, fold_norms: bool, dtype: torch.dtype, side: str
) -> Tensor:
    """The reduced factors of heads (ls[i], hs[i]): M_s [n, dh, d] (side "src") or N_d [n, d, dh] ("dst")."""
    a, w = model.arch, model.weights
    kv = torch.tensor([a.kv_head(int(h)) for h in hs], dtype=torch.long, device=ls.device)
    g = w.ln1_w[ls]  # [n, d]: each head's ln1 gain
    W_V = fold_read(model, w.W_V[ls, kv], g, fold_norms).to(dtype)  # query head h reads KV head h // group
    pa = post_gain(model, "attn")
    W_O = fold_write(model, w.W_O[ls, hs].to(dtype), fold_norms, None if pa is None else pa[ls][:, None, :].to(dtype))
    if side == "src":  # M_s = R(W_V^s) W_O^s
        return gram_r(W_V) @ W_O
    W_Q = fold_read(model, w.W_Q[ls, hs], g, fold_norms).to(dtype)
    W_K = fold_read(model, w.W_K[ls, kv], g, fold_norms).to(dtype)
    A, B = _dst_factors(kind, W_Q, W_K, W_V, W_O)  # N_d = A R(Bᵀ)ᵀ
    return A @ gram_r(B.transpose(-2, -1)).transpose(-2, -1)


def _dst_factors(kind: str, W_Q: Tensor, W_K: Tensor, W_V: Tensor, W_O: Tensor) -> tuple[Tensor, Tensor]:
    """(A [N, d, dh], B [N, dh, d]) with W_B = A B for every destination head, heads flattened."""
    if kind == "Q":
        return W_Q, W_K.transpose(-2, -1)
    if kind == "K":
        return W_K, W_Q.transpose(-2, -1)
    return W_V, W_O


def composition_scores(
    model: Model,
    kind: str = "K",
    *,
    heads: Optional[Sequence[Any]] = None,
    fold_norms: bool = True,
    dtype: Optional[torch.dtype] = None,
) -> CompositionScores:
    """All-pairs ``kind``-composition scores ("Q", "K" or "V") as a [L, H, L, H] tensor.

    ``heads``: only the pairs among these heads (labels such as "L3.H5" or (layer, head) pairs),
    computed from their factors alone; every other entry is NaN. ``dtype`` is the precision of the
    Gram products (float32 agrees with a float64 reference to ~1e-7 on smollm2-135m; pass
    torch.float64 for more). Peak extra memory ≈ 2 × n_heads_total ×
    d_model²/2 floats (≈ 0.4 GB for smollm2-135m in float32); with ``heads``, len(heads) instead of
    n_heads_total.
    """
    check_model(model)
    if kind not in _KINDS:
        raise ArgumentError(f"kind={kind!r} is not a composition kind; use one of {list(_KINDS)}")
    check_bool("fold_norms", fold_norms)
    if dtype is None:  # a float64 model (a high-precision check) gets float64 scores
        dtype = torch.float64 if model.dtype == torch.float64 else torch.float32
    if dtype not in (torch.float32, torch.float64):
        raise ArgumentError(f"dtype={dtype!r} must be torch.float32 or torch.float64")
    a = model.arch
    L, H = a.n_layers, a.n_heads
    if heads is not None:
        return _subset_scores(model, kind, _parse_heads(model, heads), fold_norms, dtype)
    kv = torch.tensor([a.kv_head(h) for h in range(H)], device=model.device)
    W_Q, W_K, W_V = (t.to(dtype) for t in folded_qkv(model, fold_norms))
    W_K, W_V = W_K[:, kv], W_V[:, kv]  # query head h reads KV head h // group   [L, H, d, dh]
    pa = post_gain(model, "attn")
    W_O = fold_write(
        model, model.weights.W_O.to(dtype), fold_norms, None if pa is None else pa[:, None, None, :].to(dtype)
    )  # [L, H, dh, d]

    flat = lambda t: t.reshape(L * H, *t.shape[2:])  # noqa: E731  [L, H, ...] -> [L*H, ...]
    # 1. sources: M_s = R(W_V^s) W_O^s  [N, dh, d]
    M = gram_r(flat(W_V)) @ flat(W_O)
    # 2. destinations: N_d = A R(Bᵀ)ᵀ  [N, d, dh]
    A, B = _dst_factors(kind, flat(W_Q), flat(W_K), flat(W_V), flat(W_O))
    N = A @ gram_r(B.transpose(-2, -1)).transpose(-2, -1)
    src_norm = M.flatten(1).norm(dim=1).reshape(L, H)
    dst_norm = N.flatten(1).norm(dim=1).reshape(L, H)
    # 3. packed Grams; the off-diagonal weight 2 goes on the destination side only
    X = packed_gram_left(M, weighted=False).reshape(L, H, -1)  # [L, H, F]
    Z = packed_gram_right(N, weighted=True).reshape(L, H, -1)
    # src layers in ~6 groups, each against the destination layers after its first layer: ~45% fewer
    # flops than one all-pairs GEMM, while each product stays large enough not to be memory-bound
    scores = torch.full((L, H, L, H), float("nan"), dtype=dtype, device=model.device)
    step = max(1, -(-L // 6))
    for g0 in range(0, L - 1, step):
        g1 = min(L - 1, g0 + step)
        sq = X[g0:g1].reshape((g1 - g0) * H, -1) @ Z[g0 + 1 :].reshape((L - g0 - 1) * H, -1).T
        block = sq.clamp_min(0).sqrt().reshape(g1 - g0, H, L - g0 - 1, H)
        for i, l in enumerate(range(g0, g1)):
            scores[l, :, l + 1 :] = block[i, :, l - g0 :]
    # 4. normalise
    scores = scores / (src_norm[:, :, None, None] * dst_norm[None, None, :, :])
    return CompositionScores(
        kind=kind, scores=scores, convention=convention(model, fold_norms), model_name=model.name, fold_norms=fold_norms
    )


def _subset_scores(
    model: Model, kind: str, sel: list[tuple[int, int]], fold_norms: bool, dtype: torch.dtype
) -> CompositionScores:
    """Scores among the heads ``sel`` only: factors of those heads, one [n_src, F] × [F, n_dst] product."""
    L, H = model.arch.n_layers, model.arch.n_heads
    dev = model.device
    scores = torch.full((L, H, L, H), float("nan"), dtype=dtype, device=dev)
    lo, hi = min(l for l, _ in sel), max(l for l, _ in sel)
    src = [(l, h) for l, h in sel if l < hi]  # a source needs a chosen head in a later layer
    dst = [(l, h) for l, h in sel if l > lo]
    if src and dst:
        (sl, sh), (dl, dh) = (torch.tensor(list(zip(*x)), dtype=torch.long, device=dev) for x in (src, dst))
        M = _factors(model, kind, sl, sh, fold_norms, dtype, "src")  # [n_src, dh, d]
        N = _factors(model, kind, dl, dh, fold_norms, dtype, "dst")  # [n_dst, d, dh]
        sq = packed_gram_left(M, weighted=False) @ packed_gram_right(N, weighted=True).T  # [n_src, n_dst]
        vals = sq.clamp_min(0).sqrt() / (M.flatten(1).norm(dim=1)[:, None] * N.flatten(1).norm(dim=1)[None, :])
        later = sl[:, None] < dl[None, :]
        i, j = later.nonzero(as_tuple=True)
        scores[sl[i], sh[i], dl[j], dh[j]] = vals[i, j]
    return CompositionScores(
        kind=kind,
        scores=scores,
        convention=convention(model, fold_norms),
        model_name=model.name,
        heads=tuple(str(Head(l, h)) for l, h in sel),
        fold_norms=fold_norms,
    )
