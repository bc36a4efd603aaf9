"""The attribution-graph viewer (``AttributionGraph.show()`` / ``.to_html(path)``), in a real browser: the system
Chromium driven headless by playwright, with every network request refused.

* a graph of thousands of nodes opens with a bounded number drawn, stays one canvas (no element per node), and
  the sliders change the nodes and edges drawn;
* hovering a feature shows its label, its logit effects, its strongest incoming edge (from the whole graph) and
  the contexts the caller gave (as text: markup in a context is not interpreted);
* the stored logit effects are the graph's own direct path: for a last-layer feature at the output position the
  edge into the logit of its most promoted token, divided by its activation, is that token's effect (the graph's
  edges are checked against independent computations in tests/features).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from interp.features import AttributionGraph, attribution_graph
from plots_helpers import chromium_path, offline_page
from tiny_models import tiny_model
from tiny_transcoders import random_transcoders

PROMPT = "w1 w2 w3 w4 w5 w6 w7 w8"


@pytest.fixture(scope="module")
def small():
    m = tiny_model("llama")
    tcs = random_transcoders(m, 48, seed=7)
    return m, tcs, attribution_graph(m, PROMPT, tcs, target="w3", logit_effects=5)


def _synthetic(n_layers: int = 12, n_pos: int = 16, per_cell: int = 30, seed: int = 0) -> AttributionGraph:
    """A hand-built graph of n_layers·n_pos·(per_cell + 1) feature/error nodes (5,952 by default) with random
    edges from lower layers (the viewer reads fields only; how graphs are computed is tested elsewhere)."""
    gen = torch.Generator().manual_seed(seed)
    labels, kind, layer, pos, feat = [], [], [], [], []
    for l in range(n_layers):
        for p in range(n_pos):
            for f in range(per_cell):
                labels.append(f"L{l}.F{f + 100 * p}@{p}")
                kind.append("feature")
                layer.append(l)
                pos.append(p)
                feat.append(f)
            labels.append(f"L{l}.mlp_error@{p}")
            kind.append("error")
            layer.append(l)
            pos.append(p)
            feat.append(-1)
    for p in range(n_pos):
        labels.append(f"embed@{p}")
        kind.append("token")
        layer.append(-1)
        pos.append(p)
        feat.append(-1)
    labels.append("logit")
    kind.append("logit")
    layer.append(n_layers)
    pos.append(n_pos - 1)
    feat.append(-1)
    N = len(labels)
    lay, ps = torch.tensor(layer), torch.tensor(pos)
    ok = (lay[None, :] < lay[:, None]) & (ps[None, :] <= ps[:, None])  # [target, source]
    ok &= torch.tensor([k in ("feature", "logit") for k in kind])[:, None]
    A = torch.randn(N, N, generator=gen) * (torch.rand(N, N, generator=gen) < 0.01) * ok
    k = 5
    ids = torch.randint(0, 100, (N, 2 * k), generator=gen)
    vals = torch.cat(
        [
            torch.rand(N, k, generator=gen).sort(1, descending=True).values,
            -torch.rand(N, k, generator=gen).sort(1).values,
        ],
        1,
    )
    isf = torch.tensor([x == "feature" for x in kind])
    ids[~isf] = -1
    strs = [[f"tok{int(t)}" for t in row] if row[0] >= 0 else [] for row in ids.tolist()]
    return AttributionGraph(
        adjacency=A,
        bias=torch.zeros(N),
        value=torch.randn(N, generator=gen),
        activation=torch.rand(N, generator=gen),
        node_labels=labels,
        node_kind=kind,
        node_layer=layer,
        node_pos=pos,
        node_feature=feat,
        tokens=list(range(n_pos)),
        target_ids=[5],
        target="'x'",
        closure_error=0.0,
        relative_error=0.0,
        n_layers=n_layers,
        model_name="synthetic",
        token_strs=[f"t{p}" for p in range(n_pos)],
        logit_effect_ids=ids,
        logit_effect_values=vals,
        logit_effect_strs=strs,
    )


def _edge_order(g):
    """The graph's nonzero edges (target, source), strongest first by circuit-tracer's pruning score
    |A[t, s]| / Σ_s' |A[t, s']| · (influence_t + w_t), from the graph's fields."""
    A = g.adjacency.double()
    w = torch.tensor([float(k == "logit") for k in g.node_kind]) if g.output_weight is None else g.output_weight
    score = A.abs() / A.abs().sum(1, keepdim=True).clamp_min(1e-30) * (g.influence().double() + w.double())[:, None]
    t, s = A.nonzero(as_tuple=True)
    order = sorted(range(len(t)), key=lambda e: -float(score[t[e], s[e]]))
    tl, sl = t.tolist(), s.tolist()
    return [(tl[e], sl[e]) for e in order]


