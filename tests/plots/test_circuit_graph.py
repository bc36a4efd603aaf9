"""The circuit viewer: figure structure read back from the figure, page size, render time and hover in Chromium.

Expectations are written from the edge list itself (which node each edge joins, the sign and size of
its score, the GQA grouping), never from the builder's internals: the tests parse the drawn SVG paths,
the marker positions and the hover text out of the figure.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import plotly.graph_objects as go
import pytest

import interp
from interp.errors import ArgumentError, LabelError, ShapeError
from interp.plots import circuit_graph_figure
from plots_helpers import TIME_NEWPLOT, chromium_path, external_resources, probe_in_chromium

needs_browser = pytest.mark.skipif(chromium_path() is None, reason="needs Chromium (apt-get install chromium)")

_NUM = r"(-?[\d.]+(?:e-?\d+)?)"
_CURVE = re.compile(rf"M{_NUM},{_NUM}Q{_NUM},{_NUM} {_NUM},{_NUM}")
_SEG = re.compile(rf"M{_NUM},{_NUM}L{_NUM},{_NUM}")

# 3 layers, 4 query heads sharing 2 KV heads (GQA groups {0, 1} and {2, 3}), MLPs, embeddings, logits
EDGES = [
    "embed→L0.attn.q[H1]",
    "embed→L0.attn.k[H0]",
    "pos_embed→L0.attn.v[H1]",
    "L0.H1→L0.mlp.in",
    "L0.H1→L1.attn.k[H1]",
    "L0.H3→L1.attn.q[H2]",
    "L0.mlp→L1.attn.v[H0]",
    "L1.H2→L2.attn.q[H0]",
    "L1.H2→unembed",
    "L2.H0→unembed",
    "L1.mlp→L2.mlp.in",
    "L2.mlp→unembed",
]
SCORES = np.array([0.05, -0.2, 0.01, 0.3, 1.5, -0.8, 0.02, 0.9, 2.0, -1.2, 0.4, 0.6])


def _nodes(fig: go.Figure) -> dict[str, tuple[float, float, str]]:
    """label -> (x, y, hover) of every drawn node and port, read from the marker traces' hover text."""
    out = {}
    for tr in fig.data:
        if tr.name in ("nodes", "inputs (q, k, v, mlp.in)"):
            for x, y, h in zip(tr.x, tr.y, tr.hovertext):
                out[re.match(r"<b>(.*?)</b>", h).group(1)] = (float(x), float(y), h)
    return out


def _edge_shapes(fig: go.Figure) -> list[tuple[str, float, float, list[tuple[float, ...]]]]:
    """(name, width, opacity, curves) per edge path drawn as a layout shape."""
    out = []
    for sh in fig.layout.shapes:
        curves = [tuple(map(float, m)) for m in _CURVE.findall(sh.path)]
        if curves:
            out.append((sh.name, float(sh.line.width), float(sh.opacity), curves))
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 2e-3 * max(1.0, abs(b))


def test_layout_ports_and_gqa_grouping():
    fig = circuit_graph_figure(EDGES, SCORES, n_heads=4, n_kv_heads=2)
    nodes = _nodes(fig)
    x = {k: v[0] for k, v in nodes.items()}
    y = {k: v[1] for k, v in nodes.items()}
    # forward order left to right: embeddings, L0 attention, L0 MLP, L1 attention, ..., the logits
    assert (
        x["embed"]
        == x["pos_embed"]
        < x["L0.H1"]
        < x["L0.mlp"]
        < x["L1.H2"]
        < x["L1.mlp"]
        < x["L2.H0"]
        < x["L2.mlp"]
        < x["unembed"]
    )
    assert x["L0.H1"] == x["L0.H3"] and x["L1.H1"] == x["L1.H2"]
    for h in ("L0.H1", "L0.H3", "L1.H2", "L2.H0"):  # a head sits at its own index
        assert y[h] == int(h.split("H")[1])
    # a query port beside its head, to its left but right of the previous column
    for port, head, prev in (
        ("L0.attn.q[H1]", "L0.H1", "embed"),
        ("L1.attn.q[H2]", "L1.H2", "L0.mlp"),
        ("L2.attn.q[H0]", "L2.H0", "L1.mlp"),
    ):
        assert y[port] == y[head] and x[prev] < x[port] < x[head]
    # GQA: KV head 1 serves query heads 2 and 3; its k and v ports sit between them, k above v, left of q
    for port, group in (
        ("L1.attn.k[H1]", (2, 3)),
        ("L0.attn.k[H0]", (0, 1)),
        ("L0.attn.v[H1]", (2, 3)),
        ("L1.attn.v[H0]", (0, 1)),
    ):
        assert group[0] <= y[port] <= group[1], port
        head_x = x[f"L{port[1]}.H{group[0]}"]
        assert head_x - 0.5 < x[port] < head_x
    assert "read by query heads H2, H3" in nodes["L1.attn.k[H1]"][2]
    # every query head of a drawn KV port is drawn and joined to the port by the thin structure path
    joins = [tuple(map(float, m)) for sh in fig.layout.shapes if not sh.name for m in _SEG.findall(sh.path)]
    for h in ("L1.H2", "L1.H3"):
        assert h in nodes
        assert any(
            _close(a, x["L1.attn.k[H1]"]) and _close(b, y["L1.attn.k[H1]"]) and _close(c, x[h]) and _close(d, y[h])
            for a, b, c, d in joins
        ), h
    assert any(_close(a, x["L0.mlp.in"]) and _close(c, x["L0.mlp"]) for a, _, c, _ in joins)  # the MLP's input port


