"""An attribution graph as circuit-tracer's graph JSON (the file its frontend and Neuronpedia read).

The file is circuit-tracer 0.5.0's ``frontend.graph_models.Model``: ``metadata`` (slug, scan,
transcoder_list, prompt_tokens, prompt, node_threshold, schema_version), ``qParams``, ``nodes`` and
``links`` (source, target, weight), written for the graph pruned as :meth:`AttributionGraph.prune` prunes
it — the same nodes and edges circuit-tracer's ``create_graph_files`` keeps. Each node's ``influence`` is
circuit-tracer's cumulative score: the fraction of the total influence held by the nodes at least as
influential as it. An output's ``token_prob`` is the model's probability of its token at the real forward (for a
logit difference target − wrong, the target's, and its ``clerp`` says the output is a logit difference; a graph saved
before the probability was recorded falls back to the output's weight). Node ids follow circuit-tracer
(``{layer}_{feature}_{pos}`` features, ``E_{token}_{pos}``
embeddings, ``{n_layers + 1}_{token}_{pos}`` logits) except error nodes, ``err_{layer}_{pos}`` here: its
``0_{layer}_{pos}`` is also the id of layer 0's feature ``layer`` at ``pos``, so its files can hold two
nodes with one id (and its error ``jsNodeId`` ``{layer}_{pos}-0`` collides the same way).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import torch

from interp._io import write_atomic
from interp.errors import ArgumentError

if TYPE_CHECKING:
    from interp.features._result import AttributionGraph

__all__ = ["graph_json", "write_graph_json", "SCHEMA_VERSION"]

#: circuit-tracer's ``Metadata.schema_version``
SCHEMA_VERSION = 1


def _cantor(x: int, y: int) -> int:
    """circuit-tracer's feature index of (layer, feature): (x + y)(x + y + 1)/2 + y."""
    return (x + y) * (x + y + 1) // 2 + y


def _node(
    node_id: str,
    feature: int,
    layer: str,
    pos: int,
    ftype: str,
    js: str,
    *,
    influence: Optional[float],
    activation: Optional[float] = None,
    token_prob: float = 0.0,
    target: bool = False,
    clerp: str = "",
) -> dict:
    return {
        "node_id": node_id,
        "feature": feature,
        "layer": layer,
        "ctx_idx": pos,
        "feature_type": ftype,
        "token_prob": token_prob,
        "is_target_logit": target,
        "run_idx": 0,
        "reverse_ctx_idx": 0,
        "jsNodeId": js,
        "clerp": clerp,
        "influence": influence,
        "activation": activation,
    }


def graph_json(
    graph: "AttributionGraph",
    *,
    slug: str = "graph",
    scan: Optional[str] = None,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
) -> dict[str, Any]:
    """The graph as a dict in circuit-tracer's graph JSON schema (module docstring), pruned at the thresholds."""
    # 1. the options checked
    if not isinstance(slug, str) or not slug:
        raise ArgumentError(f"slug={slug!r} must be a non-empty string")
    if scan is not None and not isinstance(scan, str):
        raise ArgumentError(f"scan={scan!r} must be a string (the transcoder set's name) or None")
    g = graph
    # 2. each node's cumulative influence in the whole graph, then the graph pruned
    cum_of = _cumulative_influence(g)
    p = g.prune(node_threshold, edge_threshold)
    # 3. the kept nodes, with unique ids
    nodes = _nodes(g, p, cum_of)
    ids = [n["node_id"] for n in nodes]
    if len(set(ids)) != len(ids):  # cannot happen with the ids above; a guard against silent merging
        raise ArgumentError("the exported node ids are not unique")
    # 4. the kept edges: adjacency[target, source] as (source, target, weight)
    t, s = p.adjacency.nonzero(as_tuple=True)
    links = [
        {"source": ids[si], "target": ids[ti], "weight": float(p.adjacency[ti, si])}
        for ti, si in zip(t.tolist(), s.tolist())
    ]
    # 5. the metadata
    toks = g.token_strs if g.token_strs is not None else [str(t) for t in g.tokens]
    meta = {
        "slug": slug,
        "scan": g.model_name if scan is None else scan,
        "transcoder_list": [],
        "prompt_tokens": toks,
        "prompt": "".join(toks),
        "node_threshold": node_threshold,
        "schema_version": SCHEMA_VERSION,
    }
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": nodes, "links": links}