def _expected_drawing(g, n_nodes):
    """The nodes the viewer draws with ``n_nodes`` feature/error nodes, and the edges it always draws (each output's 5
    and each other node's 2 strongest inputs by |weight|), from the graph's fields."""
    A = g.adjacency.double()
    infl = g.influence()
    mid = [i for i, k in enumerate(g.node_kind) if k in ("feature", "error")]
    always = set()
    vals, idx = A.abs().topk(5, dim=1)
    for t, (v, i) in enumerate(zip(vals.tolist(), idx.tolist())):
        k = 5 if g.node_kind[t] == "logit" else 2
        always |= {(t, s) for x, s in zip(v[:k], i[:k]) if x > 0}
    pinned = {s for t, s in always if g.node_kind[t] == "logit"}
    drawn = set(sorted(mid, key=lambda i: -float(infl[i]))[:n_nodes]) | pinned
    drawn |= {i for i, k in enumerate(g.node_kind) if k in ("token", "logit")}
    return drawn, always


def test_logit_effects_are_the_direct_path(small):
    m, tcs, g = small
    L, last = m.arch.n_layers, len(g.tokens) - 1
    i = next(
        j
        for j, (k, l, p) in enumerate(zip(g.node_kind, g.node_layer, g.node_pos))
        if k == "feature" and l == L - 1 and p == last
    )
    tok = int(g.logit_effect_ids[i, 0])
    g2 = attribution_graph(m, PROMPT, tcs, target=tok)  # the same nodes, the output = that token's logit
    j = g2.node_labels.index(g.node_labels[i])
    per_unit = float(g2.adjacency[-1, j]) / float(g2.activation[j])
    assert per_unit == pytest.approx(float(g.logit_effect_values[i, 0]), rel=1e-4, abs=1e-6)
    vals = g.logit_effect_values[i]
    assert (vals[:4] >= vals[1:5]).all() and (vals[5:9] <= vals[6:10]).all() and vals[4] >= vals[5]
    assert g.logit_effect_strs[i][0] == m.tokenizer.decode([tok])
    p = g.prune(0.5, 0.9)  # pruning keeps each node's row
    k = p.node_labels.index(g.node_labels[i]) if g.node_labels[i] in p.node_labels else None
    if k is not None:
        assert torch.equal(p.logit_effect_ids[k], g.logit_effect_ids[i])


