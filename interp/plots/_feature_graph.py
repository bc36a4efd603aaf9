"""An offline viewer for an attribution graph: nodes by layer × position on one canvas, hover for details.

Each node of an :class:`interp.features.AttributionGraph` sits in the cell of its position (x) and layer (y;
token embeddings below layer 0, the outputs above the last layer); a cell's nodes are packed in a small grid,
the most influential first. Edges are lines (blue positive, red negative, width ∝ |weight|). Two sliders keep
the page usable with thousands of nodes: the number of feature/error nodes drawn (the most influential on the
output) and the number of edges drawn, ranked as circuit-tracer's pruning ranks them — a target's share of its inputs
|A[t, s]| / Σ_s' |A[t, s']| times the target's influence plus output weight, so an edge into the output outranks a large
raw weight between early pre-activations. The outputs' strongest inputs (and their sources) and each drawn node's
strongest inputs are always drawn; the slider's label says how many of the edges asked are drawn and why not all.
Hovering a node (clicking pins it) shows its activation, influence, its logit effects when the graph has them (the
tokens its decoder direction promotes and suppresses through the final norm, per unit activation:
``attribution_graph(..., logit_effects=5)``), its strongest incoming and outgoing edges in the whole graph, and, when
the caller gives them, its top activating contexts; an output, its logit (or logit difference) and the model's
probability of its token.

Everything is drawn on one ``<canvas>`` by a short inline script (``interp/plots/assets/feature_graph.js``) from
inlined JSON (no per-node DOM element, no library, no network request), so the same HTML works in Jupyter
(``_repr_html_``), as a page of its own, and offline. Labels and tokens are inserted as text, never as HTML; the
JSON is escaped for a ``<script>`` element.
"""

from __future__ import annotations

import html
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from interp._validate import check_positive_int
from interp.errors import ArgumentError, LabelError
from interp.plots._view import HtmlView

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["FeatureGraphView", "feature_graph_view"]

_counter = itertools.count()

#: incoming / outgoing edges listed per node on hover; an output's strongest inputs always drawn
TOP_EDGES = 5

#: each other node's strongest inputs always drawn (where both ends are drawn)
ALWAYS_INPUTS = 2


def _num(x: float) -> float:
    return float(x) if math.isfinite(float(x)) else 0.0


@dataclass(frozen=True)
class FeatureGraphView(HtmlView):
    """A self-contained viewer of an attribution graph (see the module docstring): :meth:`to_html` is the
    fragment, :meth:`to_html_page` a whole page; Jupyter shows it through :meth:`_repr_html_`. Its script and style
    sheet are ``interp/plots/assets/feature_graph.js`` and ``.css``."""

    payload: dict
    title: str

    def _body(self) -> str:
        """The viewer (a ``<div>``, its ``<style>`` and ``<script>``); no external resource."""
        d = self.payload
        n_ranked, n_edges = d["n_ranked"], len(d["edges"])
        markup = (
            f'<div class="fg-title"><b>{html.escape(self.title)}</b></div>'
            '<div class="fg-controls">'
            f'<label>feature / error nodes: <input class="fg-nodes" type="range" min="1" max="{max(n_ranked, 1)}" '
            f'value="{d["default_nodes"]}"> <span class="fg-nodes-n"></span></label>'
            f'<label>edges: <input class="fg-edges" type="range" min="0" max="{n_edges}" '
            f'value="{d["default_edges"]}">'
            ' <span class="fg-edges-n"></span></label>'
            '<span class="fg-muted"><span style="color:#1f77b4">●</span> feature '
            '<span style="color:#7f7f7f">■</span> error node <span style="color:#2ca02c">●</span> token '
            '<span style="color:#d62728">●</span> output · edges: <span style="color:#1f77b4">+</span> / '
            '<span style="color:#d62728">−</span>, width ∝ |weight|</span></div>'
            '<div class="fg-main"><div class="fg-canvas-wrap"><canvas></canvas></div>'
            '<div class="fg-info"></div></div>'
        )
        return self.widget("feature_graph", f"interp-fg-{next(_counter)}", "interp-feature-graph", markup, d)


