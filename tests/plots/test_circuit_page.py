"""The circuit page is readable: in a real browser (the system Chromium driven headless by playwright) at
1,400 px, with every network request refused, the graph of a 30-layer model fits the window (every layer's
label on screen, no sideways scrolling anywhere), the legend is whole, hovering an edge shows its score and
exact effect, and the slider changes the edges drawn; it opens on the smallest evaluated circuit that
reaches the stated faithfulness; the header says what the metric is for the task as a whole."""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from interp.causal import LogitDiff
from interp.plots import circuit_graph_figure
from interp.reports import task_report
from plots_helpers import chromium_path, offline_page
from tiny_models import tiny_model

CLEAN = ["w1 w2 w3 w4 w1 w2", "w5 w6 w7 w8 w5 w6", "w9 w10 w11 w12 w9 w10"]
CORRUPT = ["w1 w2 w3 w4 w13 w14", "w5 w6 w7 w8 w15 w16", "w9 w10 w11 w12 w17 w18"]
ANSWER, WRONG = ["w3", "w7", "w11"], ["w4", "w8", "w12"]
N_LAYERS = 30
MAX_EDGES = 600
TARGET = 0.3  # a random model's circuits are not very faithful: a target that one of the small circuits reaches
WIDTH = 1400


@pytest.fixture(scope="module")
def deep_report(tmp_path_factory):
    """A 30-layer GQA model (4 query heads, 2 KV heads) through the whole report."""
    m = tiny_model("llama", n_layers=N_LAYERS)
    task = SimpleNamespace(
        name="tiny-induction", clean=CLEAN, corrupt=CORRUPT, metric=LogitDiff(answer=ANSWER, wrong=WRONG)
    )
    out = tmp_path_factory.mktemp("circuit-page") / "deep"
    index = task_report(
        m,
        task,
        out_dir=out,
        method="eap-ig",
        ig_steps=2,
        n_exact=12,
        max_edges=MAX_EDGES,
        target=TARGET,
        ablations=("zero", "resample"),
        sizes=(0.002, 0.005, 0.01, 0.02, 0.05, 1.0),
    )
    return out, index


def _faith(out: Path) -> tuple[dict, dict, dict]:
    r = json.loads((out / "results.json").read_text())
    f = json.loads((out / "faithfulness.json").read_text())
    e = json.loads((out / "edges.json").read_text())
    return r, f, e


@pytest.mark.slow
def test_header_states_the_metric_for_the_whole_task(deep_report):
    out, index = deep_report
    page = index.read_text()
    header = html_lib.unescape(re.search(r"<header>(.*?)</header>", page, re.S).group(1))
    # not prompt 0's tokens as if they were the metric: the formula, whose tokens, the mean over the prompts
    assert "logit['w3']" not in header and "per-prompt tokens" not in header
    assert "logit[answer] − logit[wrong]" in header
    assert "each prompt with its own answer and wrong token" in header and "mean over 3 prompts" in header
    assert "at each prompt's last token" in header


@pytest.mark.slow
def test_graph_opens_on_the_smallest_circuit_reaching_the_target(deep_report):
    out, _ = deep_report
    r, f, e = _faith(out)
    # independently: the curve's points under resample ablation (the one nearest the corruption), smallest first
    pts = sorted((p for p in f["points"] if p["ablation"] == "resample"), key=lambda p: p["k"])
    fitting = [p for p in pts if 0 < p["n_edges"] <= MAX_EDGES]
    assert len(fitting) >= 2, pts
    reach = [p for p in fitting if p["faithfulness"] >= TARGET]
    d = r["graph_default"]
    assert d["ablation"] == "resample" and d["target"] == TARGET
    if reach:
        assert d["reached"] and d["n_edges"] == reach[0]["kept"]
    else:
        assert not d["reached"] and d["n_edges"] == r["graph_steps"][-1]["n_edges"]
    # the slider's steps: the evaluated circuits that fit (their pruned sizes, their faithfulness), then the
    # MAX_EDGES strongest edges
    steps = r["graph_steps"]
    assert [s["n_edges"] for s in steps[: len(fitting)]] == [p["kept"] for p in fitting]
    assert [s["faithfulness"] for s in steps[: len(fitting)]] == pytest.approx([p["faithfulness"] for p in fitting])
    assert steps[-1]["n_edges"] == MAX_EDGES and r["n_drawn"] == MAX_EDGES
    assert max(s["n_edges"] for s in steps) == MAX_EDGES


