"""AttributionGraph: the nodes and edges of one prompt's exact attribution graph, pruning and scores.

Nodes are ordered features, error nodes (layer-major, then position), token embeddings, the output,
with ``adjacency[target, source]`` the direct effect of source on target. Influence (on the output):
with Â the adjacency with |·| taken and each row normalised to sum 1, influence = w (Â + Â² + …) =
w ((I − Â)⁻¹ − I), w the outputs' weights (probabilities of the top logits, or 1 for one target; the
graph is acyclic, so the series ends). Pruning keeps
the nodes holding ``node_threshold`` of the total influence (tokens and the output always), then the
edges holding ``edge_threshold`` of the edge influence Â_{ij}·(influence_i + w_i), then drops feature and
error nodes left without an outgoing edge and features left without an incoming one, until nothing
changes. The replacement score is token influence / (token + error influence); the completeness score is
Σ_i (1 − Σ_{j error} Â_{ij})·(influence_i + w_i) / Σ_i (influence_i + w_i). docs/math.md §26.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Optional, Sequence, Union

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result
from interp._validate import is_real
from interp.errors import ArgumentError
from interp.features._faithfulness import GRAPH_THRESHOLDS, GraphFaithfulness, graph_faithfulness
from interp.dictionaries import CrossLayerTranscoder

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.plots import FeatureGraphView

__all__ = ["AttributionGraph"]


def _normalize(A: Tensor) -> Tensor:
    a = A.abs()
    return a / a.sum(1, keepdim=True).clamp_min(1e-10)


def _influence(An: Tensor, w: Tensor) -> Tensor:
    """w Â + w Â² + … (Â nilpotent on an acyclic graph)."""
    cur = w @ An
    total = cur.clone()
    for _ in range(An.shape[0] + 1):
        if not bool(cur.any()):
            break
        cur = cur @ An
        total += cur
    return total


def _threshold(scores: Tensor, frac: float) -> Tensor:
    s = torch.sort(scores.flatten(), descending=True).values
    cum = torch.cumsum(s, 0) / s.sum().clamp_min(1e-30)
    i = min(int(torch.searchsorted(cum, torch.tensor(frac, dtype=cum.dtype, device=cum.device))), len(s) - 1)
    return s[i]


def check_thresholds(node_threshold: Any, edge_threshold: Any) -> None:
    """Pruning thresholds are fractions of influence in (0, 1]."""
    for name, v in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not is_real(v) or not 0.0 < v <= 1.0:
            raise ArgumentError(f"{name}={v!r} must be a number in (0, 1] (the fraction of influence kept)")


@dataclass(frozen=True)
class AttributionGraph(Result):
    """One prompt's attribution graph (module docstring and :func:`interp.features.attribution_graph`).

    ``adjacency`` [N, N] (target, source); ``bias`` [N] each target's constant term; ``value`` [N] each
    target's real value (a feature's pre-activation, an output logit); ``activation`` [N] a feature's
    activation, ‖·‖ of an error node's or embedding's vector; ``output_weight`` [N] each output's weight w
    (its probability for top logits, 1 for one target; None = 1 on every output); ``output_prob`` [N] the model's own
    probability of each output's token at the real forward (of the target for a logit difference target − wrong; 0
    elsewhere; None for a graph saved before it was recorded); ``token_strs`` the prompt's
    tokens and ``output_token_strs`` the outputs' tokens (``target_ids``) as text, when the model has a tokenizer;
    ``logit_effect_ids`` / ``logit_effect_values`` [N, 2k] each feature's k most promoted then k most suppressed
    tokens per unit activation, directly at its position (W_dec[f] through the final norm with that position's
    frozen scale, then W_U; ids −1 for other nodes), ``logit_effect_strs`` their text. ``node_threshold`` and
    ``edge_threshold``: the graph's pruning thresholds, the defaults of :meth:`prune` and :meth:`export`.
    ``constant_prefix``: the leading positions whose MLP writes the graph holds as constants (no feature nodes, error
    nodes without edges; :func:`interp.features.attribution_graph`'s argument; 0 for a graph saved before it was
    recorded).
    Rows of the table: one per node, with its ``influence`` on the outputs and ``direct`` = Σ_k w_k · its edge
    into output k.
    """

    adjacency: Tensor
    bias: Tensor
    value: Tensor
    activation: Tensor
    node_labels: list[str]
    node_kind: list[str]
    node_layer: list[int]
    node_pos: list[int]
    node_feature: list[int]
    tokens: list[int]
    target_ids: list[int]
    target: str
    closure_error: float
    relative_error: float
    n_layers: int
    model_name: str
    output_weight: Optional[Tensor] = None
    output_prob: Optional[Tensor] = None
    token_strs: Optional[list[str]] = None
    output_token_strs: Optional[list[str]] = None
    logit_effect_ids: Optional[Tensor] = None
    logit_effect_values: Optional[Tensor] = None
    logit_effect_strs: Optional[list[list[str]]] = None
    node_threshold: float = 0.8
    edge_threshold: float = 0.98
    constant_prefix: int = 0

    label_column: ClassVar[str] = "node"
    default_by: ClassVar[str] = "influence"
    default_absolute: ClassVar[bool] = True

    @property
    def labels(self) -> list[str]:
        return list(self.node_labels)

    @property
    def n_nodes(self) -> int:
        return len(self.node_labels)

    def __repr__(self) -> str:
        """A short summary: sizes, closure, the two scores and the most influential feature nodes."""
        kinds = {k: self.node_kind.count(k) for k in ("feature", "error", "token", "logit")}
        n_edges = int((self.adjacency != 0).sum())
        infl = self.influence()
        feats = [i for i, k in enumerate(self.node_kind) if k == "feature"]
        top = sorted(feats, key=lambda i: -abs(float(infl[i])))[:3]
        tops = ", ".join(f"{self.node_labels[i]} ({float(infl[i]):.3g})" for i in top)
        return (
            f"AttributionGraph({self.model_name!r}, {len(self.tokens)} tokens → {self.target}: {self.n_nodes} nodes "
            f"({kinds['feature']} features, {kinds['error']} errors, {kinds['token']} tokens, {kinds['logit']} "
            f"outputs), {n_edges} edges; closure_error={self.closure_error:.2e}, relative_error="
            f"{self.relative_error:.2e}; replacement {self.replacement_score():.3f}, completeness "
            f"{self.completeness_score():.3f}; top features by influence: {tops or 'none'})"
        )

    def _mask(self, kind: str) -> Tensor:
        return torch.tensor([k == kind for k in self.node_kind], dtype=torch.bool, device=self.adjacency.device)

    def _logit_weights(self) -> Tensor:
        """w: each output's weight (its probability for top logits; 1 for one target), 0 elsewhere."""
        if self.output_weight is not None:
            return self.output_weight.to(self.adjacency.dtype)
        return self._mask("logit").to(self.adjacency.dtype)

    def influence(self) -> Tensor:
        """Each node's influence on the output [N] (module docstring)."""
        return _influence(_normalize(self.adjacency), self._logit_weights())

    def to_dataframe(self) -> pd.DataFrame:
        direct = self._logit_weights() @ self.adjacency  # Σ_outputs w_k · edge into output k
        return pd.DataFrame(
            {
                "node": self.node_labels,
                "kind": self.node_kind,
                "layer": self.node_layer,
                "pos": self.node_pos,
                "feature": self.node_feature,
                "activation": self.activation.tolist(),
                "value": self.value.tolist(),
                "bias": self.bias.tolist(),
                "direct": direct.tolist(),
                "influence": self.influence().tolist(),
            }
        )

    def _row(self, index: int) -> Any:
        return self.to_dataframe().iloc[index].to_dict()

    def edges(self) -> pd.DataFrame:
        """The nonzero edges: ``source``, ``target``, ``weight``, largest |weight| first."""
        t, s = self.adjacency.nonzero(as_tuple=True)
        w = self.adjacency[t, s]
        order = w.abs().argsort(descending=True)
        return pd.DataFrame(
            {
                "source": [self.node_labels[i] for i in s[order].tolist()],
                "target": [self.node_labels[i] for i in t[order].tolist()],
                "weight": w[order].tolist(),
            }
        )

    def prune(
        self, node_threshold: Optional[float] = None, edge_threshold: Optional[float] = None
    ) -> "AttributionGraph":
        """The graph restricted to the nodes and edges that carry the given fractions of influence (module
        docstring; None: the graph's own thresholds); pruned edges are zero. ``bias``, ``value`` and the closure
        fields stay those of the full graph (a pruned graph does not close)."""
        node_threshold = self.node_threshold if node_threshold is None else node_threshold
        edge_threshold = self.edge_threshold if edge_threshold is None else edge_threshold
        check_thresholds(node_threshold, edge_threshold)
        A, w = self.adjacency, self._logit_weights()
        keep_always = self._mask("token") | self._mask("logit")
        feat, mid = self._mask("feature"), self._mask("feature") | self._mask("error")
        infl = _influence(_normalize(A), w)
        node = (infl >= _threshold(infl, node_threshold)) | keep_always
        P = A.clone()
        P[~node] = 0
        P[:, ~node] = 0
        Pn = _normalize(P)
        scores = Pn * (_influence(Pn, w) + w)[:, None]
        edge = scores >= _threshold(scores, edge_threshold)
        old = None
        while old is None or not torch.equal(old, node):
            old = node.clone()
            edge[~node] = False
            edge[:, ~node] = False
            node = node & ~(mid & ~edge.any(0))  # features and errors need an outgoing edge
            node = node & ~(feat & ~edge.any(1))  # features need an incoming edge
        edge[~node] = False
        edge[:, ~node] = False
        idx = node.nonzero(as_tuple=True)[0]
        sub = (A * edge)[idx][:, idx]
        pick = lambda xs: [xs[i] for i in idx.tolist()]  # noqa: E731
        return AttributionGraph(
            adjacency=sub.contiguous(),
            bias=self.bias[idx].contiguous(),
            value=self.value[idx].contiguous(),
            activation=self.activation[idx].contiguous(),
            node_labels=pick(self.node_labels),
            node_kind=pick(self.node_kind),
            node_layer=pick(self.node_layer),
            node_pos=pick(self.node_pos),
            node_feature=pick(self.node_feature),
            tokens=list(self.tokens),
            target_ids=list(self.target_ids),
            target=self.target,
            closure_error=self.closure_error,
            relative_error=self.relative_error,
            n_layers=self.n_layers,
            model_name=self.model_name,
            output_weight=None if self.output_weight is None else self.output_weight[idx].contiguous(),
            output_prob=None if self.output_prob is None else self.output_prob[idx].contiguous(),
            token_strs=self.token_strs,
            output_token_strs=self.output_token_strs,
            logit_effect_ids=None if self.logit_effect_ids is None else self.logit_effect_ids[idx].contiguous(),
            logit_effect_values=None
            if self.logit_effect_values is None
            else self.logit_effect_values[idx].contiguous(),
            logit_effect_strs=None if self.logit_effect_strs is None else pick(self.logit_effect_strs),
            node_threshold=float(node_threshold),
            edge_threshold=float(edge_threshold),
            constant_prefix=self.constant_prefix,
        )

    def export(
        self,
        path: Union[str, os.PathLike],
        *,
        slug: Optional[str] = None,
        scan: Optional[str] = None,
        node_threshold: Optional[float] = None,
        edge_threshold: Optional[float] = None,
    ) -> Path:
        """Write the graph, pruned at the thresholds (None: the graph's own), as circuit-tracer's graph JSON (the
        schema its frontend and Neuronpedia read; unique node ids) to ``path`` atomically; ``slug`` defaults to the
        file's stem, ``scan`` (the transcoder set's name) to the model's name. Returns the path."""
        from interp.features._export import write_graph_json

        return write_graph_json(
            self,
            path,
            slug=slug,
            scan=scan,
            node_threshold=self.node_threshold if node_threshold is None else node_threshold,
            edge_threshold=self.edge_threshold if edge_threshold is None else edge_threshold,
        )

    def show(self, *, contexts: Optional[Mapping[str, Sequence[str]]] = None, **kwargs: Any) -> "FeatureGraphView":
        """The interactive viewer of this graph (Jupyter displays it): nodes by layer × position on one canvas,
        sliders for the nodes and edges drawn, hover for a node's logit effects, strongest edges and — from
        ``contexts`` (feature label → strings) — its top activating contexts
        (:func:`interp.plots.feature_graph_view`, whose keyword arguments ``kwargs`` are)."""
        from interp.plots import feature_graph_view

        return feature_graph_view(self, contexts=contexts, **kwargs)

    def to_html(
        self, path: Union[str, os.PathLike], *, contexts: Optional[Mapping[str, Sequence[str]]] = None, **kwargs: Any
    ) -> Path:
        """Write :meth:`show`'s viewer as one self-contained HTML page (no network request) to ``path``,
        atomically; returns the path."""
        from interp._io import write_atomic

        if not isinstance(path, (str, os.PathLike)):
            raise ArgumentError(f"path={path!r} must be a str or os.PathLike naming an .html file")
        out = Path(path)
        write_atomic(out, self.show(contexts=contexts, **kwargs).to_html_page().encode("utf-8"))
        return out

    def replacement_score(self) -> float:
        """Token influence / (token influence + error influence) on the output (module docstring)."""
        infl = self.influence()
        tok, err = float(infl[self._mask("token")].sum()), float(infl[self._mask("error")].sum())
        return tok / (tok + err) if tok + err > 0 else float("nan")

    def completeness_score(self) -> float:
        """Σ_i (1 − error share of node i's normalised inputs)·(influence_i + w_i) / Σ_i (influence_i + w_i)."""
        An = _normalize(self.adjacency)
        w = self._logit_weights()
        out = _influence(An, w) + w
        non_err = 1 - An[:, self._mask("error")].sum(1)
        return float((non_err * out).sum() / out.sum())

    def faithfulness(
        self,
        model: Any,
        transcoders: Union[Sequence[Any], CrossLayerTranscoder],
        *,
        thresholds: Sequence[float] = GRAPH_THRESHOLDS,
        edge_threshold: Optional[float] = None,
        ablation: str = "mean",
        reference: Any = None,
        frozen_attention: bool = True,
    ) -> GraphFaithfulness:
        """How much of the graph's output its pruned graphs recover: for each node threshold t in ``thresholds``
        (increasing, each in (0, 1]), the replacement model over ``transcoders`` (those the graph was built with:
        per-layer transcoders or a :class:`~interp.features.CrossLayerTranscoder`, whose dropped features are ablated in
        every layer they write) is run with every feature and error node that :meth:`prune` (t, ``edge_threshold``;
        None: the graph's) drops ablated — ``ablation`` "mean" (each feature's mean activation and each layer's mean
        error vector over the prompt's positions, or over the ``reference`` prompts') or "zero" — and the kept features
        recomputed from their inputs; faithfulness (M(pruned) − M(no nodes)) / (M(all nodes) − M(no nodes)), with CPR
        and CMD over t. ``frozen_attention``: attention patterns and norm scales frozen at the real forward (the graph's
        model) or recomputed. The positions the graph holds (``constant_prefix``) keep their real writes and are left
        out of the means. M(all nodes) is the model's own output (closure; past the tolerance a ClosureWarning).
        docs/math.md §32."""
        check_thresholds(1.0, self.edge_threshold if edge_threshold is None else edge_threshold)
        try:
            ts = [] if isinstance(thresholds, str) else [t for t in thresholds]
        except TypeError:
            ts = []
        if not ts:
            raise ArgumentError(f"thresholds={thresholds!r} must be a non-empty sequence of node thresholds in (0, 1]")
        for i, t in enumerate(ts):
            if not is_real(t) or not 0.0 < t <= 1.0:
                raise ArgumentError(
                    f"thresholds[{i}]={t!r} must be a number in (0, 1] (the fraction of influence kept)"
                )
        if any(b <= a for a, b in zip(ts, ts[1:])):
            raise ArgumentError(f"thresholds={list(ts)!r} must be increasing (the curve's axis)")
        return graph_faithfulness(
            self,
            model,
            transcoders,
            thresholds=ts,
            edge_threshold=self.edge_threshold if edge_threshold is None else edge_threshold,
            ablation=ablation,
            reference=reference,
            frozen_attention=frozen_attention,
        )

    def plot(self, *, max_edges: int = 200) -> "go.Figure":
        """Nodes at (position, layer) — embeddings at layer −1, the output above the last layer — and the
        ``max_edges`` largest edges as lines, blue positive, red negative
        (:func:`interp.plots.attribution_graph_figure`)."""
        from interp.plots import attribution_graph_figure

        return attribution_graph_figure(self, max_edges=max_edges)