def test_edges_join_writer_to_reader_port_with_width_and_colour_by_score():
    fig = circuit_graph_figure(EDGES, SCORES, n_heads=4, n_kv_heads=2, n_bins=4)
    nodes = _nodes(fig)
    shapes = _edge_shapes(fig)
    assert len(shapes) <= 2 * 4  # a handful of paths, not one per edge
    found = {}
    for e, s in zip(EDGES, SCORES):
        w, r = e.split("→")
        (wx, wy, _), (rx, ry, _) = nodes[w], nodes[r]
        hits = [
            (name, width, op)
            for name, width, op, curves in shapes
            for c in curves
            if _close(c[0], wx) and _close(c[1], wy) and _close(c[4], rx) and _close(c[5], ry)
        ]
        assert len(hits) == 1, e  # drawn once, from the writer's node to the reader's port
        name, width, op = hits[0]
        assert name.startswith("supports (> 0)" if s > 0 else "opposes (≤ 0)"), (e, name)  # colour group by sign
        found[e] = (abs(s), width, op)
    items = sorted(found.values())
    for (a, wa, oa), (b, wb, ob) in zip(items, items[1:]):  # width and opacity never shrink as |score| grows
        assert wb >= wa and ob >= oa
    assert items[-1][1] > items[0][1]
    colours = {sh.name.split(":")[0]: sh.line.color for sh in fig.layout.shapes if sh.name}
    assert set(colours) == {"supports (> 0)", "opposes (≤ 0)"}  # the legend says what the sign means
    blue, red = colours["supports (> 0)"], colours["opposes (≤ 0)"]
    assert int(blue[5:7], 16) > int(blue[1:3], 16) and int(red[1:3], 16) > int(red[5:7], 16)  # blue vs red