def feature_graph_view(
    graph: Any,
    *,
    contexts: Optional[Mapping[str, Sequence[str]]] = None,
    max_edges: int = 20_000,
    nodes: int = 300,
    edges: int = 1_000,
    row_height: int = 48,
) -> FeatureGraphView:
    """The viewer of an attribution graph (an :class:`interp.features.AttributionGraph`, read by its fields).

    ``contexts`` maps a feature to its top activating contexts (strings shown as text), keyed by the node label
    (``"L3.F12@5"``) or by the feature without position (``"L3.F12"``); a key that matches no node is a LabelError.
    The page holds the max(``max_edges``, ``edges``) strongest edges by influence-weighted weight (module docstring;
    hover lists each node's strongest edges from the whole graph by |weight|), plus the edges always drawn: each
    output's 5 strongest inputs (their sources drawn too) and every node's 2 strongest inputs. It opens with the
    ``nodes`` most influential feature / error nodes and the ``edges`` strongest edges among them drawn; the edge
    slider's label says how many are drawn, how many of those asked join nodes not drawn, and when ``edges`` is more
    than the graph holds.
    """
    # 1. the options checked
    for name, v in (("max_edges", max_edges), ("nodes", nodes), ("edges", edges), ("row_height", row_height)):
        check_positive_int(name, v)
    if contexts is not None and not isinstance(contexts, Mapping):
        raise ArgumentError(
            f"contexts must be a mapping from a feature label to a list of strings, got {type(contexts).__name__}"
        )
    A = graph.adjacency.double()
    N = A.shape[0]
    labels, kinds = list(graph.node_labels), list(graph.node_kind)
    infl = graph.influence().double()

    # 2. the feature and error nodes ranked by influence (the node slider's order)
    rank, n_ranked = _ranks(kinds, infl)

    # 3. the edges the page holds (ranked by influence-weighted weight; those always drawn), the nodes always drawn,
    # and each node's strongest incoming and outgoing edges in the whole graph
    w = _output_weights(graph, kinds)
    edge_list, always, pin, n_edges_total = _kept_edges(A, infl, w, kinds, max(max_edges, edges))
    ins, outs = _strongest_edges(A, labels)

    # 4. what hovering shows besides: logit effects, top activating contexts
    effects = _effects(graph, N)
    ctx = _node_contexts(contexts, labels, kinds)

    # 5. the page's data
    cell: dict[str, list[int]] = {}
    for i in range(N):
        cell.setdefault(f"{graph.node_layer[i]},{graph.node_pos[i]}", []).append(i)
    toks = graph.token_strs if getattr(graph, "token_strs", None) is not None else [str(x) for x in graph.tokens]
    payload = {
        "label": labels,
        "kind": kinds,
        "layer": list(graph.node_layer),
        "pos": list(graph.node_pos),
        "act": [_num(x) for x in graph.activation.tolist()],
        "value": [_num(x) for x in graph.value.tolist()],
        "infl": [_num(x) for x in infl.tolist()],
        "rank": rank,
        "prob": _probs(graph, kinds),
        "diff": "logit" in labels and len(getattr(graph, "target_ids", [])) == 2,
        "n_ranked": n_ranked,
        "edges": edge_list,
        "always": always,
        "pin": pin,
        "edges_asked": edges,
        "n_edges_total": n_edges_total,
        "ins": ins,
        "outs": outs,
        "effects": effects,
        "no_effects": getattr(graph, "logit_effect_ids", None) is None,
        "contexts": ctx,
        "cell": cell,
        "tokens": [repr(x) for x in toks],
        "n_layers": int(graph.n_layers),
        "default_nodes": min(nodes, max(n_ranked, 1)),
        "default_edges": min(edges, len(edge_list)),
        "row_height": row_height,
    }
    title = f"attribution graph of {graph.target} ({graph.model_name}): {N} nodes, {n_edges_total} edges"
    return FeatureGraphView(payload=payload, title=title)


def _probs(graph: Any, kinds: list[str]) -> list[Optional[float]]:
    """Each output's probability under the model (of the target for a logit difference) where the graph records it
    (``output_prob``), None elsewhere."""
    p = getattr(graph, "output_prob", None)
    if p is None:
        return [None] * len(kinds)
    return [_num(v) if k == "logit" else None for v, k in zip(p.tolist(), kinds)]


def _ranks(kinds: list[str], infl: Tensor) -> tuple[list[int], int]:
    """Each node's rank among the feature and error nodes by influence (0 the most influential; N for a token or an
    output, which are always drawn), and how many are ranked."""
    N = len(kinds)
    mid = [i for i, k in enumerate(kinds) if k in ("feature", "error")]
    order = sorted(mid, key=lambda i: -float(infl[i]))
    rank = [N] * N
    for r, i in enumerate(order):
        rank[i] = r
    return rank, len(order)


def _output_weights(graph: Any, kinds: list[str]) -> Tensor:
    """w [N]: each output's weight in influence (the graph's ``output_weight``; 1 on every output where it has none)."""
    import torch

    w = getattr(graph, "output_weight", None)
    if w is not None:
        return w.double()
    return torch.tensor([float(k == "logit") for k in kinds], dtype=torch.float64, device=graph.adjacency.device)