def test_graph_figure_fills_its_container_and_has_a_slider():
    edges = ["embed→L0.attn.q[H0]", "L0.H0→L1.attn.k[H0]", "L0.mlp→unembed", "L1.H1→unembed", "embed→L1.mlp.in"]
    scores = [0.5, -0.4, 0.3, 0.2, -0.1]
    fig = circuit_graph_figure(edges, scores)
    assert fig.layout.width is None  # no fixed width: the page's div and plotly's responsive mode size it
    steps = [edges[:2], edges[:4], edges]
    fig = circuit_graph_figure(edges, scores, steps=steps, step_labels=["2", "4", "all"], active=1)
    (slider,) = fig.layout.sliders
    assert slider.active == 1 and [s.label for s in slider.steps] == ["2", "4", "all"]

    def n_curves(shapes):
        return sum(len(re.findall("Q", sh["path"])) for sh in shapes if sh.get("name"))

    assert n_curves([sh.to_plotly_json() for sh in fig.layout.shapes]) == 4  # the active step is drawn first
    for st, step in zip(steps, slider.steps):
        assert n_curves(step.args[1]["shapes"]) == len(st)
        hover = step.args[0]["hovertext"][0]  # the edges' hover targets
        assert len(hover) == len(st) and all(any(e.replace("→", " → ") in h for h in hover) for e in st)


def test_log_bins_separate_scores_that_span_decades():
    """scale="log": bins of equal ratio between the smallest and largest |score|, so scores a decade apart get
    their own widths (with "sqrt" all but the largest would share the faintest bin)."""
    edges = ["embed→L0.attn.q[H0]", "embed→L0.attn.q[H1]", "embed→L0.mlp.in", "L0.mlp→unembed"]
    scores = [1.0, -0.1, 0.01, 0.001]

    def widths(scale):
        fig = circuit_graph_figure(edges, scores, n_bins=4, scale=scale)
        return sorted(sh.line.width for sh in fig.layout.shapes if sh.name)

    assert len(set(widths("log"))) == 4
    assert len(set(widths("sqrt"))) < 4  # 0.01 and 0.001 share the faintest bin


def _chromium() -> str:
    path = chromium_path()
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(
                "Chromium is missing on CI: scripts/setup_system.sh installs it (apt-get install chromium); "
                "the circuit page's browser test cannot run without it"
            )
        pytest.skip("needs Chromium (apt-get install chromium, or BROWSER_PATH)")
    return path


_MEASURE = """() => {
  const gd = document.querySelector('#graph .js-plotly-plot');
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; };
  const curves = [...gd.querySelectorAll('.shapelayer path')].map(p => (p.getAttribute('d').match(/Q/g) || []).length);
  return {
    page: [document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth],
    sections: [...document.querySelectorAll('section')].map(s => [s.id, s.scrollWidth, s.clientWidth]),
    figure: box(gd),
    ticks: [...gd.querySelectorAll('.xtick text')].map(t => [t.textContent, ...box(t)]),
    legend: box(gd.querySelector('.legend')),
    legend_items: [...gd.querySelectorAll('.legend .traces')].map(t => [t.textContent, ...box(t)]),
    legend_scrolls: !!gd.querySelector('.legend .scrollbar') &&
                    gd.querySelector('.legend .scrollbar').getBoundingClientRect().height > 0,
    curves: curves.reduce((a, b) => a + b, 0),
  };
}"""


