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

Everything is drawn on one ``<canvas>`` by a short inline script from inlined JSON (no per-node DOM element, no
library, no network request), so the same HTML works in Jupyter (``_repr_html_``), as a page of its own, and
offline. Labels and tokens are inserted as text, never as HTML; the JSON is escaped for a ``<script>`` element.
"""

from __future__ import annotations

import html
import itertools
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from interp._validate import check_positive_int
from interp.errors import ArgumentError, LabelError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["FeatureGraphView", "feature_graph_view"]

_counter = itertools.count()

#: incoming / outgoing edges listed per node on hover; an output's strongest inputs always drawn
TOP_EDGES = 5

#: each other node's strongest inputs always drawn (where both ends are drawn)
ALWAYS_INPUTS = 2

_CSS = """
#ID { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 13px; color: #222; }
#ID .fg-controls { margin: 4px 0 6px 0; display: flex; gap: 18px; flex-wrap: wrap; align-items: center; }
#ID .fg-controls input[type=range] { width: 220px; vertical-align: middle; }
#ID .fg-main { display: flex; gap: 10px; align-items: flex-start; }
#ID .fg-canvas-wrap { flex: 1 1 auto; min-width: 0; overflow: auto; max-height: 92vh; border: 1px solid #ddd; }
#ID canvas { display: block; cursor: crosshair; }
#ID .fg-info { flex: 0 0 330px; max-height: 85vh; overflow: auto; border: 1px solid #ddd; padding: 6px 8px;
  background: #fafafa; font-size: 12px; }