def _kept_edges(
    A: Tensor, infl: Tensor, w: Tensor, kinds: list[str], n_keep: int
) -> tuple[list[list], list[int], list[int], int]:
    """The edges the page holds, as [source, target, weight], strongest first by circuit-tracer's edge score (the
    pruning's): Â[t, s] · (influence_t + w_t), Â the adjacency with |·| taken and each row normalised to sum 1 — a
    target's share of its inputs weighted by how much the target matters for the output, so an edge into the output
    outranks a large raw weight between early pre-activations. The ``n_keep`` strongest, plus the edges always drawn
    (``always``, indices into the list): each output's :data:`TOP_EDGES` and every other node's
    :data:`ALWAYS_INPUTS` strongest inputs (by |weight|). ``pin`` [N]: 1 for the sources of the outputs' always-drawn
    inputs (drawn whatever the node slider). And how many nonzero edges the graph has."""
    import torch

    t, s = A.nonzero(as_tuple=True)
    v = A[t, s]
    row = torch.zeros(A.shape[0], dtype=v.dtype, device=v.device)  # Σ_s' |A[t, s']|, from the nonzeros
    row.index_add_(0, t, v.abs())
    score = v.abs() / row[t].clamp_min(1e-30) * (infl + w).clamp_min(0)[t]
    order = score.argsort(descending=True, stable=True)
    t, s, v = t[order], s[order], v[order]
    # the always-drawn inputs of each target: its k strongest sources by |weight|
    is_out = torch.tensor([k == "logit" for k in kinds], dtype=torch.bool, device=A.device)
    k_in = torch.where(is_out, TOP_EDGES, ALWAYS_INPUTS)
    rank_in = torch.empty_like(t)  # each edge's rank among its target's inputs by |weight|
    by_w = torch.argsort(v.abs(), descending=True, stable=True)
    by_t = by_w[torch.argsort(t[by_w], stable=True)]  # grouped by target, strongest first within each
    counts = torch.bincount(t, minlength=A.shape[0])
    starts = torch.cumsum(counts, 0) - counts
    rank_in[by_t] = torch.arange(len(t), device=t.device) - starts[t[by_t]]
    must = rank_in < k_in[t]
    keep = torch.zeros(len(t), dtype=torch.bool, device=t.device)
    keep[:n_keep] = True
    keep |= must
    idx = keep.nonzero(as_tuple=True)[0]
    edge_list = [[int(a_), int(b_), _num(c)] for a_, b_, c in zip(s[idx].tolist(), t[idx].tolist(), v[idx].tolist())]
    always = must[idx].nonzero(as_tuple=True)[0].tolist()
    pin = [0] * A.shape[0]
    for e in always:
        if kinds[edge_list[e][1]] == "logit":
            pin[edge_list[e][0]] = 1
    return edge_list, always, pin, int(len(t))


def _strongest_edges(A: Tensor, labels: list[str]) -> tuple[list[list], list[list]]:
    """Each node's :data:`TOP_EDGES` strongest incoming and outgoing edges, [label of the other end, weight]."""
    N = A.shape[0]
    k = min(TOP_EDGES, N)
    absA = A.abs()
    ins_v, ins_i = absA.topk(k, dim=1)
    outs_v, outs_i = absA.topk(k, dim=0)
    ins = [
        [[labels[j], _num(float(A[i, j]))] for v, j in zip(ins_v[i].tolist(), ins_i[i].tolist()) if v > 0]
        for i in range(N)
    ]
    outs = [
        [[labels[j], _num(float(A[j, i]))] for v, j in zip(outs_v[:, i].tolist(), outs_i[:, i].tolist()) if v > 0]
        for i in range(N)
    ]
    return ins, outs


def _effects(graph: Any, N: int) -> list[list]:
    """Each feature's logit effects as [token (repr) or id, value], promoted then suppressed; [] for other nodes
    and where the graph has none."""
    effects: list[list] = [[] for _ in range(N)]
    if getattr(graph, "logit_effect_ids", None) is not None:
        strs = graph.logit_effect_strs
        for i, (ids, vals) in enumerate(zip(graph.logit_effect_ids.tolist(), graph.logit_effect_values.tolist())):
            if ids and ids[0] >= 0:
                names = strs[i] if strs is not None else [str(x) for x in ids]
                effects[i] = [[repr(nm) if strs is not None else nm, _num(v)] for nm, v in zip(names, vals)]
    return effects


def _node_contexts(
    contexts: Optional[Mapping[str, Sequence[str]]], labels: list[str], kinds: list[str]
) -> list[list[str]]:
    """Each node's top activating contexts from ``contexts``, by its label or (a feature) its label without the
    position (``"L3.F12"`` or ``"L3.F12@*"``); [] where none are given. A key that matches no node is a
    :class:`~interp.errors.LabelError` naming it and a few keys that would match."""
    ctx: list[list[str]] = [[] for _ in labels]
    if not contexts:
        return ctx
    used: set[str] = set()
    for i, lab in enumerate(labels):
        keys = [lab] + ([lab.split("@")[0], lab.split("@")[0] + "@*"] if kinds[i] == "feature" else [])
        key = next((k for k in keys if k in contexts), None)
        if key is None:
            continue
        got = contexts[key]
        if isinstance(got, str) or not all(isinstance(c, str) for c in got):
            raise ArgumentError(f"contexts[{lab!r}] must be a list of strings")
        ctx[i] = list(got)
        used.add(key)
    unmatched = [k for k in contexts if k not in used]
    if unmatched:
        feats = list(dict.fromkeys(lab.split("@")[0] for lab, k in zip(labels, kinds) if k == "feature"))
        raise LabelError(
            f"contexts has {len(unmatched)} key(s) that match no feature of this graph: "
            f"{unmatched[:5]}{' …' if len(unmatched) > 5 else ''}; its {len(feats)} features are keyed like "
            f"{feats[:5]} (a feature 'L3.F12' for every position, or a node label 'L3.F12@5')"
        )
    return ctx