def test_hover_text_scores_exact_effects_and_node_info():
    exact = np.full(len(EDGES), np.nan)
    exact[EDGES.index("L1.H2→unembed")] = 1.8765
    info = {
        "L1.H2": {
            "DLA": 0.4321,
            "attends to": "“ Mary”@4 0.62",
            "OV top tokens": ["“ Mary” → “ Mary” 3.1", "<script>x</script>"],
        },
        "L0.H3": {"DLA": -0.25},
    }
    fig = circuit_graph_figure(EDGES, SCORES, exact=exact, node_info=info, n_heads=4, n_kv_heads=2)
    (hover_trace,) = [t for t in fig.data if t.name == "edges"]
    texts = list(hover_trace.hovertext)
    assert len(texts) == len(EDGES) and hover_trace.marker.maxdisplayed == 1
    for e, s, t in zip(EDGES, SCORES, texts):
        w, r = e.split("→")
        assert t.startswith(f"<b>{w} → {r}</b>") and f"score {s:.4g}" in t
    assert "exact patching effect 1.877" in texts[EDGES.index("L1.H2→unembed")]
    assert "not computed" in texts[0]
    # the hover point of an edge lies between its two ends
    nodes = _nodes(fig)
    for e, hx in zip(EDGES, hover_trace.x):
        w, r = e.split("→")
        assert min(nodes[w][0], nodes[r][0]) < hx < max(nodes[w][0], nodes[r][0])
    head = nodes["L1.H2"][2]
    assert "DLA: 0.4321" in head and "attends to: “ Mary”@4 0.62" in head and "“ Mary” → “ Mary” 3.1" in head
    assert "&lt;script&gt;x&lt;/script&gt;" in head and "<script>" not in head  # escaped
    assert "out: 2 edges, Σ score 2.9" in head  # L1.H2→L2.attn.q[H0] 0.9 + L1.H2→unembed 2.0
    assert "in via L1.attn.q[H2]: 1 edge, Σ score -0.8" in head  # L0.H3→L1.attn.q[H2]
    assert "in via L1.attn.k[H1]: 1 edge, Σ score 1.5" in head  # its KV head (H2 // 2 = 1): L0.H1→L1.attn.k[H1]
    (node_trace,) = [t for t in fig.data if t.name == "nodes"]
    col = dict(zip([re.match(r"<b>(.*?)</b>", h).group(1) for h in node_trace.hovertext], node_trace.marker.color))
    assert col["L1.H2"] == pytest.approx(0.4321) and col["L0.H3"] == pytest.approx(-0.25)  # coloured by DLA
    # a mapping of exact effects works the same
    fig2 = circuit_graph_figure(EDGES, SCORES, exact={"L1.H2→unembed": 1.8765}, n_heads=4)
    assert "exact patching effect 1.877" in fig2.data[0].hovertext[EDGES.index("L1.H2→unembed")]


def test_max_edges_keeps_the_largest_scores_and_says_so():
    fig = circuit_graph_figure(EDGES, SCORES, max_edges=3, n_heads=4)
    (hover_trace,) = [t for t in fig.data if t.name == "edges"]
    drawn = {re.match(r"<b>(.*?) → (.*?)</b>", t).groups() for t in hover_trace.hovertext}
    top3 = {tuple(EDGES[i].split("→")) for i in np.argsort(-np.abs(SCORES))[:3]}
    assert drawn == top3
    assert "3 of 12 edges" in fig.layout.title.text
    assert sum(len(c) for *_, c in _edge_shapes(fig)) == 3


def test_edges_without_scores_are_drawn_apart_and_last():
    unscored = SCORES.copy()
    unscored[[0, 5]] = np.nan  # e.g. a circuit given as a list of edges
    fig = circuit_graph_figure(EDGES, unscored, n_heads=4)
    (grey,) = [sh for sh in fig.layout.shapes if sh.name and sh.name.startswith("no score")]
    assert "(2)" in grey.name and len(_CURVE.findall(grey.path)) == 2
    assert sum(len(c) for *_, c in _edge_shapes(fig)) == len(EDGES)
    (hover_trace,) = [t for t in fig.data if t.name == "edges"]
    assert "score —" in hover_trace.hovertext[0]
    top = circuit_graph_figure(EDGES, unscored, n_heads=4, max_edges=10)  # the unscored two are left out
    assert not [sh for sh in top.layout.shapes if sh.name and sh.name.startswith("no score")]


class _FakeEdgeScores:
    """What an edge-attribution result exposes: edge labels, scores, optional exact effects, head counts."""

    def __init__(self) -> None:
        self.edges = EDGES
        self.scores = SCORES
        self.exact = None
        self.method = "eap-ig"
        self.n_heads, self.n_kv_heads = 4, 2


def test_reads_a_result_by_attributes():
    fig = circuit_graph_figure(_FakeEdgeScores())
    assert "Circuit graph — eap-ig" in fig.layout.title.text
    nodes = _nodes(fig)
    assert 2 <= nodes["L1.attn.k[H1]"][1] <= 3  # the GQA grouping came from the result's head counts


