"""The page of :func:`interp.reports.task_report`: the circuit graph first (what the page is for), then the model
card, the task and its scores, the strongest edges, the faithfulness curve, the attention of the top heads and the
provenance."""

from __future__ import annotations

import math
from typing import Any, cast

from interp.models import Model
from interp.plots.internal import esc, fmt
from interp.reports._common import _model_card
from interp.reports._html import Page, data_table, kv_table


def _n_edges(n: int) -> str:
    return "1 edge" if n == 1 else f"{n:,} edges"


def _page(
    model: Model,
    task: Any,
    task_name: str,
    sc: Any,
    curve: Any,
    figs: dict[str, Any],
    files: dict[str, list[str]],
    view: Any,
    r: dict[str, Any],
) -> Page:
    page = Page(
        title=f"interp circuit — {model.name}, {task_name}",
        subtitle=f"{esc(sc.method.upper())} over {len(sc.edges):,} edges · {sc.n_prompts} prompt pairs · "
        f"metric {esc(r['metric_for_task'])}",
        compact=True,
        wide=True,
    )
    # the graph is what the page is for: first, opening in view (its notes below it), then the tables
    _graph_section(page, figs, r)
    page.section("Model", kv_table(_model_card(model)), anchor="model")
    page.section(
        "Task and scores", kv_table(_task_rows(model, task, task_name, sc, r["metric_for_task"])), anchor="task"
    )
    _edges_section(page, sc, r)
    _faithfulness_section(page, curve, figs, files, r)
    if view is not None:
        page.section(
            "Attention of the top heads",
            view.to_html(),
            anchor="attention",
            note="Hover a token: where each head attends from it (→) and which tokens attend to it (←); "
            "first clean prompt.",
        )
    notes = [n for n in (r.get("dla_note"), r.get("ov_note")) if n]
    t = r["timings_seconds"]
    body = data_table(["step", "time"], [[esc(k), f"{v:.2f} s"] for k, v in t.items()], numeric=[False, True])
    body += "".join(f"<p class='note'>{esc(n)}</p>" for n in notes)
    body += "<p class='files'>numbers: <a href='results.json'>results.json</a></p>"
    page.section("Provenance", body, anchor="provenance")
    return page


def _graph_section(page: Page, figs: dict[str, Any], r: dict[str, Any]) -> None:
    """The circuit graph with its slider, and which circuit it opens on (and why)."""
    d, steps = r["graph_default"], r["graph_steps"]
    first = (
        f"It opens on the smallest circuit whose faithfulness reaches {fmt(d['target'], 2)} under "
        f"{esc(d['ablation'])} ablation: {_n_edges(d['n_edges'])}"
        if d["reached"]
        else f"No circuit with at most {steps[-1]['n_edges']:,} edges reached faithfulness {fmt(d['target'], 2)} under "
        f"{esc(d['ablation'])} ablation; it opens on the largest, {_n_edges(d['n_edges'])}"
    )
    page.section(
        "Circuit graph",
        page.figure(figs["circuit_graph"]),
        anchor="graph",
        note_below=True,
        note=f"{first}. The slider above the graph draws the other circuits the faithfulness curve evaluated "
        f"(the top-k edges by |score|, pruned; F = faithfulness under {esc(d['ablation'])} ablation) "
        f"and the {steps[-1]['n_edges']:,} strongest edges. "
        "Width and opacity grow with |score| (bins of equal ratio: scores span decades); blue: score "
        "> 0, the edge supports the metric (corrupting it lowers the metric); red: score < 0, it opposes "
        "it. "
        "Hover an edge's middle for its score (and exact patching effect where computed); hover a head "
        "for its direct logit attribution, where its last token looks, and what its OV circuit copies. "
        "All edges with their scores: <a href='edges.json'>edges.json</a>.",
    )


