"""The composition graph: heads as nodes, composition edges (src → dst, kind, score) between them.

A head B in a later layer *composes* with a head A in an earlier layer when B's Q, K or V
input reads what A's OV circuit writes (Elhage et al. 2021 §4 "Composition"). With
transformer-lens's row-vector convention (docs/math.md, composition scores)

    score_Q(A→B) = ‖W_OV^A W_QK^B‖_F   / (‖W_OV^A‖_F ‖W_QK^B‖_F)
    score_K(A→B) = ‖W_OV^A W_QK^Bᵀ‖_F  / (‖W_OV^A‖_F ‖W_QK^B‖_F)
    score_V(A→B) = ‖W_OV^A W_OV^B‖_F   / (‖W_OV^A‖_F ‖W_OV^B‖_F)

:func:`composition_edges` selects the edges of the circuit diagram from one or several
[n_layers, n_heads, n_layers, n_heads] score tensors indexed ``[src_layer, src_head, dst_layer,
dst_head]`` (``CompositionScores.scores`` from :func:`interp.circuits.composition_scores`), or from
a table of virtual-weight norms ‖W_O^A W_I^B‖ (:func:`interp.circuits.virtual_weight_norms`; its
head reads ``L2.attn.q/k/v[H…]`` become Q/K/V edges, a KV head's edge going to every query head of
its GQA group). An edge A→B is kept when A's layer is earlier than B's and the score passes
``threshold`` (or is among the ``max_edges`` largest of its kind). The result is a
:class:`CompositionGraph`; its figure is :func:`interp.plots.composition_graph_figure`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from interp._result import Result
from interp._validate import check_finite_float, check_positive_int
from interp.errors import ArgumentError, LabelError, ShapeError
from interp.labels import ARROW, Head, HeadInput, parse

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["CompositionGraph", "composition_edges", "composition_graph", "composition_graph_json"]

_KINDS = ("Q", "K", "V")


@dataclass(frozen=True, eq=False)
class CompositionGraph(Result):
    """Nodes (heads) and edges (src → dst, kind, score) of a composition circuit.

    ``nodes``: dicts with ``label`` ('L3.H5'), ``layer``, ``head`` and optional ``value``
    (e.g. the head's logit attribution); ``edges``: dicts with ``src``, ``dst``, ``kind``
    ('Q'|'K'|'V'|other) and ``score``. ``.to_json()`` is what ``export(graph, 'x.json')`` writes.

    Contract (:class:`interp._result.Result`): rows are edges, labelled ``K:L0.H1→L1.H2`` (kind, then
    src→dst); ``graph["K:L0.H1→L1.H2"]`` is that edge's dict; ``to_dataframe()`` column ``edge``;
    ``top`` ranks by ``score``; ``plot()`` draws the diagram; ``save``/``load`` round-trip it.
    """

    label_column: ClassVar[str] = "edge"
    default_by: ClassVar[str] = "score"

    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    threshold: Optional[float] = None
    max_edges: Optional[int] = None
    n_layers: int = 0
    n_heads: int = 0
    node_value_name: str = "value"
    title: str = "Composition graph"
    meta: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def _edge_label(e: Mapping[str, Any]) -> str:
        return f"{e['kind']}:{e['src']}{ARROW}{e['dst']}"

    @property
    def labels(self) -> list[str]:
        """``kind:src→dst`` of every edge, in :attr:`edges` order."""
        return [self._edge_label(e) for e in self.edges]

    def _row(self, index: int) -> dict[str, Any]:
        """The edge as a dict: src, dst, kind, score."""
        return dict(self.edges[index])

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "edges": self.edges,
            "threshold": self.threshold,
            "max_edges": self.max_edges,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "node_value_name": self.node_value_name,
            "meta": self.meta,
        }

    def to_json(self, *, indent: Optional[int] = 2) -> str:
        """The nodes and edges as JSON (what ``export(graph, 'x.json')`` writes)."""
        return json.dumps(self.to_json_dict(), indent=indent)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per edge: edge label, src, dst, kind, score (sorted by score, largest first)."""
        df = pd.DataFrame(self.edges, columns=["src", "dst", "kind", "score"])
        df.insert(0, "edge", self.labels)
        return df.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)

    def plot(self) -> go.Figure:
        """The circuit diagram (:func:`interp.plots.composition_graph_figure`)."""
        from interp.plots import composition_graph_figure  # plots reads the result's attributes; imported on use

        return composition_graph_figure(self)