def _cumulative_influence(g: "AttributionGraph") -> dict[str, float]:
    """circuit-tracer's node score: the fraction of the total influence held by the nodes at least as influential
    as the node (by label)."""
    infl = g.influence()
    order = infl.argsort(descending=True)
    cum = torch.zeros_like(infl)
    cum[order] = torch.cumsum(infl[order], 0) / infl.sum().clamp_min(1e-30)
    return {lab: float(v) for lab, v in zip(g.node_labels, cum.tolist())}


def _nodes(g: "AttributionGraph", p: "AttributionGraph", cum_of: dict[str, float]) -> list[dict]:
    """The nodes of the pruned graph ``p`` of ``g`` in circuit-tracer's schema (module docstring), in ``p``'s order;
    the first output is the target logit."""
    L = g.n_layers
    w = p._logit_weights()
    nodes = []
    first_logit = True
    for i, (lab, kind, layer, pos, feat) in enumerate(
        zip(p.node_labels, p.node_kind, p.node_layer, p.node_pos, p.node_feature)
    ):
        inf = cum_of[lab]
        if kind == "feature":
            nid = f"{layer}_{feat}_{pos}"
            nodes.append(
                _node(
                    nid,
                    _cantor(layer, feat),
                    str(layer),
                    pos,
                    "cross layer transcoder",
                    f"{layer}_{feat}-0",
                    influence=inf,
                    activation=float(p.activation[i]),
                )
            )
        elif kind == "error":
            nid = f"err_{layer}_{pos}"
            nodes.append(
                _node(nid, -1, str(layer), pos, "mlp reconstruction error", f"err_{layer}_{pos}-0", influence=inf)
            )
        elif kind == "token":
            nid = f"E_{g.tokens[pos]}_{pos}"
            nodes.append(_node(nid, pos, "E", pos, "embedding", f"E_{g.tokens[pos]}-{pos}", influence=inf))
        else:  # an output: logit[<id>] or the chosen logit / logit difference
            vocab = int(lab[len("logit[") : -1]) if lab.startswith("logit[") else int(g.target_ids[0])
            prob = float(w[i]) if p.output_prob is None else float(p.output_prob[i])
            name = g.target if lab == "logit" else _decode(g, vocab)
            if lab == "logit" and len(g.target_ids) == 2:  # target − wrong: its p is the target token's
                clerp = f'Output "{name}" (logit difference; p({_decode(g, vocab)})={prob:.3f})'
            else:
                clerp = f'Output "{name}" (p={prob:.3f})'
            nid = f"{L + 1}_{vocab}_{pos}"
            nodes.append(
                _node(
                    nid,
                    vocab,
                    str(L + 1),
                    pos,
                    "logit",
                    f"L_{vocab}-{pos}",
                    influence=None,
                    token_prob=prob,
                    target=first_logit,
                    clerp=clerp,
                )
            )
            first_logit = False
    return nodes


def _decode(g: "AttributionGraph", vocab: int) -> str:
    """The token string of an output id: from the graph's target text when it names it, else the id."""
    if g.output_token_strs is not None and vocab in g.target_ids:
        return g.output_token_strs[g.target_ids.index(vocab)]
    return str(vocab)


def write_graph_json(
    graph: "AttributionGraph",
    path: Union[str, os.PathLike],
    *,
    slug: Optional[str] = None,
    scan: Optional[str] = None,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
) -> Path:
    """Write :func:`graph_json` to ``path`` atomically (a temporary file, then a rename); the slug defaults to
    the file's stem. Returns the path."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"path={path!r} must be a file path (str or os.PathLike)")
    out = Path(path)
    data = graph_json(
        graph,
        slug=out.stem if slug is None else slug,
        scan=scan,
        node_threshold=node_threshold,
        edge_threshold=edge_threshold,
    )
    write_atomic(out, json.dumps(data, indent=1).encode())
    return out