def _point(page, x: float, y: float) -> tuple[float, float]:
    """Screen coordinates of a data point of the graph."""
    return tuple(
        page.evaluate(
            """([x, y]) => {
      const gd = document.querySelector('#graph .js-plotly-plot'), fl = gd._fullLayout, r = gd.getBoundingClientRect();
      return [r.left + fl._size.l + fl.xaxis.d2p(x), r.top + fl._size.t + fl.yaxis.d2p(y)];
    }""",
            [x, y],
        )
    )


@pytest.mark.slow
def test_page_in_chromium_at_1400px_offline_fits_hovers_and_slides(deep_report, tmp_path):
    out, index = deep_report
    _check_in_chromium(out, index, N_LAYERS, tmp_path)


@pytest.mark.real
@pytest.mark.slow
def test_smollm2_factual_page_in_chromium(tmp_path):
    """``interp circuit`` with the shipped factual task on smollm2 (30 layers, its defaults: EAP-IG, 2,000 edges,
    three ablations): the same checks in the browser; the screenshot shows all 30 layers."""
    from interp.cli import main

    out = tmp_path / "factual"
    assert main(["circuit", "--model", "smollm2-135m", "--task", "factual", "--out", str(out), "-q"]) == 0
    _check_in_chromium(out, out / "index.html", 30, tmp_path)


def _check_in_chromium(out: Path, index: Path, n_layers: int, shots: Path) -> None:
    """Open the page at 1,400 px with every network request refused and check what a reader sees."""
    chrome = _chromium()
    r, _, e = _faith(out)
    by_edge = {x["edge"]: x for x in e["edges"]}
    with offline_page(chrome, width=WIDTH) as (page, attempted, errors):
        page.goto(index.resolve().as_uri())
        page.wait_for_function("!document.getElementById('interp-status')", timeout=90_000)
        page.wait_for_timeout(300)
        assert errors == [] and attempted == []
        page.locator("#graph").scroll_into_view_if_needed()
        m = page.evaluate(_MEASURE)
        shot = shots / f"circuit-graph-{n_layers}-layers-1400.png"
        page.locator("#graph").screenshot(path=str(shot))
        page.screenshot(path=str(shots / "circuit-page-1400.png"), full_page=True)
        if os.environ.get("INTERP_SCREENSHOTS"):  # keep them for a person to look at
            shutil.copy(shot, Path(os.environ["INTERP_SCREENSHOTS"]) / shot.name)

        # nothing scrolls sideways: the page, and each section (the graph's card had a scrollbar)
        assert m["page"][0] <= WIDTH and m["page"][1] <= WIDTH, m["page"]
        wide = [s for s in m["sections"] if s[1] > s[2]]
        assert wide == [], wide
        left, right, top, bottom = m["figure"]
        assert 0 <= left and right <= WIDTH
        # every layer's label is drawn, inside the figure and the window
        names = [t[0] for t in m["ticks"]]
        assert [f"L{i}" for i in range(n_layers)] == [n for n in names if n.startswith("L")], names
        for name, l0, r0, t0, b0 in m["ticks"]:
            assert left <= l0 and r0 <= right and r0 <= WIDTH, (name, l0, r0, left, right)
        ticks = sorted(m["ticks"], key=lambda t: t[1])
        overlaps = [(a[0], b[0]) for a, b in zip(ticks, ticks[1:]) if a[2] > b[1] + 0.5]
        assert overlaps == [], overlaps
        # the legend is whole: every entry inside the figure, none scrolled out of view
        lg = m["legend"]
        assert left <= lg[0] and lg[1] <= right and top <= lg[2] and lg[3] <= bottom, (lg, m["figure"])
        assert m["legend_items"] and not m["legend_scrolls"]
        for item in m["legend_items"]:
            assert left <= item[1] and item[2] <= right and top <= item[3] and item[4] <= bottom, item

        # it opens on the default circuit
        d = r["graph_default"]
        assert m["curves"] == d["n_edges"]

        # hovering an edge's middle shows its score and its exact patching effect
        trace = page.evaluate(
            "() => { const t = document.querySelector('#graph .js-plotly-plot').data[0];"
            " return {x: Array.from(t.x), y: Array.from(t.y), h: t.hovertext}; }"
        )
        pts = [_point(page, x, y) for x, y in zip(trace["x"], trace["y"])]
        exact = [i for i, h in enumerate(trace["h"]) if "exact patching effect" in h]
        assert exact, "no exactly patched edge in the circuit drawn first"

        def isolation(i):
            return (
                min(((pts[i][0] - q[0]) ** 2 + (pts[i][1] - q[1]) ** 2) ** 0.5 for j, q in enumerate(pts) if j != i)
                if len(pts) > 1
                else 1e9
            )

        target = max(exact, key=isolation)
        page.mouse.move(*pts[target])
        page.locator("#graph .hoverlayer .hovertext").first.wait_for(timeout=10_000)
        lines = page.evaluate(
            "() => [...document.querySelectorAll('#graph .hoverlayer .hovertext tspan.line')].map(t => t.textContent)"
        )
        text = "\n".join(lines)
        edge = re.fullmatch(r"(\S+) → (\S+)", lines[0]) if lines else None
        assert edge, text
        rec = by_edge[f"{edge.group(1)}→{edge.group(2)}"]
        assert rec["exact"] is not None and f"{edge.group(1)} → {edge.group(2)}" in trace["h"][target]
        score = float(re.search(r"score (\S+)", text).group(1))
        effect = float(re.search(r"exact patching effect (\S+)", text).group(1))
        assert score == pytest.approx(rec["score"], rel=1e-3, abs=1e-9)
        assert effect == pytest.approx(rec["exact"], rel=1e-3, abs=1e-9)
        page.mouse.move(5, 5)

        # the slider changes the edges drawn: click each step's label
        steps = r["graph_steps"]
        labels = page.locator("#graph .slider-label")
        assert labels.count() == len(steps)
        for k in [0, len(steps) - 1, d["step"]]:
            box = labels.nth(k).bounding_box()
            rail = page.locator("#graph .slider-rail-touch-rect").bounding_box()
            page.mouse.click(box["x"] + box["width"] / 2, rail["y"] + rail["height"] / 2)
            page.wait_for_timeout(300)
            assert page.evaluate(_MEASURE)["curves"] == steps[k]["n_edges"], (k, steps[k])
        assert steps[0]["n_edges"] < steps[-1]["n_edges"]
        assert attempted == [] and errors == []