@pytest.mark.slow
def test_viewer_in_chromium_offline(small, tmp_path):
    chrome = chromium_path()
    if chrome is None:
        pytest.skip("no system Chromium (set BROWSER_PATH)")
    g = _synthetic()
    n_mid = sum(k in ("feature", "error") for k in g.node_kind)
    assert n_mid >= 1500, n_mid  # thousands of nodes
    feat = int(torch.tensor([k == "feature" for k in g.node_kind]).nonzero()[0])
    lab = g.node_labels[feat]
    generic = lab.split("@")[0]
    path = g.to_html(
        tmp_path / "graph.html", contexts={generic: ["the <b>cat</b> sat", "second context"]}, nodes=200, edges=300
    )
    with offline_page(chrome, width=1400) as (page, attempted, errors):
        page.goto(path.resolve().as_uri())
        page.wait_for_function("window.interpFeatureGraph && Object.keys(window.interpFeatureGraph).length")
        api = "window.interpFeatureGraph[Object.keys(window.interpFeatureGraph)[0]]"
        n_tok = len(g.tokens)
        n_out = sum(k == "logit" for k in g.node_kind)
        # the nodes drawn: the 200 most influential, tokens, outputs and the sources of the outputs' 5 strongest inputs
        drawn, always = _expected_drawing(g, 200)
        assert page.evaluate(f"{api}.shownNodes()") == len(drawn) < 200 + n_tok + n_out + 5
        # the edges drawn: those of the 300 strongest by influence-weighted weight between drawn nodes, and the
        # always-drawn inputs between drawn nodes
        top = {e for e in _edge_order(g)[:300] if e[0] in drawn and e[1] in drawn}
        assert top and page.evaluate(f"{api}.drawnEdges()") == len(top | {e for e in always if set(e) <= drawn})
        assert page.evaluate("document.querySelectorAll('*').length") < 150  # one canvas, no node elements
        # the sliders: every feature/error node, then no edges
        page.evaluate(
            "(() => { const s = document.querySelector('.fg-nodes'); s.value = s.max;"
            " s.dispatchEvent(new Event('input')); })()"
        )
        assert page.evaluate(f"{api}.shownNodes()") == n_mid + n_tok + n_out
        page.evaluate(
            "(() => { const s = document.querySelector('.fg-edges'); s.value = 0;"
            " s.dispatchEvent(new Event('input')); })()"
        )
        assert page.evaluate(f"{api}.drawnEdges()") == len(always)  # every node drawn: only the always-drawn edges
        # hover the feature: its logit effects, strongest incoming edge, contexts (as text)
        x, y = page.evaluate(f"{api}.xy({lab!r})")
        page.mouse.move(x, y)
        page.wait_for_function(
            f"document.querySelector('.fg-info h4') && "
            f"document.querySelector('.fg-info h4').textContent.startsWith({lab!r})"
        )
        text = page.inner_text(".fg-info")
        assert "logit effects" in text and repr(g.logit_effect_strs[feat][0]) in text
        A = g.adjacency
        src = int(A[feat].abs().argmax())
        assert "strongest incoming edges" in text and g.node_labels[src] in text
        assert (
            "the <b>cat</b> sat" in text and page.evaluate("document.querySelectorAll('.fg-info .ctx b').length") == 0
        )
        page.screenshot(path=str(tmp_path / "graph.png"))
        # a real graph's page: hovering a feature shows its computed logit effects
        _, _, real = small
        i = real.node_kind.index("feature")
        page.goto(real.to_html(tmp_path / "real.html").resolve().as_uri())
        page.wait_for_function("window.interpFeatureGraph && Object.keys(window.interpFeatureGraph).length")
        page.mouse.move(*page.evaluate(f"{api}.xy({real.node_labels[i]!r})"))
        page.wait_for_function(f"document.querySelector('.fg-info h4').textContent.startsWith({real.node_labels[i]!r})")
        assert repr(real.logit_effect_strs[i][0]) in page.inner_text(".fg-info")
        # a graph built without them (the default) says how to ask for them
        m, tcs, _ = small
        bare = attribution_graph(m, PROMPT, tcs, target="w3")
        page.goto(bare.to_html(tmp_path / "bare.html").resolve().as_uri())
        page.wait_for_function("window.interpFeatureGraph && Object.keys(window.interpFeatureGraph).length")
        page.mouse.move(*page.evaluate(f"{api}.xy({bare.node_labels[i]!r})"))
        page.wait_for_function(f"document.querySelector('.fg-info h4').textContent.startsWith({bare.node_labels[i]!r})")
        assert "logit effects not computed: attribution_graph(..., logit_effects=5)" in page.inner_text(".fg-info")
        assert not errors, errors
    assert not attempted, attempted


@pytest.mark.slow
def test_viewer_opens_whole_in_a_laptop_window(small, tmp_path):
    """At 1,400 × 900 the viewer opens with every layer and the token axis in view (no scrolling inside its box or
    the page: 30 layers of 48-px rows used to hide the token axis and layers 0–2), and hovering the output node
    shows its logit, not "influence on the output 0.0000"."""
    chrome = chromium_path()
    if chrome is None:
        pytest.skip("no system Chromium (set BROWSER_PATH)")
    g = _synthetic(n_layers=30, n_pos=12, per_cell=4)
    path = g.to_html(tmp_path / "tall.html", nodes=200, edges=300)
    with offline_page(chrome, width=1400, height=900) as (page, attempted, errors):
        page.goto(path.resolve().as_uri())
        page.wait_for_function("window.interpFeatureGraph && Object.keys(window.interpFeatureGraph).length")
        m = page.evaluate("""() => {
          const c = document.querySelector('canvas'), w = c.parentNode, r = c.getBoundingClientRect();
          return {top: r.top, bottom: r.bottom, right: r.right, inner: [window.innerWidth, window.innerHeight],
                  wrap: [w.scrollHeight, w.clientHeight, w.scrollWidth, w.clientWidth],
                  page: [document.documentElement.scrollHeight, window.scrollY]};
        }""")
        assert errors == [] and attempted == []
        assert m["page"][1] == 0 and 0 <= m["top"] and m["bottom"] <= m["inner"][1], m  # whole canvas in view
        assert m["wrap"][0] <= m["wrap"][1], m  # nothing hidden in the box: the token axis is drawn in view
        api = "window.interpFeatureGraph[Object.keys(window.interpFeatureGraph)[0]]"
        for lab in ("L0.mlp_error@0", "embed@0"):  # the lowest layer and a token: inside the window
            x, y = page.evaluate(f"{api}.xy({lab!r})")
            assert 0 <= y <= m["inner"][1] and 0 <= x <= m["inner"][0], (lab, x, y)
        out = g.node_kind.index("logit")
        page.mouse.move(*page.evaluate(f"{api}.xy({g.node_labels[out]!r})"))
        page.wait_for_function(f"document.querySelector('.fg-info h4').textContent.startsWith({g.node_labels[out]!r})")
        text = page.inner_text(".fg-info")
        assert "influence on the output" not in text and "logit (the output this graph explains)" in text, text
        assert f"{float(g.value[out]):.4f}" in text


