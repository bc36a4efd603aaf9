"""The weight-only pages (:func:`interp.reports.weights_report`): the composition graph of the strongest edges over all
heads and the copying scores, from the weights alone (no prompt, no forward)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional, Union

import plotly.graph_objects as go

from interp._io import write_atomic
from interp._validate import check_positive_int
from interp.circuits import composition_edges, composition_scores, copying_scores
from interp.errors import UnsupportedOperationError
from interp.models import Model
from interp.plots import Exporter, copying_score_map
from interp.plots.internal import esc, find_browser
from interp.reports._common import _export_static, _jsonable, _model_card, _prepare_out_dir, _resolve_model, _Steps
from interp.reports._html import Page, kv_table

__all__ = ["weights_report"]


def weights_report(
    model: Union[str, Model],
    *,
    out_dir: Union[str, Path],
    max_edges: int = 30,
    static: bool = True,
    exporter: Optional[Exporter] = None,
    progress: bool = False,
) -> Path:
    """Weight-only pages: the composition graph of the strongest edges over all heads, copying scores.

    Writes ``out_dir/index.html``, ``results.json``, ``composition.json`` (nodes/edges) and the
    figures as PNG/SVG; returns the index path.
    """
    model = _resolve_model(model)
    check_positive_int("max_edges", max_edges)
    if static and exporter is None:
        find_browser()
    out = _prepare_out_dir(out_dir)
    steps = _Steps(total=3, progress=progress, desc=f"circuits {model.name}")
    t_start = time.perf_counter()
    figs: dict[str, go.Figure] = {}
    results: dict[str, Any] = {"model": dict(_model_card(model))}
    copying_note = ""
    try:
        with steps("composition scores"):
            if model.arch.n_layers > 1:  # heads compose across layers: one layer has no composition edge
                comp = {k: composition_scores(model, kind=k) for k in ("Q", "K", "V")}
                title = f"Strongest {max_edges} composition edges per kind — {model.name}"
                graph = composition_edges(comp, max_edges=max_edges, title=title)
                figs["composition_graph"] = graph.plot()
                results["composition"] = graph.to_json_dict()
                write_atomic(out / "composition.json", graph.to_json().encode())
        with steps("copying scores"):
            try:
                cs = copying_scores(model)
                figs["copying_scores"] = copying_score_map(cs, title=f"Copying scores — {model.name}")
                results["copying_scores"] = getattr(cs, "scores", cs)
            except UnsupportedOperationError as e:
                copying_note = str(e)
        with steps("static export"):
            files, _ = _export_static(figs, out, exporter, static=static)
    finally:
        steps.close()
    results["timings_seconds"] = dict(steps.times, total=round(time.perf_counter() - t_start, 3))
    write_atomic(out / "results.json", json.dumps(_jsonable(results), indent=1).encode())
    page = Page(title=f"interp circuits — {model.name}", subtitle="weight-only: no prompt, no forward pass")
    page.section("Model", kv_table(_model_card(model)), anchor="model")
    page.section(
        "Composition graph",
        page.figure(figs["composition_graph"], files=files["composition_graph"])
        + "<p class='files'>edges: <a href='composition.json'>composition.json</a></p>"
        if "composition_graph" in figs
        else "<p>None: a head composes with heads of later layers, and this model has one layer.</p>",
        anchor="composition",
        note="The strongest Q/K/V-composition edges between heads in different layers.",
    )
    if "copying_scores" in figs:
        page.section(
            "Copying scores",
            page.figure(figs["copying_scores"], files=files["copying_scores"]),
            anchor="copying",
            note="Σλ/Σ|λ| of each head's full OV circuit W_E W_OV W_U.",
        )
    else:
        page.section("Copying scores", f"<p>Not defined for this model: {esc(copying_note)}</p>", anchor="copying")
    index = out / "index.html"
    write_atomic(index, page.render().encode())
    return index