@pytest.mark.slow
def test_graph_opens_in_view_at_1400_by_900(deep_report):
    """The graph is what the page is for: opened at 1,400 × 900 (no scrolling), the circuit graph is the first
    section and the whole figure — its slider, every layer and its legend — is inside the window; the tables
    follow it. Its legend says which colour supports the metric."""
    out, index = deep_report
    with offline_page(_chromium(), width=WIDTH, height=900) as (page, attempted, errors):
        page.goto(index.resolve().as_uri())
        page.wait_for_function("!document.getElementById('interp-status')", timeout=90_000)
        page.wait_for_timeout(300)
        assert errors == [] and attempted == []
        m = page.evaluate("""() => {
          const gd = document.querySelector('#graph .js-plotly-plot'), r = gd.getBoundingClientRect();
          const lg = gd.querySelector('.legend').getBoundingClientRect();
          return {scroll: window.scrollY, figure: [r.left, r.right, r.top, r.bottom], legend: [lg.top, lg.bottom],
                  inner: [window.innerWidth, window.innerHeight],
                  sections: [...document.querySelectorAll('section')].map(s => s.id),
                  legend_text: [...gd.querySelectorAll('.legend .traces')].map(t => t.textContent)};
        }""")
    assert m["scroll"] == 0 and m["sections"][0] == "graph", m["sections"]
    left, right, top, bottom = m["figure"]
    assert 0 <= left and right <= m["inner"][0] and 0 <= top and bottom <= m["inner"][1], m
    assert m["legend"][1] <= m["inner"][1], m
    assert any(t.startswith("supports (> 0)") for t in m["legend_text"]), m["legend_text"]
    html = index.read_text()
    assert "blue: score &gt; 0, the edge supports the metric" in html or "blue: score > 0, the edge supports" in html