def _head(text: Any) -> Optional[tuple[int, int]]:
    """``'L3.H5'`` (or a Head) -> (3, 5); any other label -> None."""
    try:
        lab = parse(text)
    except LabelError:
        return None
    return (lab.layer, lab.head) if isinstance(lab, Head) else None


def _from_virtual_weights(vw: Any) -> dict[str, np.ndarray]:
    """Head-to-head Q/K/V edges from a VirtualWeightNorms-like table (``values`` [writes, reads]).

    A read ``L2.attn.k[H1]`` is a KV head; under GQA every query head of its group gets the edge
    (query head h reads KV head h // (n_heads / n_kv_heads)).
    """
    vals = torch.as_tensor(vw.values).detach().double().cpu().numpy()
    if vals.ndim != 2:
        raise ShapeError(f"values must be [n_writes, n_reads], got shape {vals.shape}")
    writes = {i: lh for i, w in enumerate(vw.writes) if (lh := _head(w)) is not None}
    reads: dict[int, tuple[int, str, int]] = {}
    for j, r in enumerate(vw.reads):
        try:
            lab = parse(r)
        except LabelError:
            continue
        if isinstance(lab, HeadInput):
            reads[j] = (lab.layer, lab.which.upper(), lab.head)
    if not writes or not reads:
        raise ArgumentError("the virtual-weight table has no head writes ('L3.H5') or head reads ('L3.attn.q[H5]')")
    n_l = 1 + max([l for l, _ in writes.values()] + [l for l, _, _ in reads.values()])
    n_h = 1 + max([h for _, h in writes.values()] + [g for _, k, g in reads.values() if k == "Q"])
    n_kv = 1 + max([g for _, k, g in reads.values() if k != "Q"], default=n_h - 1)
    group = max(1, n_h // n_kv)
    out = {k: np.full((n_l, n_h, n_l, n_h), np.nan) for k in _KINDS}
    for j, (l2, k, g) in reads.items():
        dst_heads = [g] if k == "Q" else list(range(g * group, (g + 1) * group))
        for i, (l1, h1) in writes.items():
            for h2 in dst_heads:
                out[k][l1, h1, l2, h2] = vals[i, j]
    return out


def _as_array(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ShapeError(f"{name} is on the 'meta' device (a tensor without data); pass a real tensor")
        return x.detach().double().cpu().numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"{name} must be a tensor or array of scores, got {type(x).__name__}") from e


def _as_score_dict(scores: Any, kind: Optional[str]) -> dict[str, np.ndarray]:
    """{kind: [L, H, L, H] array} from a result, a tensor, or a mapping / list of them."""
    if all(hasattr(scores, a) for a in ("values", "writes", "reads")):
        return _from_virtual_weights(scores)

    def one(obj: Any, k: Optional[str]) -> tuple[str, np.ndarray]:
        arr = getattr(obj, "scores", obj)
        k = k or getattr(obj, "kind", None) or "score"
        a = _as_array(arr, "scores")
        if a.ndim != 4 or a.shape[0] != a.shape[2] or a.shape[1] != a.shape[3]:
            raise ShapeError(f"scores (kind {k!r}) must be [n_layers, n_heads, n_layers, n_heads], got shape {a.shape}")
        return str(k).upper() if str(k).upper() in _KINDS else str(k), a

    if isinstance(scores, Mapping):
        out = dict(one(v, str(k)) for k, v in scores.items())
    elif isinstance(scores, (list, tuple)):
        out = dict(one(v, None) for v in scores)
    else:
        out = dict([one(scores, kind)])
    if not out:
        raise ArgumentError("scores is empty; pass CompositionScores (or [L,H,L,H] tensors) for at least one kind")
    shapes = {a.shape for a in out.values()}
    if len(shapes) != 1:
        raise ShapeError(f"score tensors of different kinds have different shapes {sorted(shapes)}")
    return out


def _head_set(heads: Optional[Sequence[Any]], n_l: int, n_h: int) -> Optional[set[tuple[int, int]]]:
    if heads is None:
        return None
    out = set()
    for h in heads:
        lh = (
            _head(h)
            if isinstance(h, (str, Head))
            else (tuple(int(x) for x in h) if isinstance(h, (tuple, list)) else None)
        )
        if lh is None or len(lh) != 2 or not (0 <= lh[0] < n_l and 0 <= lh[1] < n_h):
            raise ArgumentError(
                f"heads contains {h!r}; give labels like 'L3.H5' or (layer, head) pairs "
                f"with layer < {n_l} and head < {n_h}"
            )
        out.add((lh[0], lh[1]))
    return out


def composition_edges(
    scores: Any,
    *,
    kind: Optional[str] = None,
    heads: Optional[Sequence[Any]] = None,
    threshold: Optional[float] = None,
    max_edges: Optional[int] = 40,
    node_values: Optional[Mapping[str, float]] = None,
    node_value_name: str = "value",
    title: str = "Composition graph",
) -> CompositionGraph:
    """The edges of the circuit diagram (see module docstring) as a :class:`CompositionGraph`.

    ``scores``: CompositionScores / [L,H,L,H] tensor, or a mapping kind -> those (e.g.
    ``{"Q": q, "K": k, "V": v}``), or VirtualWeightNorms; ``heads``: keep only edges between these
    heads (labels or (layer, head)); ``threshold``: keep scores ≥ threshold; ``max_edges``: at most
    this many edges per kind (largest first; None for no cap); ``node_values``: e.g. each head's
    logit attribution, shown as node colour.
    """
    by_kind = _as_score_dict(scores, kind)
    n_l, _, _, n_h = next(iter(by_kind.values())).shape
    keep = _head_set(heads, n_l, n_h)
    if threshold is not None:
        threshold = check_finite_float("threshold", threshold)
    check_positive_int("max_edges", max_edges, allow_none=True)
    # earlier layer -> later layer only
    lsrc = np.arange(n_l)[:, None, None, None]
    ldst = np.arange(n_l)[None, None, :, None]
    valid = np.broadcast_to(lsrc < ldst, (n_l, n_h, n_l, n_h)).copy()
    if keep is not None:
        sel = np.zeros((n_l, n_h), dtype=bool)
        for l, h in keep:
            sel[l, h] = True
        valid &= sel[:, :, None, None] & sel[None, None, :, :]
    edges: list[dict[str, Any]] = []
    for k, a in by_kind.items():
        ok = valid & np.isfinite(a)
        if threshold is not None:
            ok &= a >= threshold
        idx = np.argwhere(ok)
        vals = a[ok]
        order = np.argsort(-vals, kind="stable")
        if max_edges is not None:
            order = order[:max_edges]
        for i in order:
            l1, h1, l2, h2 = (int(x) for x in idx[i])
            edges.append({"src": str(Head(l1, h1)), "dst": str(Head(l2, h2)), "kind": k, "score": float(vals[i])})
    labels: set[str] = set()
    for e in edges:
        labels.update((e["src"], e["dst"]))
    if keep is not None:
        labels.update(str(Head(l, h)) for l, h in keep)
    nodes = []
    for l, h in sorted(lh for lab in labels if (lh := _head(lab)) is not None):
        lab = str(Head(l, h))
        node: dict[str, Any] = {"label": lab, "layer": l, "head": h}
        if node_values is not None and lab in node_values:
            node["value"] = float(node_values[lab])
        nodes.append(node)
    return CompositionGraph(
        nodes=nodes,
        edges=edges,
        threshold=threshold,
        max_edges=max_edges,
        n_layers=n_l,
        n_heads=n_h,
        node_value_name=node_value_name,
        title=title,
        meta={"kinds": list(by_kind)},
    )


def composition_graph(scores: Any, **kwargs: Any) -> go.Figure:
    """The circuit diagram as a plotly Figure: ``composition_edges(scores, **kwargs).plot()``.

    Also accepts a :class:`CompositionGraph` directly.
    """
    graph = scores if isinstance(scores, CompositionGraph) else composition_edges(scores, **kwargs)
    return graph.plot()


def composition_graph_json(scores: Any, **kwargs: Any) -> str:
    """The circuit diagram's nodes and edges as a JSON string (see :class:`CompositionGraph`)."""
    graph = scores if isinstance(scores, CompositionGraph) else composition_edges(scores, **kwargs)
    return graph.to_json()