def _task_rows(model: Model, task: Any, task_name: str, sc: Any, metric: str) -> list[tuple[str, Any]]:
    """The task (its first clean / corrupt pair as text), the metric and the scores' baselines and completeness."""
    if isinstance(task.clean, (list, tuple)):
        clean0, corrupt0 = task.clean[0], task.corrupt[0]
    else:  # token ids
        clean0, corrupt0 = (
            " ".join(cast(list[str], model.to_str_tokens(t[0])))  # one row
            if model.tokenizer is not None
            else str(t[0].tolist())
            for t in (task.clean, task.corrupt)
        )
    rows = [("task", task_name)] + ([("description", task.description)] if getattr(task, "description", "") else [])
    rows += [
        ("prompt pairs", sc.n_prompts),
        ("first clean prompt", clean0),
        ("first corrupt prompt", corrupt0),
        ("metric", metric),
    ]
    if sc.metric.endswith("(per-prompt tokens)"):
        rows += [("the first pair's metric", sc.metric[: -len("(per-prompt tokens)")].rstrip())]
    rows += [
        ("M(clean)", fmt(sc.clean)),
        ("M(corrupt)", fmt(sc.corrupt)),
        ("method", sc.method + (f", {sc.ig_steps} steps" if sc.method == "eap-ig" else "")),
        (
            "completeness",
            f"Σ scores ({sc.completeness_of}) = {fmt(sc.completeness)} vs M(clean) − M(corrupt) = "
            f"{fmt(sc.target)}; error {sc.completeness_error:.2e}",
        ),
        ("sign convention", sc.convention),
    ]
    return rows


def _edges_section(page: Page, sc: Any, r: dict[str, Any]) -> None:
    """The 25 edges of largest |score|, with their exact patching effect where computed."""
    df = sc.to_dataframe()
    df = df.reindex(df["score"].abs().sort_values(ascending=False, kind="stable").index).head(25)
    edge_rows = [
        [f"<code>{esc(e)}</code>", fmt(s), fmt(x) if x == x else "—"]
        for e, s, x in zip(df["edge"], df["score"], df["exact"] if "exact" in df else [math.nan] * len(df))
    ]
    corr = r["spearman_score_vs_exact"]
    note = (
        f"Exact effect: M(clean) − M with only the reader seeing the writer's corrupt value (positive: the edge "
        f"supports the metric, as the scores) "
        f"({r['n_exact']} edges patched; Spearman rank correlation with the scores "
        f"{fmt(corr, 3) if corr is not None else '—'})."
    )
    page.section(
        "Top edges",
        data_table(["edge", "score", "exact effect"], edge_rows, numeric=[False, True, True]),
        anchor="edges",
        note=note,
    )


def _faithfulness_section(
    page: Page, curve: Any, figs: dict[str, Any], files: dict[str, list[str]], r: dict[str, Any]
) -> None:
    """The faithfulness curve with its areas (CPR, CMD) and smallest faithful size per ablation."""
    curve_rows = [
        [esc(a), f"{float(p):.3f}", f"{float(c):.3f}", fmt(r["smallest_80"][a], 3)]
        for a, p, c in zip(curve.ablations, curve.cpr, curve.cmd)
    ]
    body = (
        page.figure(figs["faithfulness"], files=files.get("faithfulness", []))
        + data_table(
            [
                "ablation",
                "CPR (area under faithfulness)",
                "CMD (area of |1 − faithfulness|)",
                "smallest k with faithfulness ≥ 0.8",
            ],
            curve_rows,
            numeric=[False, True, True, True],
        )
        + "<p class='files'>numbers: <a href='faithfulness.json'>faithfulness.json</a></p>"
    )
    page.section(
        "Faithfulness",
        body,
        anchor="faithfulness",
        note="Faithfulness (M(C) − M(∅)) / (M(all) − M(∅)) of the top-k circuits, every edge outside "
        "the circuit ablated (norms, attention and MLPs recomputed in that run).",
    )
