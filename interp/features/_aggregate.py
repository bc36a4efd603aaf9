"""Attribution graphs over a dataset: each prompt's graph, aggregated by the identity of its nodes.

Prompt i (of N) has its attribution graph G_i (:func:`interp.features.attribution_graph`: adjacency A_i, influence
infl_i on its outputs, activations act_i). Each node ν of G_i has an *identity* id(ν) that does not depend on the
prompt's positions:

    feature (l, p, f)   →  L{l}.F{f}@*        (feature f of layer l's transcoder or CLT encoder, at any position)
    error   (l, p)      →  L{l}.mlp_error@*   (layer l's error nodes, every position)
    embedding at p      →  embed[t]           (t the prompt's token at p)
    chosen output       →  answer             (the ``target`` logit, or target − wrong, whichever token each prompt's
                                               answer is: the outputs of a task share one identity)
    top-logit output    →  logit[t]           (the logit of token t, one of a prompt's top logits: no target given)

With S_i(I) = {ν ∈ G_i : id(ν) = I}, an identity I's row and an identity pair's edge J → I are

    influence(I) = (1/N) Σ_i Σ_{ν ∈ S_i(I)} infl_i(ν)          activation(I), direct(I): the same sums of act_i(ν)
    edge(J → I)  = (1/N) Σ_i Σ_{τ ∈ S_i(I)} Σ_{σ ∈ S_i(J)} A_i[τ, σ]           and of direct_i(ν) = Σ_k w_k A_i[k, ν]

— summed over the positions within a prompt, then averaged over all N prompts (a prompt without I contributes 0;
the mean over the prompts where I is active is the sum over n_active(I)). The counts: n_active(I) = #{i : S_i(I) ≠ ∅}
(the prompts whose graph has the identity as a node), n_kept(I) = the prompts where one of those nodes survives
:meth:`AttributionGraph.prune` at the thresholds, n_positions(I) = Σ_i |S_i(I)|, and per edge n_prompts(J → I) the
prompts with a nonzero A_i[τ, σ] between them. The result keeps the sums (float64) and counts, so the aggregate of a
union of prompt sets is the sum of the parts' (:meth:`AggregateGraph.combine`): ``cluster=`` shards the prompts over
Ray workers and adds the shards' sums and counts, the same numbers as in process up to the order of the float64
additions. docs/math.md §32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence, Union

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._result import Result
from interp._validate import check_bool, check_positive_int, shardable
from interp.errors import ArgumentError
from interp.features._graph import attribution_graph
from interp.features._replacement import check_replaceable
from interp.features._result import AttributionGraph, check_thresholds
from interp.dictionaries import CrossLayerTranscoder, Transcoder
from interp.labels import Feature, FeatureError
from interp.models import Model
from interp.stream.internal import require_model

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["AggregateGraph", "aggregate_graphs", "one_graph"]

#: the kinds of identity, in the order of the result's rows (the attribution graph's order)
KINDS = ("feature", "error", "token", "logit")

#: the identity of every prompt's chosen output (its ``target`` logit, or target − wrong)
ANSWER = "answer"


@dataclass(frozen=True, eq=False)
class AggregateGraph(Result):
    """Attribution graphs of ``n_prompts`` prompts aggregated by node identity (module docstring; docs/math.md §32).

    One row per identity (``node_labels``: ``L3.F12@*``, ``L3.mlp_error@*``, ``embed[<id>]``, ``answer`` (every
    prompt's chosen output) or ``logit[<id>]`` (a top logit)), ordered features (by layer, feature), error nodes (by
    layer), embeddings (by token id),
    outputs; ``node_kind``, ``node_layer`` (−1 embeddings, n_layers outputs), ``node_feature`` (−1 but features),
    ``node_token`` (the token of an embedding or output, −1 else), ``node_wrong`` (the subtracted token of a logit
    difference, −1 else), ``node_text`` (the token's text, "" else). Sums over prompts and positions (float64):
    ``influence_sum``, ``activation_sum``, ``direct_sum`` [M]; counts [M]: ``n_active``, ``n_kept``, ``n_positions``.
    Edges, sparse: ``edge_index`` [2, E] (target row, source row), ``edge_sum`` [E] (Σ over prompts of the edges
    between the two identities' nodes), ``edge_count`` [E] (prompts with a nonzero one). Means: sum / ``n_prompts``.
    Rows of the table: one per identity (``influence``, ``influence_active`` = sum / n_active, ``activation``,
    ``direct``, the counts); ``top(k)`` and :meth:`plot` by ``direct`` (the direct effect on the answer — on the
    outputs weighted by their probabilities without a target — by magnitude; ``top(k, by="influence")`` for
    influence, which favours early nodes that feed everything, such as layer-0 punctuation features).
    """

    node_labels: list[str]
    node_kind: list[str]
    node_layer: list[int]
    node_feature: list[int]
    node_token: list[int]
    node_wrong: list[int]
    node_text: list[str]
    influence_sum: Tensor = field(repr=False)
    activation_sum: Tensor = field(repr=False)
    direct_sum: Tensor = field(repr=False)
    n_active: Tensor = field(repr=False)
    n_kept: Tensor = field(repr=False)
    n_positions: Tensor = field(repr=False)
    edge_index: Tensor = field(repr=False)
    edge_sum: Tensor = field(repr=False)
    edge_count: Tensor = field(repr=False)
    n_prompts: int
    n_layers: int
    model_name: str
    node_threshold: float = 0.8
    edge_threshold: float = 0.98
    details: dict = field(default_factory=dict, repr=False)

    label_column: ClassVar[str] = "node"
    default_by: ClassVar[str] = "direct"
    default_absolute: ClassVar[bool] = True

    @property
    def labels(self) -> list[str]:
        return list(self.node_labels)

    @property
    def n_nodes(self) -> int:
        return len(self.node_labels)

    @property
    def influence(self) -> Tensor:
        """Each identity's influence on the outputs, summed over its positions, averaged over the prompts [M]."""
        return self.influence_sum / self.n_prompts

    def adjacency(self) -> Tensor:
        """The mean edges as a dense [M, M] (target, source) matrix: edge_sum / n_prompts (M² entries: for small
        aggregates; :meth:`edges` lists the nonzero ones)."""
        A = torch.zeros(self.n_nodes, self.n_nodes, dtype=self.edge_sum.dtype, device=self.edge_sum.device)
        A[self.edge_index[0], self.edge_index[1]] = self.edge_sum / self.n_prompts
        return A

    def __repr__(self) -> str:
        kinds = {k: self.node_kind.count(k) for k in KINDS}
        direct = (self.direct_sum / self.n_prompts).tolist()
        feats = [i for i, k in enumerate(self.node_kind) if k == "feature"]
        top = sorted(feats, key=lambda i: -abs(direct[i]))[:3]
        tops = ", ".join(
            f"{self.node_labels[i]} ({direct[i]:.3g}, {int(self.n_active[i])}/{self.n_prompts} prompts)" for i in top
        )
        return (
            f"AggregateGraph({self.model_name!r}, {self.n_prompts} prompts: {self.n_nodes} identities "
            f"({kinds['feature']} features, {kinds['error']} error layers, {kinds['token']} tokens, {kinds['logit']} "
            f"outputs), {int(self.edge_index.shape[1])} edges; top features by mean direct effect: {tops or 'none'})"
        )

    def to_dataframe(self) -> pd.DataFrame:
        n_active = self.n_active.double()
        return pd.DataFrame(
            {
                "node": self.node_labels,
                "kind": self.node_kind,
                "layer": self.node_layer,
                "feature": self.node_feature,
                "token": self.node_token,
                "wrong": self.node_wrong,
                "text": self.node_text,
                "influence": (self.influence_sum / self.n_prompts).tolist(),
                "influence_active": (self.influence_sum / n_active.clamp_min(1)).tolist(),
                "activation": (self.activation_sum / self.n_prompts).tolist(),
                "direct": (self.direct_sum / self.n_prompts).tolist(),
                "n_active": self.n_active.tolist(),
                "n_kept": self.n_kept.tolist(),
                "n_positions": self.n_positions.tolist(),
            }
        )

    def _row(self, index: int) -> Any:
        return self.to_dataframe().iloc[index].to_dict()

    def edges(self, *, min_prompts: int = 1) -> pd.DataFrame:
        """The aggregated edges present in at least ``min_prompts`` prompts: ``source``, ``target``, ``weight`` (the
        mean over all prompts of the per-prompt sums), ``n_prompts``; largest |weight| first."""
        check_positive_int("min_prompts", min_prompts)
        e = self.to("cpu")
        keep = e.edge_count >= min_prompts
        t, s = e.edge_index[0][keep], e.edge_index[1][keep]
        w = e.edge_sum[keep] / e.n_prompts
        c = e.edge_count[keep]
        order = w.abs().argsort(descending=True, stable=True)
        return pd.DataFrame(
            {
                "source": [e.node_labels[i] for i in s[order].tolist()],
                "target": [e.node_labels[i] for i in t[order].tolist()],
                "weight": w[order].tolist(),
                "n_prompts": c[order].tolist(),
            }
        )

    def plot(self, *, n: int = 30, by: str = "direct") -> "go.Figure":
        """The ``n`` feature identities of largest mean ``by`` ("direct": direct effect on the answer, the default;
        "influence") by magnitude (bars), hover with both and their counts
        (:func:`interp.plots.aggregate_graph_figure`)."""
        from interp.plots import aggregate_graph_figure

        return aggregate_graph_figure(self, n=n, by=by)

    @classmethod
    def combine(cls, parts: Sequence["AggregateGraph"], details: Optional[dict] = None) -> "AggregateGraph":
        """The aggregate of the union of the parts' prompts: identities united (in the canonical order), sums and
        counts added — the one place aggregates combine (in process, prompt by prompt; sharded, shard by shard)."""
        if not parts:
            raise ArgumentError("combine needs at least one AggregateGraph")
        parts = [p.to("cpu") for p in parts]
        first = parts[0]
        for p in parts[1:]:
            if (p.model_name, p.n_layers, p.node_threshold, p.edge_threshold) != (
                first.model_name,
                first.n_layers,
                first.node_threshold,
                first.edge_threshold,
            ):
                raise ArgumentError(
                    f"cannot combine aggregates of {p.model_name!r} (thresholds {p.node_threshold}, "
                    f"{p.edge_threshold}) and {first.model_name!r} ({first.node_threshold}, "
                    f"{first.edge_threshold})"
                )
        meta: dict[str, tuple[str, int, int, int, int, str]] = {}
        for p in parts:
            for i, lab in enumerate(p.node_labels):
                meta.setdefault(
                    lab,
                    (
                        p.node_kind[i],
                        p.node_layer[i],
                        p.node_feature[i],
                        p.node_token[i],
                        p.node_wrong[i],
                        p.node_text[i],
                    ),
                )
        labels = sorted(meta, key=lambda lab: _sort_key(*meta[lab][:5]))
        at = {lab: i for i, lab in enumerate(labels)}
        M = len(labels)
        sums = {
            f: torch.zeros(M, dtype=torch.float64, device="cpu")
            for f in ("influence_sum", "activation_sum", "direct_sum")
        }
        counts = {f: torch.zeros(M, dtype=torch.long, device="cpu") for f in ("n_active", "n_kept", "n_positions")}
        keys, esum, ecount = [], [], []
        for p in parts:
            idx = torch.tensor([at[lab] for lab in p.node_labels], dtype=torch.long, device="cpu")
            for f, v in sums.items():
                v.index_add_(0, idx, getattr(p, f).double())
            for f, c in counts.items():
                c.index_add_(0, idx, getattr(p, f).long())
            keys.append(idx[p.edge_index[0]] * M + idx[p.edge_index[1]])
            esum.append(p.edge_sum.double())
            ecount.append(p.edge_count.long())
        key = torch.cat(keys)
        uniq, inv = torch.unique(key, return_inverse=True)
        edge_sum = torch.zeros(len(uniq), dtype=torch.float64, device="cpu").index_add_(0, inv, torch.cat(esum))
        edge_count = torch.zeros(len(uniq), dtype=torch.long, device="cpu").index_add_(0, inv, torch.cat(ecount))
        return cls(
            node_labels=labels,
            node_kind=[meta[lab][0] for lab in labels],
            node_layer=[meta[lab][1] for lab in labels],
            node_feature=[meta[lab][2] for lab in labels],
            node_token=[meta[lab][3] for lab in labels],
            node_wrong=[meta[lab][4] for lab in labels],
            node_text=[meta[lab][5] for lab in labels],
            **sums,
            **counts,
            edge_index=torch.stack([uniq // M, uniq % M]) if M else torch.zeros(2, 0, dtype=torch.long, device="cpu"),
            edge_sum=edge_sum,
            edge_count=edge_count,
            n_prompts=sum(p.n_prompts for p in parts),
            n_layers=first.n_layers,
            model_name=first.model_name,
            node_threshold=first.node_threshold,
            edge_threshold=first.edge_threshold,
            details=dict(details or {}),
        )


def _sort_key(kind: str, layer: int, feature: int, token: int, wrong: int) -> tuple[int, int, int, int, int]:
    return KINDS.index(kind), layer, feature, token, wrong


def _identities(g: AttributionGraph) -> list[tuple[str, str, int, int, int, int, str]]:
    """Each node of ``g``: (identity label, kind, layer, feature, token, wrong token, text) (module docstring)."""
    out = []
    outputs = [i for i, k in enumerate(g.node_kind) if k == "logit"]
    texts = g.output_token_strs or [str(t) for t in g.target_ids]
    for i, (kind, l, p, f) in enumerate(zip(g.node_kind, g.node_layer, g.node_pos, g.node_feature)):
        if kind == "feature":
            out.append((str(Feature(l, f, None)), kind, l, f, -1, -1, ""))
        elif kind == "error":
            out.append((str(FeatureError(l, None)), kind, l, -1, -1, -1, ""))
        elif kind == "token":
            t = g.tokens[p]
            out.append((f"embed[{t}]", kind, -1, -1, t, -1, g.token_strs[p] if g.token_strs else str(t)))
        elif g.node_labels[i] == "logit":  # the chosen target (or target − wrong): each prompt's answer
            diff = len(g.target_ids) == 2
            out.append((ANSWER, kind, l, -1, -1, -1, "the answer" + (" − the wrong token" if diff else "")))
        else:
            k = outputs.index(i)
            t = g.target_ids[k]
            out.append((f"logit[{t}]", kind, l, -1, t, -1, texts[k]))
    return out


def one_graph(g: AttributionGraph, node_threshold: float, edge_threshold: float) -> AggregateGraph:
    """The aggregate of one prompt's graph (module docstring, N = 1): its nodes' sums and its edges' sums by
    identity."""
    g = g.to("cpu")
    ids = _identities(g)
    meta: dict[str, tuple[str, int, int, int, int, str]] = {}
    for lab, kind, l, f, t, w, text in ids:
        meta.setdefault(lab, (kind, l, f, t, w, text))
    labels = sorted(meta, key=lambda lab: _sort_key(*meta[lab][:5]))
    at = {lab: i for i, lab in enumerate(labels)}
    M = len(labels)
    idx = torch.tensor([at[lab] for lab, *_ in ids], dtype=torch.long, device="cpu")
    A = g.adjacency.double()
    infl = g.influence().double()
    direct = g._logit_weights().double() @ A
    kept = set(g.prune(node_threshold, edge_threshold).node_labels)
    is_kept = torch.tensor([lab in kept for lab in g.node_labels], dtype=torch.long, device="cpu")

    def add(v: Tensor, dtype: torch.dtype) -> Tensor:
        return torch.zeros(M, dtype=dtype, device="cpu").index_add_(0, idx, v.to(dtype))

    tgt, src = A.nonzero(as_tuple=True)
    uniq, inv = torch.unique(idx[tgt] * M + idx[src], return_inverse=True)
    edge_sum = torch.zeros(len(uniq), dtype=torch.float64, device="cpu").index_add_(0, inv, A[tgt, src])
    n_pos = add(torch.ones(len(ids), dtype=torch.long, device="cpu"), torch.long)
    return AggregateGraph(
        node_labels=labels,
        node_kind=[meta[lab][0] for lab in labels],
        node_layer=[meta[lab][1] for lab in labels],
        node_feature=[meta[lab][2] for lab in labels],
        node_token=[meta[lab][3] for lab in labels],
        node_wrong=[meta[lab][4] for lab in labels],
        node_text=[meta[lab][5] for lab in labels],
        influence_sum=add(infl, torch.float64),
        activation_sum=add(g.activation, torch.float64),
        direct_sum=add(direct, torch.float64),
        n_active=(n_pos > 0).long(),
        n_kept=(add(is_kept, torch.long) > 0).long(),
        n_positions=n_pos,
        edge_index=torch.stack([uniq // M, uniq % M]),
        edge_sum=edge_sum,
        edge_count=torch.ones(len(uniq), dtype=torch.long, device="cpu"),
        n_prompts=1,
        n_layers=g.n_layers,
        model_name=g.model_name,
        node_threshold=float(node_threshold),
        edge_threshold=float(edge_threshold),
    )


def _prompt_list(prompts: Any) -> list[Any]:
    """``prompts`` as a list of single prompts (strings or token ids [1, n]); an empty or malformed input refused."""
    if isinstance(prompts, Tensor):
        if prompts.ndim != 2 or prompts.shape[0] == 0 or prompts.is_floating_point():
            raise ArgumentError(
                f"prompts: a tensor must hold token ids [n_prompts ≥ 1, pos], got {tuple(prompts.shape)} "
                f"{prompts.dtype}"
            )
        return [row[None] for row in prompts]
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ArgumentError(
            f"prompts={prompts!r:.80} must be a non-empty list of prompts (strings or token-id tensors "
            "[1, pos]) or a token-id tensor [n_prompts, pos]; a single prompt's graph is "
            "interp.features.attribution_graph"
        )
    for i, p in enumerate(prompts):
        if not isinstance(p, (str, Tensor)):
            raise ArgumentError(f"prompts[{i}]={p!r:.60} must be a string or a token-id tensor")
    return list(prompts)


def _per_prompt(name: str, value: Any, n: int) -> list[Any]:
    """``value`` for each of the ``n`` prompts: a list/tuple (or 1-d tensor) of one entry per prompt, or one value
    (None, a token string or id) for all."""
    if isinstance(value, Tensor) and value.ndim == 1 and not value.is_floating_point():
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ArgumentError(
                f"{name} has {len(value)} entries for {n} prompts: give one {name} per prompt, or one token for all"
            )
        return list(value)
    return [value] * n


@shardable
def aggregate_graphs(
    model: Model,
    prompts: Any,
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    *,
    target: Any = None,
    wrong: Any = None,
    pos: int = -1,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    constant_prefix: int = 0,
    batch_size: int = 256,
    progress: bool = True,
    cluster: Any = None,
    out: Any = None,
) -> AggregateGraph:
    """The attribution graph of each of ``prompts``, aggregated by node identity (module docstring; docs/math.md §32).

    ``prompts``: a list of strings or token-id tensors (any lengths), or a token-id tensor [n_prompts, pos].
    ``transcoders``: one per layer, or a :class:`CrossLayerTranscoder` (a feature's identity is then its encoder's layer
    and index, ``L3.F12@*``, whichever layers it writes). ``target`` / ``wrong``: one token for every prompt, or a list
    with one per prompt (None: each graph's outputs are its top logits). ``pos``, ``max_n_logits``,
    ``desired_logit_prob``, ``constant_prefix`` and ``batch_size`` are :func:`attribution_graph`'s, for every prompt;
    ``node_threshold`` / ``edge_threshold`` are the pruning thresholds that decide ``n_kept``. ``cluster``: None (in
    process) or an ``interp.RayCluster`` (the prompts sharded over its workers; the shards' sums and counts added,
    docs/scaling.md); ``out``: a folder keeping each finished shard for resume.
    """
    require_model(model)
    check_replaceable(model, transcoders)
    items = _prompt_list(prompts)
    check_thresholds(node_threshold, edge_threshold)
    check_bool("progress", progress)
    targets, wrongs = _per_prompt("target", target, len(items)), _per_prompt("wrong", wrong, len(items))
    parts = []
    for i, p in enumerate(tqdm(items, desc="aggregate_graphs", unit="prompt", disable=not progress)):
        g = attribution_graph(
            model,
            p,
            transcoders,
            target=targets[i],
            wrong=wrongs[i],
            pos=pos,
            max_n_logits=max_n_logits,
            desired_logit_prob=desired_logit_prob,
            node_threshold=node_threshold,
            edge_threshold=edge_threshold,
            constant_prefix=constant_prefix,
            batch_size=batch_size,
        )
        parts.append(one_graph(g, node_threshold, edge_threshold))
    return AggregateGraph.combine(parts).to(model.device)  # summed on the host; the result on the model's device
