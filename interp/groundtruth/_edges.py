"""The true edge set of a tracr-compiled model, read mechanically off its weights and residual labels.

Tracr gives every residual dimension a label (``"tokens:a"``, ``"indices:2"``, ``"length:5"``,
``"frac_prevs"``) and every RASP operation its own subspace, so which component talks to which is
a property of the weights alone. With writes and reads in transformer-lens's row-vector layout,

    writes(w) = {d : column d of w's output matrix ≠ 0}     W_E, W_pos, W_O^h [d_head, d_model], W_out^l
    reads(r)  = {d : row d of r's input matrix ≠ 0}         W_Q^h, W_K^h, W_V^h [d_model, d_head], W_in^l, W_U

    w → r is a true edge  ⇔  w precedes r  and  (writes(w) ∩ reads(r)) \\ ignored ≠ ∅

(|entry| > ``atol`` counts as nonzero; tracr's weights are exact, so ``atol=0``). Writers: ``embed``
(token embedding), ``pos_embed``, every head ``L{l}.H{h}`` and MLP ``L{l}.mlp``; readers: every head's
``q``/``k``/``v`` input, every ``L{l}.mlp.in`` and ``unembed`` (the metric's read). A head of layer l
is read by layers > l and by the MLP of layer l; an MLP of layer l by layers > l; both by ``unembed``.
Biases are not writers (they are never ablated), and zero-padded heads or empty MLPs write nothing,
so they have no edges.

Ignored dimensions, as ACDC's and InterpBench's tracr ground truths do (InterpBench
``tracr_circuits_builder``: "the writer of label X → every q/k/v/MLP input reading X, ignoring `one`
and BOS"): ``one`` (the constant 1 the embedding writes at every position, which MLPs and queries
read as a bias) and the BOS token's dimension ``tokens:BOS`` (which every key reads so that a
query attending to nothing falls back on BOS). Both are constant across inputs at each position:
an edge through them carries no information about the input, and any mean or resample ablation
leaves them unchanged.

The rule is the zero-ablation truth (ACDC's tracr ground truth is zero-ablation too): zeroing any
one true edge's write on the non-ignored dimensions changes the logits on some input, and the circuit
alone reproduces every logit. Ablations that keep the position (per-position mean, resample from other
inputs) cannot see some true edges at all: every ``pos_embed`` edge (its write depends on the position
only), and reverse's ``embed → L0.attn.q/k`` (its "all true" selector reads the token one-hot, whose sum
is 1 at every position). A method scored under those ablations against this truth misses them by
construction, not by fault.

The edge is recorded with the subspaces (labels before the colon) it goes through; since each
subspace has one writer in tracr, this equals the subspace-level rule "w writes subspace X, r reads X".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence, Union

import pandas as pd
import torch
from torch import Tensor

from interp.errors import ArgumentError
from interp.labels import Edge, Embed, Head, HeadInput, Mlp, MlpInput, Output, parse
from interp.models import ArchInfo, Weights, sees

__all__ = ["TrueCircuit", "tracr_circuit", "edges_from_residual_labels", "DEFAULT_IGNORED"]

DEFAULT_IGNORED = ("one", "tokens:BOS")


@dataclass(frozen=True)
class TrueCircuit:
    """A circuit known by construction: its edges (writer → reader) and how each was established.

    ``via[i]`` says why ``edges[i]`` is in it (the residual subspaces it goes through, or the
    mechanism); ``convention`` states the rule in words. ``edge in circuit`` accepts an
    :class:`~interp.labels.Edge` or its text.
    """

    name: str
    edges: tuple[Edge, ...]
    via: tuple[str, ...]
    convention: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.edges) != len(self.via):
            raise ArgumentError(f"edges ({len(self.edges)}) and via ({len(self.via)}) must have one entry per edge")

    @property
    def labels(self) -> list[str]:
        """The edges' text labels (``"L0.H0→L1.attn.q[H0]"``)."""
        return [str(e) for e in self.edges]

    def __len__(self) -> int:
        return len(self.edges)

    def __iter__(self):
        return iter(self.edges)

    def __contains__(self, edge: Union[Edge, str]) -> bool:
        return parse(edge) in set(self.edges)

    def truth(self, edges: Iterable[Union[Edge, str]]) -> Tensor:
        """A bool tensor: which of ``edges`` (a candidate edge list, e.g. a circuit graph's) are true."""
        true = set(self.edges)
        return torch.tensor([parse(e) in true for e in edges], dtype=torch.bool, device="cpu")

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "edge": self.labels,
                "writer": [str(e.writer) for e in self.edges],
                "reader": [str(e.reader) for e in self.edges],
                "via": list(self.via),
            }
        )