#ID .fg-info h4 { margin: 6px 0 2px 0; font-size: 12px; }
#ID .fg-info table { border-collapse: collapse; width: 100%; }
#ID .fg-info td { padding: 1px 4px; vertical-align: top; }
#ID .fg-info td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
#ID .fg-info .ctx { font-family: monospace; white-space: pre-wrap; border-bottom: 1px dotted #ccc; padding: 2px 0; }
#ID .fg-muted { color: #777; }
"""

_JS = r"""
(function () {
  var D = DATA;
  var root = document.getElementById(D.id);
  var canvas = root.querySelector("canvas"), ctx = canvas.getContext("2d");
  var info = root.querySelector(".fg-info");
  var nodeSlider = root.querySelector(".fg-nodes"), edgeSlider = root.querySelector(".fg-edges");
  var nodeOut = root.querySelector(".fg-nodes-n"), edgeOut = root.querySelector(".fg-edges-n");
  var N = D.label.length, nPos = D.tokens.length, nRows = D.n_layers + 2;
  var left = 70, top = 10, bottom = 60;
  var avail = (canvas.parentNode.clientWidth || 1100) - left - 12;
  var colW = Math.max(36, Math.min(160, Math.floor(avail / Math.max(nPos, 1))));
  // rows fit the window below the viewer's top (every layer and the token axis in view when it opens): at most
  // row_height, at least 14 px (then the box scrolls)
  var wrapTop = canvas.parentNode.getBoundingClientRect().top + (window.scrollY || 0);
  var availH = Math.max(240, (window.innerHeight || 900) - Math.max(0, wrapTop) - 16);
  var rowH = Math.max(14, Math.min(D.row_height, Math.floor((availH - top - bottom - 4) / nRows)));
  canvas.width = left + colW * nPos + 10;
  canvas.height = top + rowH * nRows + bottom;
  var X = new Float64Array(N), Y = new Float64Array(N), R = new Float64Array(N);
  var shown = new Uint8Array(N), hovered = -1, pinned = -1;
  function row(i) { return D.n_layers - D.layer[i]; }  // outputs on top, tokens at the bottom
  function layout() {
    var cells = {};
    for (var i = 0; i < N; i++) {
      if (!shown[i]) continue;
      var key = D.layer[i] + "," + D.pos[i];
      (cells[key] = cells[key] || []).push(i);
    }
    Object.keys(cells).forEach(function (key) {
      var ids = cells[key];
      ids.sort(function (a, b) { return D.rank[a] - D.rank[b]; });
      var k = ids.length, cols = Math.ceil(Math.sqrt(k * colW / rowH)), rows = Math.ceil(k / cols);
      var dx = (colW - 8) / cols, dy = (rowH - 8) / rows, r = Math.max(1.5, Math.min(7, Math.min(dx, dy) / 2 - 0.5));
      ids.forEach(function (i, j) {
        var c = j % cols, rr = Math.floor(j / cols);
        X[i] = left + D.pos[i] * colW + 4 + dx * (c + 0.5);
        Y[i] = top + row(i) * rowH + 4 + dy * (rr + 0.5);
        R[i] = r;
      });
    });
  }
  var COLORS = {feature: "#1f77b4", error: "#7f7f7f", token: "#2ca02c", logit: "#d62728"};
  var edgeLimit = 0, visibleEdges = [];
  var wmax = 1;
  function recompute() {
    var k = +nodeSlider.value;
    for (var i = 0; i < N; i++)
      shown[i] = (D.kind[i] === "token" || D.kind[i] === "logit" || D.rank[i] < k || D.pin[i]) ? 1 : 0;
    layout();
    // the m strongest edges by influence-weighted weight whose ends are drawn, then the edges always drawn (into the
    // outputs, and each drawn node's strongest inputs) that are not among them
    visibleEdges = [];
    var m = Math.min(+edgeSlider.value, D.edges.length), hidden = 0, extra = 0;
    var taken = new Uint8Array(D.edges.length);
    for (var e = 0; e < m; e++) {
      if (shown[D.edges[e][0]] && shown[D.edges[e][1]]) { visibleEdges.push(e); taken[e] = 1; } else hidden++;
    }
    for (var a = 0; a < D.always.length; a++) {
      var ea = D.always[a];
      if (taken[ea] || !shown[D.edges[ea][0]] || !shown[D.edges[ea][1]]) continue;
      visibleEdges.push(ea); taken[ea] = 1; extra++;
    }
    wmax = 1e-30;
    for (var j = 0; j < visibleEdges.length; j++) wmax = Math.max(wmax, Math.abs(D.edges[visibleEdges[j]][2]));
    nodeOut.textContent = k + " of " + D.n_ranked;
    // short (the controls' row must not wrap): drawn; of the m asked, those joining hidden nodes; the always-drawn
    var txt = visibleEdges.length + " drawn (" + (hidden ? hidden + " of " + m + " join hidden nodes, " : "") +
      "+" + extra + " strongest inputs)";
    if (D.edges_asked > D.edges.length) txt += ", edges=" + D.edges_asked + " > " + D.edges.length + " held";
    edgeOut.textContent = txt;
    edgeOut.title = "the " + m + " strongest edges by influence-weighted weight whose ends are drawn, and the " +
      "strongest inputs of the outputs and of each drawn node; the page holds " + D.edges.length + " of the " +
      "graph's " + D.n_edges_total + " edges";
    draw();
  }
  function draw() {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = "11px sans-serif"; ctx.fillStyle = "#444"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (var r = 0; r < nRows; r++) {
      var lab = r === 0 ? "output" : (r === nRows - 1 ? "tokens" : "L" + (D.n_layers - r));
      ctx.fillText(lab, left - 6, top + r * rowH + rowH / 2);
      ctx.strokeStyle = "#eee"; ctx.beginPath();
      ctx.moveTo(left, top + r * rowH); ctx.lineTo(canvas.width, top + r * rowH); ctx.stroke();
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    for (var p = 0; p < nPos; p++) {
      var x = left + p * colW + colW / 2;
      ctx.save(); ctx.translate(x, top + nRows * rowH + 4); ctx.rotate(-0.5);
      ctx.textAlign = "right"; ctx.fillText(D.tokens[p].slice(0, 14), 0, 0); ctx.restore();
    }
    var focus = pinned >= 0 ? pinned : hovered;
    for (var j = visibleEdges.length - 1; j >= 0; j--) {
      var ed = D.edges[visibleEdges[j]], s = ed[0], t = ed[1], w = ed[2];
      var on = focus >= 0 && (s === focus || t === focus);
      ctx.strokeStyle = w > 0 ? (on ? "rgba(31,119,180,0.95)" : "rgba(31,119,180,0.25)")
                              : (on ? "rgba(214,39,40,0.95)" : "rgba(214,39,40,0.25)");
      ctx.lineWidth = (on ? 1.5 : 0.5) + 3 * Math.abs(w) / wmax;
      ctx.beginPath(); ctx.moveTo(X[s], Y[s]); ctx.lineTo(X[t], Y[t]); ctx.stroke();
    }
    for (var i = 0; i < N; i++) {
      if (!shown[i]) continue;
      ctx.fillStyle = COLORS[D.kind[i]] || "#000";
      ctx.beginPath();
      if (D.kind[i] === "error") ctx.rect(X[i] - R[i], Y[i] - R[i], 2 * R[i], 2 * R[i]);
      else ctx.arc(X[i], Y[i], R[i], 0, 2 * Math.PI);
      ctx.fill();
      if (i === focus) { ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.stroke(); }
    }
  }
  function at(mx, my) {  // the drawn node under (mx, my), searching its cell only
    var col = Math.floor((mx - left) / colW), r = Math.floor((my - top) / rowH);
    if (col < 0 || col >= nPos || r < 0 || r >= nRows) return -1;
    var layer = D.n_layers - r, best = -1, bd = 1e9;
    var ids = D.cell[layer + "," + col] || [];
    for (var j = 0; j < ids.length; j++) {
      var i = ids[j];
      if (!shown[i]) continue;
      var d = Math.hypot(X[i] - mx, Y[i] - my);
      if (d <= R[i] + 3 && d < bd) { bd = d; best = i; }
    }
    return best;
  }
  function fmt(v) {
    return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : v.toFixed(4);
  }
  function el(tag, text, cls) {
    var e = document.createElement(tag); if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls; return e;
  }
  function table(rows) {
    var t = el("table");
    rows.forEach(function (r) {
      var tr = el("tr"); tr.appendChild(el("td", r[0]));
      tr.appendChild(el("td", fmt(r[1]), "num")); t.appendChild(tr);
    });
    return t;
  }
  function show(i) {
    info.textContent = "";
    if (i < 0) { info.appendChild(el("p", "Hover a node (click pins it).", "fg-muted")); return; }
    info.appendChild(el("h4", D.label[i] + "  (" + D.kind[i] + ")"));
    var facts;
    if (D.kind[i] === "logit") {  // the output itself: its influence on itself says nothing
      facts = [[D.diff ? "logit difference (the output this graph explains)" : "logit (the output this graph explains)",
                D.value[i]]];
      if (D.prob[i] !== null) facts.push([D.diff ? "the model's probability of the target token" :
                                          "the model's probability of this token", D.prob[i]]);
      if (D.act[i] !== D.value[i]) facts.push(["activation", D.act[i]]);
    } else {
      facts = [["activation", D.act[i]], ["influence on the output", D.infl[i]]];
      if (D.kind[i] === "feature") facts.push(["value (pre-activation)", D.value[i]]);
    }
    info.appendChild(table(facts));
    var eff = D.effects[i];
    if (eff && eff.length) {
      var h = eff.length / 2;
      info.appendChild(el("h4", "logit effects (per unit activation, through the final norm)"));
      info.appendChild(el("div", "promotes", "fg-muted")); info.appendChild(table(eff.slice(0, h)));
      info.appendChild(el("div", "suppresses", "fg-muted")); info.appendChild(table(eff.slice(h)));
    } else if (D.no_effects && D.kind[i] === "feature") {
      info.appendChild(el("div", "logit effects not computed: attribution_graph(..., logit_effects=5)", "fg-muted"));
    }
    info.appendChild(el("h4", "strongest incoming edges"));
    info.appendChild(D.ins[i].length ? table(D.ins[i]) : el("div", "none (a source)", "fg-muted"));
    info.appendChild(el("h4", "strongest outgoing edges"));
    info.appendChild(D.outs[i].length ? table(D.outs[i]) : el("div", "none", "fg-muted"));
    var cx = D.contexts[i];
    if (cx && cx.length) {
      info.appendChild(el("h4", "top activating contexts"));
      cx.forEach(function (c) { info.appendChild(el("div", c, "ctx")); });
    }
  }
  function pos(ev) { var b = canvas.getBoundingClientRect(); return [ev.clientX - b.left, ev.clientY - b.top]; }
  canvas.addEventListener("mousemove", function (ev) {
    var p = pos(ev), i = at(p[0], p[1]);
    if (i !== hovered) { hovered = i; if (pinned < 0) show(i); draw(); }
  });
  canvas.addEventListener("click", function (ev) {
    var p = pos(ev), i = at(p[0], p[1]);
    pinned = (i === pinned) ? -1 : i; show(pinned >= 0 ? pinned : hovered); draw();
  });
  nodeSlider.addEventListener("input", recompute);
  edgeSlider.addEventListener("input", recompute);
  window.interpFeatureGraph = window.interpFeatureGraph || {};
  window.interpFeatureGraph[D.id] = {
    xy: function (label) { var i = D.label.indexOf(label); if (i < 0 || !shown[i]) return null;
      var b = canvas.getBoundingClientRect(); return [b.left + X[i], b.top + Y[i]]; },
    shownNodes: function () { var n = 0; for (var i = 0; i < N; i++) n += shown[i]; return n; },
    drawnEdges: function () { return visibleEdges.length; },
    drawnInto: function (label) { var t = D.label.indexOf(label), n = 0;
      visibleEdges.forEach(function (e) { if (D.edges[e][1] === t) n++; }); return n; },
    edgeText: function () { return edgeOut.textContent; }
  };
  recompute(); show(-1);
})();
"""


def _script_json(obj: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>``, no HTML comment openers)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _num(x: float) -> float:
    return float(x) if math.isfinite(float(x)) else 0.0


@dataclass(frozen=True)
class FeatureGraphView:
    """A self-contained viewer of an attribution graph (see the module docstring): :meth:`to_html` is the
    fragment, :meth:`to_html_page` a whole page; Jupyter shows it through :meth:`_repr_html_`."""

    payload: dict
    title: str

    def to_html(self) -> str:
        """The viewer as an HTML fragment (a ``<div>``, its ``<style>`` and ``<script>``); no external resource."""
        uid = f"interp-fg-{next(_counter)}"
        d = dict(self.payload, id=uid)
        css = _CSS.replace("#ID", f"#{uid}")
        n_ranked, n_edges = d["n_ranked"], len(d["edges"])
        return (
            f'<div id="{uid}" class="interp-feature-graph"><style>{css}</style>'
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
            f"</div><script>{_JS.replace('DATA', _script_json(d), 1)}</script>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_html_page(self) -> str:
        """A whole HTML page holding the viewer."""
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title></head><body>\n{self.to_html()}\n</body></html>\n"
        )


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