def test_bad_input_raises_typed_errors():
    with pytest.raises(ShapeError, match="scores has 2 values for 12 edges"):
        circuit_graph_figure(EDGES, [1.0, 2.0])
    bad = SCORES.copy()
    bad[3] = np.inf
    with pytest.raises(ArgumentError, match=r"scores\[3\]"):
        circuit_graph_figure(EDGES, bad)
    with pytest.raises(LabelError, match="L0.H1"):
        circuit_graph_figure(["L0.H1"], [1.0])
    with pytest.raises(LabelError, match="write"):
        circuit_graph_figure(["L1.attn.q[H0]→L0.H1"], [1.0])
    with pytest.raises(LabelError, match="L9.bogus"):
        circuit_graph_figure(["L9.bogus→unembed"], [1.0])
    with pytest.raises(ArgumentError, match="empty"):
        circuit_graph_figure([], [])
    with pytest.raises(ArgumentError, match="max_edges"):
        circuit_graph_figure(EDGES, SCORES, max_edges=0)
    with pytest.raises(ShapeError, match="exact has 1 values"):
        circuit_graph_figure(EDGES, SCORES, exact=[1.0])
    with pytest.raises(LabelError, match="exact names"):
        circuit_graph_figure(EDGES, SCORES, exact={"L0.H0→unembed": 1.0})


def random_edges(n: int, *, n_layers: int = 30, n_heads: int = 9, n_kv: int = 3, seed: int = 0):
    """``n`` distinct random edges of a smollm2-shaped graph (writer before reader) and heavy-tailed scores."""
    rng = np.random.default_rng(seed)
    writers = (
        [("embed", -1)]
        + [(f"L{l}.H{h}", l) for l in range(n_layers) for h in range(n_heads)]
        + [(f"L{l}.mlp", l + 0.5) for l in range(n_layers)]
    )
    readers = (
        [(f"L{l}.attn.q[H{h}]", l) for l in range(n_layers) for h in range(n_heads)]
        + [(f"L{l}.attn.{k}[H{h}]", l) for l in range(n_layers) for k in "kv" for h in range(n_kv)]
        + [(f"L{l}.mlp.in", l + 0.5) for l in range(n_layers)]
        + [("unembed", 1e9)]
    )
    edges: set[str] = set()
    while len(edges) < n:
        (w, lw), (r, lr) = writers[rng.integers(len(writers))], readers[rng.integers(len(readers))]
        if lw < lr:
            edges.add(f"{w}→{r}")
    edges_l = sorted(edges)
    return edges_l, rng.standard_normal(len(edges_l)) ** 3


@pytest.fixture(scope="module")
def big_page(tmp_path_factory):
    edges, scores = random_edges(5000)
    exact = np.where(np.arange(len(edges)) % 10 == 0, scores * 0.9, np.nan)
    fig = circuit_graph_figure(edges, scores, exact=exact, n_heads=9, n_kv_heads=3)
    path = tmp_path_factory.mktemp("circuit") / "graph.html"
    interp.export(fig, path, compact=True)
    return fig, path


@pytest.mark.slow
def test_5000_edge_page_is_self_contained_and_under_3_mb(big_page):
    fig, path = big_page
    text = path.read_text()
    size = path.stat().st_size
    print(f"\n5,000-edge circuit page: {size / 1e6:.2f} MB ({len(fig.data)} traces, {len(fig.layout.shapes)} paths)")
    assert size <= 3_000_000
    assert external_resources(text) == []
    assert len(fig.data) + len(fig.layout.shapes) <= 30  # a handful of traces, not one per edge
    assert len(fig.data[0].hovertext) == 5000


@pytest.mark.slow
@needs_browser
def test_5000_edges_render_in_headless_chromium_within_a_second(big_page):
    """Time from Plotly.newPlot to 'plotly_afterplot' in the page (performance.now()), best of two loads."""
    _, path = big_page
    runs = [probe_in_chromium(path.resolve().as_uri(), TIME_NEWPLOT) for _ in range(2)]
    render = min(r["afterplot"] - r["start"] for r in runs)
    load = min(r["afterplot"] for r in runs)
    load_avg = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    # 1 s on an idle machine; on a shared, overloaded one the bound grows with the run queue (at most 4 s)
    bound = 1000.0 * min(4.0, max(1.0, load_avg / cores))
    print(
        f"\nnewPlot → plotly_afterplot: {render:.0f} ms (runs {[round(r['afterplot'] - r['start']) for r in runs]}); "
        f"navigation start → afterplot: {load:.0f} ms; {runs[0]['paths']} SVG paths; "
        f"load average {load_avg:.1f} on {cores} cores, bound {bound:.0f} ms"
    )
    assert runs[0]["paths"] < 2000  # no SVG element per edge
    assert render <= bound