def _nonzero_columns(w: Tensor, atol: float) -> Tensor:
    """Bool [d_model]: which residual dimensions a write matrix [rows, d_model] touches."""
    return (w.abs() > atol).any(dim=0)


def _nonzero_rows(w: Tensor, atol: float) -> Tensor:
    """Bool [d_model]: which residual dimensions a read matrix [d_model, cols] sees."""
    return (w.abs() > atol).any(dim=1)


def edges_from_residual_labels(
    weights: Weights,
    residual_labels: Sequence[str],
    *,
    arch: ArchInfo,
    ignored: Sequence[str] = DEFAULT_IGNORED,
    atol: float = 0.0,
    name: str = "tracr",
) -> TrueCircuit:
    """The true edges of a labelled-residual model (see the module docstring for the rule).

    "w precedes r" is the model's block program (:func:`interp.models.sees`).
    """
    labels = [str(x) for x in residual_labels]
    d_model = weights.W_E.shape[1]
    if len(labels) != d_model:
        raise ArgumentError(f"residual_labels has {len(labels)} entries; the model's d_model is {d_model}")
    unknown = [x for x in ignored if x not in labels]
    if unknown:
        raise ArgumentError(f"ignored={list(ignored)} names {unknown}, which are not residual labels")
    if weights.W_pos is None or weights.W_U is None:
        raise ArgumentError("weights must have learned positions (W_pos) and an unembedding (W_U), as tracr models do")
    keep = torch.tensor([x not in set(ignored) for x in labels])
    subspace = [x.split(":", 1)[0] for x in labels]
    W = weights.to(dtype=torch.float64, device="cpu")
    W_pos, W_U = W.W_pos, W.W_U
    if W_pos is None or W_U is None:  # checked above on the model's own dtype; the cast keeps them
        raise ArgumentError("weights must have learned positions (W_pos) and an unembedding (W_U)")
    L, H = W.W_Q.shape[0], W.W_Q.shape[1]
    qkv: tuple[tuple[Literal["q", "k", "v"], Tensor], ...] = (("q", W.W_Q), ("k", W.W_K), ("v", W.W_V))

    writers: list[tuple[Any, Tensor]] = [  # (label, which dimensions it writes)
        (Embed("token"), _nonzero_columns(W.W_E, atol)),
        (Embed("pos"), _nonzero_columns(W_pos, atol)),
    ]
    readers: list[tuple[Any, Tensor]] = []  # (label, which dimensions it reads)
    for l in range(L):
        for h in range(H):
            writers.append((Head(l, h), _nonzero_columns(W.W_O[l, h], atol)))
            for which, M in qkv:
                readers.append((HeadInput(l, which, h), _nonzero_rows(M[l, h], atol)))
        writers.append((Mlp(l), _nonzero_columns(W.W_out[l], atol)))
        readers.append((MlpInput(l, "in"), _nonzero_rows(W.W_in[l], atol)))
    readers.append((Output("unembed"), _nonzero_rows(W_U, atol)))

    edges, via = [], []
    for wlab, wmask in writers:
        for rlab, rmask in readers:
            if not sees(arch, str(wlab), str(rlab)):
                continue
            shared = wmask & rmask & keep
            if shared.any():
                edges.append(Edge(wlab, rlab))
                via.append(", ".join(sorted({subspace[i] for i in torch.nonzero(shared).flatten().tolist()})))
    order = sorted(range(len(edges)), key=lambda i: (edges[i].reader, edges[i].writer))
    return TrueCircuit(
        name=name,
        edges=tuple(edges[i] for i in order),
        via=tuple(via[i] for i in order),
        convention=(
            f"w → r iff w writes (nonzero W_E / W_pos / W_O / W_out column, |w| > {atol}) a residual "
            f"dimension that r reads (nonzero W_Q / W_K / W_V / W_in / W_U row), w before r; "
            f"dimensions {list(ignored)} ignored"
        ),
        details={"ignored": list(ignored), "atol": atol},
    )


def tracr_circuit(program: Any, *, ignored: Sequence[str] | None = None, atol: float = 0.0) -> TrueCircuit:
    """The true circuit of a compiled :class:`~interp.groundtruth.TracrProgram` (``one`` and its BOS ignored)."""
    for attr in ("model", "residual_labels", "bos_label", "name"):
        if not hasattr(program, attr):
            raise ArgumentError(
                f"program={type(program).__name__} is not a TracrProgram (no .{attr}); "
                "use interp.groundtruth.compile_program"
            )
    ignored = ("one", program.bos_label) if ignored is None else tuple(ignored)
    return edges_from_residual_labels(
        program.model.weights,
        program.residual_labels,
        arch=program.model.arch,
        ignored=ignored,
        atol=atol,
        name=f"tracr-{program.name}",
    )