def test_contexts_that_match_no_feature_are_refused():
    """to_html(contexts=…) ignored keys that match no feature of the graph without a word; now a LabelError names
    them and keys that would match. Keys by node label, by feature ('L0.F3') or 'L0.F3@*' are matched."""
    from interp.errors import LabelError
    from interp.plots import feature_graph_view

    g = _synthetic(n_layers=2, n_pos=3, per_cell=2)
    lab = g.node_labels[g.node_kind.index("feature")]
    feat = lab.split("@")[0]
    for key in (lab, feat, feat + "@*"):
        view = feature_graph_view(g, contexts={key: ["ctx"]})
        assert view.payload["contexts"][g.node_labels.index(lab)] == ["ctx"]
    with pytest.raises(LabelError, match=r"match no feature of this graph: \['L7.F1', 'L0.F3@9'\].*'L0.F0'"):
        feature_graph_view(g, contexts={feat: ["ok"], "L7.F1": ["x"], "L0.F3@9": ["y"]})


@pytest.mark.slow
def test_edges_into_the_output_are_drawn(tmp_path):
    """With trained Gemma transcoders the output had no visible edge, by default or with the edge slider at its
    maximum: edges were ranked by raw |weight| over the whole graph (early pre-activation edges ~10× those into the
    logit). Here the early edges are scaled ×100: the output's strongest inputs are drawn with the defaults, with the
    node slider at 1 and with the edge slider at 0 or its maximum, and asking more edges than the page holds says so."""
    chrome = chromium_path()
    if chrome is None:
        pytest.skip("no system Chromium (set BROWSER_PATH)")
    g = _synthetic(n_layers=6, n_pos=8, per_cell=10, seed=1)
    lay = torch.tensor(g.node_layer)
    early = (lay[:, None] <= 2) & (lay[None, :] >= 0)  # targets in layers 0-2: pre-activation edges
    A = g.adjacency * torch.where(early, 100.0, 1.0)
    out = g.node_labels.index("logit")
    assert A[out].abs().max() < 0.05 * A.abs().max()  # by raw |weight| the output's inputs rank far down
    g = dataclasses.replace(g, adjacency=A)
    path = g.to_html(tmp_path / "g.html", nodes=50, edges=20_000, max_edges=300)
    n_in = min(5, int((A[out] != 0).sum()))
    with offline_page(chrome, width=1400) as (page, attempted, errors):
        page.goto(path.resolve().as_uri())
        page.wait_for_function("window.interpFeatureGraph && Object.keys(window.interpFeatureGraph).length")
        api = "window.interpFeatureGraph[Object.keys(window.interpFeatureGraph)[0]]"
        assert page.evaluate(f"{api}.drawnInto('logit')") >= n_in > 0
        assert "edges=20000 > " in page.evaluate(f"{api}.edgeText()")
        for cls, value in (("fg-edges", "0"), ("fg-edges", "s.max"), ("fg-nodes", "1")):
            page.evaluate(
                f"(() => {{ const s = document.querySelector('.{cls}'); s.value = {value};"
                " s.dispatchEvent(new Event('input')); })()"
            )
            assert page.evaluate(f"{api}.drawnInto('logit')") >= n_in, (cls, value)
        assert not errors, errors
    assert not attempted, attempted