HOVER_PROBE = """
(function () {
  Object.defineProperty(window, "Plotly", {configurable: true, set: function (P) {
    Object.defineProperty(window, "Plotly", {value: P, writable: true, configurable: true});
    var orig = P.newPlot;
    P.newPlot = function (gd) {
      var el = typeof gd === "string" ? document.getElementById(gd) : gd;
      var out = orig.apply(this, arguments);
      el.on("plotly_afterplot", function () {
        setTimeout(function () {
          // a real mouse move over the plot area, at the pixel of one edge's hover point and of one node
          var drag = el.querySelector(".nsewdrag"), box = drag.getBoundingClientRect();
          var xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis, t = TARGET;
          drag.dispatchEvent(new MouseEvent("mousemove", {bubbles: true,
            clientX: box.left + xa.l2p(t[0]), clientY: box.top + ya.l2p(t[1])}));
          setTimeout(function () {
            window.__probe = Array.from(el.querySelectorAll("g.hovertext")).map(function (g) { return g.textContent; });
          }, 250);
        }, 100);
      });
      return out;
    };
  }});
})();
"""


@pytest.mark.slow
@needs_browser
def test_hovering_an_edge_and_a_node_in_chromium(tmp_path):
    fig = circuit_graph_figure(EDGES, SCORES, node_info={"L1.H2": {"DLA": 0.4321}}, n_heads=4, n_kv_heads=2)
    (hover_trace,) = [t for t in fig.data if t.name == "edges"]
    i = EDGES.index("L0.H1→L1.attn.k[H1]")
    nodes = _nodes(fig)
    path = interp.export(fig, tmp_path / "g.html", compact=True)
    targets = [[float(hover_trace.x[i]), float(hover_trace.y[i])], list(nodes["L1.H2"][:2])]
    edge_hover, node_hover = (
        probe_in_chromium(path.resolve().as_uri(), HOVER_PROBE.replace("TARGET", json.dumps(t))) for t in targets
    )
    assert any("L0.H1 → L1.attn.k[H1]" in t and "score 1.5" in t for t in edge_hover), edge_hover
    assert any("L1.H2" in t and "DLA: 0.4321" in t for t in node_hover), node_hover


@pytest.mark.slow
def test_figure_is_the_same_whatever_the_hash_seed():
    """Set iteration order changes with PYTHONHASHSEED; the figure (and so notebooks and pages) must not."""
    import subprocess
    import sys

    code = (
        "import hashlib, numpy as np; from interp.plots import circuit_graph_figure; "
        f"print(hashlib.sha1(circuit_graph_figure({EDGES!r}, np.array({SCORES.tolist()!r}), n_heads=4, "
        "n_kv_heads=2).to_json().encode()).hexdigest())"
    )
    import hashlib

    here = hashlib.sha1(circuit_graph_figure(EDGES, SCORES, n_heads=4, n_kv_heads=2).to_json().encode()).hexdigest()
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    other = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": seed},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert other == here


def test_bins_are_square_root_spaced_unless_linear():
    edges = ["L0.H0→unembed", "L0.H1→unembed", "L0.H2→unembed"]
    scores = [1.0, 0.3, 0.03]  # √: 1, 0.548, 0.173 → bins 4, 2, 0 of 5; linear: 1, 0.3, 0.03 → bins 4, 1, 0

    def widths(scale):
        fig = circuit_graph_figure(edges, scores, scale=scale)
        nodes = _nodes(fig)
        out = []
        for e in edges:
            w, r = e.split("→")
            (width,) = [
                wd
                for _, wd, _, cs in _edge_shapes(fig)
                for c in cs
                if _close(c[1], nodes[w][1]) and _close(c[5], nodes[r][1])
            ]
            out.append(width)
        return out

    sq, lin = widths("sqrt"), widths("linear")
    ladder = [round(0.6 + 5.4 * (b + 1) / 5, 2) for b in range(5)]  # the width of each bin
    assert sq == [ladder[4], ladder[2], ladder[0]] and lin == [ladder[4], ladder[1], ladder[0]]
    with pytest.raises(ArgumentError, match="scale"):
        circuit_graph_figure(edges, scores, scale="cube")
