"""Virtual weights: how a later component reads what an earlier one wrote.

Elhage et al. 2021 ("A Mathematical Framework for Transformer Circuits", §"Virtual weights"),
docs/math.md §9. The residual stream is a sum of writes, so a read weight W_I^j
applied to the stream sees each earlier write i through the product W_I^j W_O^i (column
convention). In transformer-lens's row convention the same map is

    V_{i→j} = W_O^i W_I^j        [k_i, k_j]   (rows: the writer's internal directions — a head's
                                               d_head, an MLP's neurons, token ids for ``embed``;
                                               columns: the reader's — d_head, neurons, vocab)

always returned factored (A = W_O^i, B = W_I^j, hidden dim d_model), with the norm folding of
:mod:`interp.circuits._common` (the reader's norm gain folded into W_I^j, LayerNorm writes
centred). A read that is not after the write (same layer's attention, a parallel block's MLP
reading its own heads, an earlier layer) is refused.

``virtual_weight_norms`` gives ‖V_{i→j}‖_F for every (write, read) pair through the packed-Gram
identity ‖W_O W_I‖_F² = ⟨W_Oᵀ W_O, W_I W_Iᵀ⟩ (:mod:`._gram`): one matrix product, not one
k_i × d_model × k_j product per pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Optional

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import Result
from interp._validate import check_bool
from interp.circuits._common import (
    DEFAULT_MAX_BYTES,
    check_model,
    convention,
    folded_mlp_in,
    folded_qkv,
    folded_unembed,
    folded_writes,
)
from interp.circuits._factored import Circuit
from interp.circuits._gram import packed_gram_left, packed_gram_right, packed_size
from interp.circuits._labels import (
    check_order,
    parse_read,
    parse_write,
    read_labels,
    read_matrix,
    write_labels,
    write_matrix,
)
from interp.errors import ArgumentError, LabelError
from interp.labels import ARROW, Edge, Head, HeadInput, Mlp, MlpInput
from interp.models import describe_block

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model

__all__ = ["VirtualWeightNorms", "virtual_weights", "virtual_weight_norms"]


def virtual_weights(
    model: Model, src: str, dst: str, *, fold_norms: bool = True, max_bytes: int = DEFAULT_MAX_BYTES
) -> Circuit:
    """The virtual weight from write ``src`` to read ``dst``: W_O^src W_I^dst (row convention), factored.

    ``src``: ``embed``, ``pos_embed``, ``L3.H5``, ``L3.mlp``; ``dst``: ``L3.attn.q[H5]``,
    ``L3.attn.k[H1]``, ``L3.attn.v[H1]`` (KV head index), ``L3.mlp.in``, ``L3.mlp.gate``,
    ``unembed``. LabelError for unknown labels, ArgumentError if ``dst`` does not read after ``src``.
    """
    check_model(model)
    check_bool("fold_norms", fold_norms)
    w, r = parse_write(model, src), parse_read(model, dst)
    why = check_order(model, w, r)
    if why is not None:
        raise ArgumentError(f"dst={dst!r} does not read src={src!r}: {why}; the read must come after the write")
    return Circuit(
        write_matrix(model, w, fold_norms),
        read_matrix(model, r, fold_norms),
        label=f"{src} → {dst}",
        convention=convention(model, fold_norms),
        max_bytes=max_bytes,
        src=src,
        dst=dst,
    )


@dataclass(frozen=True, eq=False)
class VirtualWeightNorms(Result):
    """‖W_O^src W_I^dst‖_F for every write (rows) × read (columns); NaN where the read is not after the write.

    Contract (:class:`interp._result.Result`): rows are the defined (write, read) pairs, labelled as
    edges ``src→dst`` (``t["L0.H1→L1.attn.k[H0]"]`` or ``t[("L0.H1", "L1.attn.k[H0]")]``; a pair
    whose read is not after the write gives NaN); ``to_dataframe()`` column ``edge``; ``top`` ranks
    by ``norm``. ``fold_norms``: whether the norm gains were folded into the weights.
    """

    label_column: ClassVar[str] = "edge"
    default_by: ClassVar[str] = "norm"

    values: Float[Tensor, "n_writes n_reads"] = field(repr=False)
    writes: list[str]
    reads: list[str]
    convention: str = ""
    model_name: str = ""
    fold_norms: bool = True

    def _pairs(self) -> Iterator[tuple[int, int]]:
        """(write index, read index) of the defined pairs, row-major (the rows of :meth:`to_dataframe`)."""
        idx = (~torch.isnan(self.values)).nonzero(as_tuple=False).cpu().tolist()
        return ((i, j) for i, j in idx)

    @property
    def labels(self) -> list[str]:
        """``src→dst`` of every defined pair, row-major."""
        return [f"{self.writes[i]}{ARROW}{self.reads[j]}" for i, j in self._pairs()]

    def _index(self, key: Any) -> int:
        """Flat index write × n_reads + read of a pair given as (src, dst), ``"src→dst"`` or an Edge."""
        if isinstance(key, Edge):
            key = (str(key.writer), str(key.reader))
        elif isinstance(key, str) and ARROW in key:
            key = tuple(key.split(ARROW, 1))
        if not (isinstance(key, tuple) and len(key) == 2):
            raise LabelError(
                f"label={key!r} must be a (src, dst) pair or an edge 'src{ARROW}dst' such as "
                f"{self.writes[0] + ARROW + self.reads[0]!r}"
            )
        src, dst = key
        if src not in self.writes:
            raise LabelError(f"src={src!r} is not a write of this table; writes look like {self.writes[:4]}")
        if dst not in self.reads:
            raise LabelError(f"dst={dst!r} is not a read of this table; reads look like {self.reads[:4]}")
        return self.writes.index(src) * len(self.reads) + self.reads.index(dst)

    def _row(self, index: int) -> float:
        return float(self.values.reshape(-1)[index])

    def to_dataframe(self) -> pd.DataFrame:
        """Long format, defined pairs only: edge (``src→dst``), src, dst, norm."""
        mask = ~torch.isnan(self.values)
        pairs = list(self._pairs())
        src = [self.writes[i] for i, _ in pairs]
        dst = [self.reads[j] for _, j in pairs]
        return pd.DataFrame(
            {
                "edge": [f"{s}{ARROW}{d}" for s, d in zip(src, dst)],
                "src": src,
                "dst": dst,
                "norm": self.values[mask].double().cpu().numpy(),
            }
        )

    def plot(self) -> go.Figure:
        """Heatmap of the norms, writes × reads (a plotly Figure)."""
        from interp.plots import virtual_weight_map  # plots reads the result's attributes; imported on use

        return virtual_weight_map(self)

    def __repr__(self) -> str:
        return f"VirtualWeightNorms({len(self.writes)} writes × {len(self.reads)} reads, {self.convention})"


def _write_stacks(model: Model, fold_norms: bool, dtype: torch.dtype):
    """(labels, B [n, k, d_model]) per kind of write, folded, in write_labels' naming."""
    a, w = model.arch, folded_writes(model, fold_norms)
    L, H = a.n_layers, a.n_heads
    W_E, W_pos, W_O, W_out = w["W_E"], w["W_pos"], w["W_O"], w["W_out"]
    yield ["embed"], W_E[None]
    if W_pos is not None:
        yield ["pos_embed"], W_pos[None]
    yield [str(Head(l, h)) for l in range(L) for h in range(H)], W_O.reshape(L * H, a.d_head, a.d_model)
    if W_out is not None:
        yield [str(Mlp(l)) for l in range(L)], W_out


