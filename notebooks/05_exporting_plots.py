# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Exporting every figure, and a report
#
# **What this shows.** Every figure interp draws, built from real results on **smollm2-135m**, exported
# to HTML (self-contained: plotly.js inlined, opens with no network), PNG and SVG (rendered by kaleido in
# one headless Chromium that is started once and reused) and JSON (the plotly figure, or the nodes and
# edges of a circuit graph) — all into a temporary directory; then the one-call HTML report
# (`interp.report`, the same as `interp report` on the command line). Offline, 1–3 minutes on 2 CPU
# cores; PNG/SVG need Chromium (`make test` installs it where apt is available).

# %%
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything below runs offline
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import logging
import time

import plotly.io as pio
import torch

import interp

logging.getLogger("transformers").setLevel(logging.ERROR)
pio.renderers.default = "plotly_mimetype+png"  # interactive in Jupyter; a PNG copy where JavaScript does not run
torch.manual_seed(0)
T0 = time.perf_counter()

# %%
import json
import re
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from interp import circuits, plots, stream

model = interp.load_model("smollm2-135m")
prompt = "When John and Mary went to the shops, John gave the bag to"
out = Path(tempfile.mkdtemp(prefix="interp-export-"))
print("exporting into", out)

# %% [markdown]
# ## The results behind the figures
#
# One trace, one decomposition, one logit attribution, attention patterns of the top heads, and the
# weight-only circuit results (copying and composition scores, an OV circuit). Closure errors printed.

# %%
tr = interp.trace(model, prompt)
dec = tr.decompose("L23.attn.q[H3]")
attr = interp.attribute_logits(model, prompt, answer=" Mary", wrong=" John")
print(dec, attr, sep="\n")
heads = [t for t in attr.top(30)["term"] if re.fullmatch(r"L\d+\.H\d+", t)][:6]
pats = stream.attention_patterns(model, prompt, heads)
copying = interp.copying_scores(model)
comp = {kind: interp.composition_scores(model, kind) for kind in ("Q", "K", "V")}
ov = interp.ov_circuit(model, 23, 3)
full_ov = interp.ov_circuit(model, 23, 3, full=True)
ids = [i for i in dict.fromkeys(tr.tokens[0].tolist()) if i not in model.tokenizer.all_special_ids]
graph = circuits.composition_edges(comp, heads=heads, max_edges=None,
                                   node_values={h: attr[h].item() for h in heads}, node_value_name="DLA")
erasure = circuits.erasure_candidates(model, screen=30)
graph.top(5)

# %%
figures = {
    # interp.plots builders
    "decomposition": plots.decomposition_figure(dec, k=15),
    "residual_stream": plots.residual_stream_figure(tr),
    "attribution_heatmap": plots.attribution_heatmap(attr),
    "attribution_waterfall": plots.attribution_waterfall(attr, k=12),
    "attention_patterns": plots.attention_pattern_figure(pats),
    "copying_scores": plots.copying_score_map(copying),
    "ov_eigenvalues": plots.ov_eigenvalue_figure(ov),
    "ov_top_tokens": plots.top_token_table(full_ov, ids, k=4, decode=lambda i: model.tokenizer.decode([i])),
    "composition_graph": plots.composition_graph_figure(graph),
    # results' own .plot()
    "composition_K": comp["K"].plot(),
    "erasure": erasure.plot(),
}
print(len(figures), "figures:", ", ".join(figures))
figures["composition_graph"]

# %% [markdown]
# ## Export: HTML, PNG, SVG, JSON
#
# `interp.export(figure_or_result, path)` picks the format from the suffix and writes atomically (a
# temporary file renamed into place). One `Exporter` keeps the browser open for all static images.
# Results with a `.plot()` can be exported directly, and a circuit graph's `.json` is its nodes and edges.

# %%
t = time.perf_counter()
with interp.Exporter() as ex:
    for name, fig in figures.items():
        for suffix in ("html", "png", "svg", "json"):
            interp.export(fig, out / f"{name}.{suffix}", exporter=ex)
    interp.export(attr, out / "attribution_from_result.png", exporter=ex)  # a result, not a figure
    interp.export(graph, out / "composition_graph_nodes_edges.json")
print(f"exported in {time.perf_counter() - t:.1f} s")
sizes = pd.DataFrame([{"figure": f.stem, "format": f.suffix[1:], "kB": round(f.stat().st_size / 1e3)}
                      for f in out.iterdir()])
print(f"{len(sizes)} files, {sizes.kB.sum() / 1e3:.0f} MB (each HTML inlines plotly.js, ~4.8 MB)")
sizes.pivot_table(index="figure", columns="format", values="kB")

# %% [markdown]
# Check what was written, without trusting the exporter: PNG magic bytes, SVG markup, JSON that plotly
# reads back into the same figure, HTML with plotly.js inside and no external script.

# %%
import plotly.io as pio

for name, fig in figures.items():
    png = (out / f"{name}.png").read_bytes()
    svg = (out / f"{name}.svg").read_text()
    html = (out / f"{name}.html").read_text()
    back = pio.from_json((out / f"{name}.json").read_text())
    assert png[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "<svg" in svg[:500], name
    assert "plotly" in html and "<script src=\"http" not in html, name
    assert len(back.data) == len(fig.data), name
nodes_edges = json.loads((out / "composition_graph_nodes_edges.json").read_text())
print(f"all {len(figures)} figures verified in 4 formats; graph JSON: "
      f"{len(nodes_edges['nodes'])} nodes, {len(nodes_edges['edges'])} edges")

# %% [markdown]
# ## The report
#
# `interp.report` traces the prompt, attributes the answer's logit, draws the top heads' patterns, their
# composition graph, copying scores, the top head's OV circuit and the residual stream, and writes a
# self-contained `index.html`, every figure as PNG and SVG, and `results.json`. From a shell:
# `interp report --model smollm2-135m --prompt "..." --answer " Mary" --wrong " John" --out report/`.

# %%
t = time.perf_counter()
with interp.Exporter() as ex:
    index = interp.report(model, prompt, answer=" Mary", wrong=" John", out_dir=out / "report", exporter=ex)
print(f"report written in {time.perf_counter() - t:.1f} s: {index}")
results = json.loads((out / "report" / "results.json").read_text())
a = results["attribution"]
print(f"target {a['target']}: model {a['total']:.4f}, Σ terms {a['sum_of_terms']:.4f}, "
      f"closure error {a['closure_error']:.1e}")
print("top heads:", [(h["head"], round(h["value"], 2)) for h in results["top_heads"]])
print("files:", sorted(str(p.relative_to(out / "report")) for p in (out / "report").rglob("*") if p.is_file()))

# %%
shutil.rmtree(out)  # the temporary directory and everything exported into it

# %%
print(f"notebook runtime: {time.perf_counter() - T0:.0f} s")

# %% [markdown]
# ## What we saw
#
# * Every figure kind — decomposition bars, the residual-stream view, the attribution heatmap and
#   waterfall, attention patterns, the copying-score map, OV eigenvalues, the top-token table, the
#   composition graph and result plots — exports to HTML, PNG, SVG and JSON through one reused browser.
# * The files check out independently: real PNG/SVG, JSON that plotly reads back, HTML with no external
#   script; a circuit graph also exports as plain nodes and edges.
# * One call writes the whole report, and its `results.json` carries the closure error of the
#   attribution it shows.