def _read_stacks(model: Model, fold_norms: bool, dtype: torch.dtype):
    """(labels, A [n, d_model, k]) per kind of read, folded, in read_labels' naming."""
    a = model.arch
    L, H, G = a.n_layers, a.n_heads, a.n_kv_heads
    W_Q, W_K, W_V = folded_qkv(model, fold_norms)
    yield [str(HeadInput(l, "q", h)) for l in range(L) for h in range(H)], W_Q.reshape(L * H, a.d_model, a.d_head)
    yield [str(HeadInput(l, "k", g)) for l in range(L) for g in range(G)], W_K.reshape(L * G, a.d_model, a.d_head)
    yield [str(HeadInput(l, "v", g)) for l in range(L) for g in range(G)], W_V.reshape(L * G, a.d_model, a.d_head)
    if describe_block(a).has_mlp:
        W_in, W_gate = folded_mlp_in(model, fold_norms)
        yield [str(MlpInput(l, "in")) for l in range(L)], W_in
        if W_gate is not None:
            yield [str(MlpInput(l, "gate")) for l in range(L)], W_gate
    if a.has_logits:
        yield ["unembed"], folded_unembed(model, fold_norms)[None]


def virtual_weight_norms(
    model: Model, *, fold_norms: bool = True, dtype: Optional[torch.dtype] = None
) -> VirtualWeightNorms:
    """‖W_O^src W_I^dst‖_F for all (write, read) pairs of the model (NaN where the read is earlier)."""
    check_model(model)
    check_bool("fold_norms", fold_norms)
    if dtype is None:  # a float64 model (a high-precision check) gets float64 norms
        dtype = torch.float64 if model.dtype == torch.float64 else torch.float32
    if dtype not in (torch.float32, torch.float64):
        raise ArgumentError(f"dtype={dtype!r} must be torch.float32 or torch.float64")
    writes, reads = write_labels(model), read_labels(model)
    F = packed_size(model.arch.d_model)
    dev = model.device
    w_row = {lab: i for i, lab in enumerate(writes)}
    r_row = {lab: i for i, lab in enumerate(reads)}
    Xw = torch.empty(len(writes), F, dtype=dtype, device=dev)  # packed W_Oᵀ W_O
    for labels, B in _write_stacks(model, fold_norms, dtype):
        Xw[[w_row[x] for x in labels]] = packed_gram_left(B.to(dtype), weighted=False)
    Zr = torch.empty(len(reads), F, dtype=dtype, device=dev)  # packed W_I W_Iᵀ, off-diagonal blocks doubled
    for labels, A in _read_stacks(model, fold_norms, dtype):
        Zr[[r_row[x] for x in labels]] = packed_gram_right(A.to(dtype), weighted=True)
    sq = Xw @ Zr.T  # [n_writes, n_reads]
    w_ord = torch.tensor([parse_write(model, s).position(model) for s in writes], device=dev)
    r_ord = torch.tensor([parse_read(model, s).position(model) for s in reads], device=dev)
    ok = w_ord[:, None] < r_ord[None, :]
    vals = torch.where(ok, sq.clamp_min(0).sqrt(), torch.full_like(sq, float("nan")))
    return VirtualWeightNorms(
        values=vals.to(dtype),
        writes=writes,
        reads=reads,
        convention=convention(model, fold_norms),
        model_name=model.name,
        fold_norms=fold_norms,
    )
