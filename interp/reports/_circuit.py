"""task_report(): an edge-level circuit of one task in one model -> a folder that opens with no network.

Steps (each timed; the times go into ``results.json``):

1. Score every edge of the circuit graph with EAP or EAP-IG (:func:`interp.edges.edge_attribution`):
   score(w → r) = (a_w(clean) − a_w(corrupt)) · ∂M/∂x_r carried to w's write, the gradient averaged over
   ``ig_steps`` points of the corrupt → clean path for EAP-IG: positive when the edge supports the metric (blue
   in the graph). The completeness error is reported.
2. Patch the ``n_exact`` edges with the largest |score| exactly (:func:`interp.edges.edge_patch`): only
   the reader sees the writer's corrupt value; the exact effect M(clean) − M(patched) (the scores' sign) is shown
   beside the score.
3. Faithfulness of the top-k circuits over circuit sizes under each ablation, with CPR and CMD
   (:func:`interp.edges.faithfulness_curve`), and the smallest size that recovers ≥ 80 %.
4. Node information for the viewer's hover: each head's and MLP's direct logit attribution on the clean
   prompts (logit-difference metrics; :func:`interp.attribute_logits`), each head's top attended source
   tokens from the last position of the first clean prompt (:func:`interp.stream.attention_patterns`), and
   for the heads with the most edge weight what their full OV circuit W_E W_OV W_U maps their most
   attended token to (:func:`interp.circuits.ov_circuit`).
5. Write ``index.html`` (the circuit graph of the ``max_edges`` strongest edges, the faithfulness curves,
   the tables and an attention view of the top heads; plotly.js compressed in the page so that it stays
   near 2 MB, :mod:`interp.plots._compact`), ``edges.json`` (every edge with its score and exact effect),
   ``faithfulness.json`` and ``results.json``; with ``static=True`` also PNG/SVG of the figures.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from interp._validate import check_bool, check_int_min, check_positive_int, is_real
from interp.attribution import attribute_logits
from interp.causal import Logit, LogitDiff, LogProb, Prob
from interp.circuits import ov_circuit
from interp.edges import MIB_SIZES, edge_attribution, edge_patch, faithfulness_curve
from interp.edges.internal import check_curve_args
from interp.errors import ArgumentError, InterpError
from interp.labels import Head, HeadInput, parse
from interp.models import Model
from interp._io import write_atomic
from interp.plots import Exporter, attention_view, circuit_graph_figure
from interp.plots.internal import find_browser
from interp.reports._common import (
    _decode,
    _export_static,
    _jsonable,
    _model_card,
    _prepare_out_dir,
    _resolve_model,
    _Steps,
)
from interp.reports._circuit_page import _n_edges, _page
from interp.stream import attention_patterns

__all__ = ["task_report", "check_circuit_options"]

log = logging.getLogger(__name__)

METHODS = ("eap", "eap-ig")
#: the ablation whose faithfulness picks the circuit drawn first, in order of preference: the closest to the
#: corruption the scores measure (the corrupt run, then a resample or the mean of the corrupt prompts)
_PREFERRED_ABLATIONS = ("corrupt", "resample", "mean", "zero")
#: the circuit graph's height on the page at most (px): with the header above it, it opens whole in a
#: 1,400 × 900 window
_GRAPH_HEIGHT = 660


def _q(tok: str) -> str:
    """A token quoted as plain text (the figure escapes hover text itself)."""
    return "“" + tok.replace("\n", "\\n") + "”"


def _resolve_task(task: Any, model: Model, n_prompts: Optional[int]) -> Any:
    """A task name (``interp.load_task``) or an object with ``clean``, ``corrupt`` and ``metric``."""
    if isinstance(task, str):
        from interp import edges

        load = getattr(edges, "load_task", None)
        if load is None:
            raise ArgumentError(
                f"task={task!r}: this installation has no shipped tasks; pass an object with "
                ".clean, .corrupt and .metric"
            )
        return load(task, model, **({"n": n_prompts} if n_prompts is not None else {}))
    missing = [a for a in ("clean", "corrupt", "metric") if not hasattr(task, a)]
    if missing:
        raise ArgumentError(
            f"task is a {type(task).__name__} without {missing}; give a task name such as 'ioi' or an "
            "object with .clean and .corrupt prompts and a .metric (e.g. interp.LogitDiff)"
        )
    return task


def _head_scores(edges: Sequence[str], scores: np.ndarray) -> dict[str, float]:
    """Σ |score| of the edges out of and into each head (its q/k/v ports count for every head they feed)."""
    out: dict[str, float] = {}
    for e, s in zip(edges, np.abs(np.nan_to_num(scores))):
        w, r = e.split("→")
        for lab in (w, r):
            node = parse(lab)
            if isinstance(node, Head):
                out[lab] = out.get(lab, 0.0) + float(s)
            elif isinstance(node, HeadInput) and node.which == "q":
                h = str(Head(node.layer, node.head))
                out[h] = out.get(h, 0.0) + float(s)
    return out


def _dla(model: Model, task: Any, nodes: set[str]) -> tuple[dict[str, float], str]:
    """Mean direct logit attribution of each node on the clean prompts, for a logit-difference metric."""
    m = task.metric
    if not isinstance(m, LogitDiff) or not model.arch.has_logits:
        return {}, "direct logit attribution needs a logit-difference metric on a model with logits"
    if isinstance(m.pos, str):
        return {}, f"direct logit attribution reads one position per prompt; the metric pools pos={m.pos!r}"
    attr = attribute_logits(model, task.clean, answer=m.answer, wrong=m.wrong, pos=m.pos, unit="head")
    vals = attr.values.double().mean(-1)
    return {lab: float(v) for lab, v in zip(attr.labels, vals) if lab in nodes}, (
        f"closure error {float(attr.closure_error):.1e}"
    )


def _attention_summary(
    model: Model, task: Any, heads: list[str], k: int = 3
) -> tuple[Any, dict[str, str], dict[str, int]]:
    """Each head's top ``k`` attended source tokens from the last position of the first clean prompt."""
    pats = attention_patterns(model, task.clean, heads, prompt=0)
    toks = pats.str_tokens
    summary, top_src = {}, {}
    for i, h in enumerate(pats.labels):
        row = pats.patterns[i, -1].double()
        order = torch.argsort(row, descending=True)[:k].tolist()
        summary[h] = ", ".join(f"{_q(toks[j])}@{j} {row[j]:.2f}" for j in order)
        rest = [j for j in torch.argsort(row, descending=True).tolist() if j > 0]  # position 0: the attention sink
        top_src[h] = rest[0] if rest else order[0]
    return pats, summary, top_src


def _ov_tokens(
    model: Model, task: Any, heads: list[str], src_pos: dict[str, int], k: int = 3, bar: Any = None
) -> dict[str, str]:
    """What each head's full OV circuit maps its most attended source token to (the top ``k`` output tokens);
    ``bar``: a tqdm bar advanced once per head."""
    from interp.stream.internal import as_batch

    tokens = as_batch(model, task.clean).tokens[0]
    dec = _decode(model)
    out = {}
    for h in heads:
        lab = Head.parse(h)
        src = int(tokens[src_pos[h]])
        ov = ov_circuit(model, lab.layer, lab.head, full=True)
        row = (ov.A[src] @ ov.B).double()  # [d_vocab]: W_E[src] W_OV W_U
        top = torch.topk(row, k)
        out[h] = f"{_q(dec(src))} → " + ", ".join(
            f"{_q(dec(int(i)))} {float(v):.3g}" for v, i in zip(top.values, top.indices)
        )
        if bar is not None:
            bar.update(1)
    return out


def _tokens_text(model: Model, spec: Any) -> list[str]:
    """A metric's token argument as quoted text, one entry per prompt (one entry for a shared token)."""
    items = spec.tolist() if isinstance(spec, torch.Tensor) else spec
    items = [items] if isinstance(items, (str, int)) else list(items)
    dec = _decode(model)
    return [repr(t) if isinstance(t, str) else repr(dec(int(t))) for t in items]


def _metric_text(model: Model, task: Any, sc: Any) -> str:
    """What the metric is for the task as a whole (not prompt 0's tokens alone): the formula, the position
    it is read at, whose tokens it reads and the mean over the prompts, e.g. ``logit[answer] − logit[wrong]
    at each prompt's last token, each prompt with its own answer and wrong token (' Madrid' vs ' Rome', …);
    mean over 16 prompts``."""
    m, n = task.metric, sc.n_prompts
    pos = getattr(m, "pos", None)
    where = (
        "at each prompt's last token"
        if pos == -1
        else "mean over each prompt's tokens"
        if pos == "mean"
        else f"at position {pos}"
        if isinstance(pos, int)
        else "at each prompt's own position"
    )
    if isinstance(m, LogitDiff):
        a, w = _tokens_text(model, m.answer), _tokens_text(model, m.wrong)
        if len(set(a)) <= 1 and len(set(w)) <= 1:
            return f"logit[{a[0]}] − logit[{w[0]}] {where}; mean over {n} prompts"
        pairs = ", ".join(f"{x} vs {y}" for x, y in list(zip(a, w))[:3]) + (", …" if len(a) > 3 else "")
        return (
            f"logit[answer] − logit[wrong] {where}, each prompt with its own answer and wrong token "
            f"({pairs}); mean over {n} prompts"
        )
    if isinstance(m, (Logit, LogProb, Prob)):
        what = {Logit: "logit", LogProb: "log p", Prob: "p"}[type(m)]
        t = _tokens_text(model, m.token)
        if len(set(t)) <= 1:
            return f"{what}[{t[0]}] {where}; mean over {n} prompts"
        ex = ", ".join(t[:3]) + (", …" if len(t) > 3 else "")
        return f"{what}[answer] {where}, each prompt with its own answer token ({ex}); mean over {n} prompts"
    return f"{sc.metric}; mean over {n} prompts"


def _graph_steps(sc: Any, curve: Any, max_edges: int, target: float) -> dict[str, Any]:
    """The graph's slider: the circuits the faithfulness curve evaluated (top-n by |score|, pruned) with at
    most ``max_edges`` edges, then the ``max_edges`` strongest edges; the step drawn first is the smallest
    circuit whose faithfulness reaches ``target`` under the preferred ablation, else the largest circuit."""
    abl = next((a for a in _PREFERRED_ABLATIONS if a in curve.ablations), curve.ablations[0])
    i = curve.ablations.index(abl)
    circuits: list[list[str]] = []
    labels: list[str] = []
    faith: list[Optional[float]] = []
    for j, n in enumerate(curve.n_edges.tolist()):
        if not 0 < n <= max_edges:
            continue
        c = sc.circuit(n=int(n))  # the circuit the curve evaluated: the top n by |score|, pruned
        if int(curve.kept[i, j]) != len(c.edges):
            log.warning(
                "circuit of the top %d edges has %d edges after pruning, the curve evaluated %d",
                n,
                len(c.edges),
                int(curve.kept[i, j]),
            )
        f = float(curve.faithfulness[i, j])
        if not c.edges or (circuits and c.edges == circuits[-1]):
            continue
        circuits.append(list(c.edges))
        n_text = _n_edges(len(c.edges))
        labels.append(f"{n_text} · F {f:.2f}" if math.isfinite(f) else n_text)
        faith.append(f if math.isfinite(f) else None)
    order = torch.argsort(sc.scores.abs().nan_to_num(nan=-1.0), descending=True, stable=True)[:max_edges]
    top = [sc.edges[k] for k in sorted(order.tolist())]
    if not circuits or set(top) != set(circuits[-1]):
        circuits.append(top)
        labels.append(f"top {len(top):,} by |score|")
        faith.append(None)
    ok = [k for k, f in enumerate(faith) if f is not None and f >= target]
    active = ok[0] if ok else len(circuits) - 1
    return {
        "circuits": circuits,
        "labels": labels,
        "faithfulness": faith,
        "active": active,
        "ablation": abl,
        "reached": bool(ok),
    }


def check_circuit_options(*, names: Optional[dict[str, str]] = None, **options: Any) -> None:
    """Check :func:`task_report`'s options that need no model (``method``, ``ig_steps``, ``max_edges``,
    ``n_exact``, ``ablations``, ``sizes``, ``n_ov_heads``, ``target``, ``static``, ``progress``; those given),
    so that a caller can fail before loading one; ``names``: how the options are named in the errors (the CLI's
    flags)."""
    nm = {k: (names or {}).get(k, k) for k in options}
    o = options
    if "method" in o and o["method"] not in METHODS:
        raise ArgumentError(f"{nm['method']}={o['method']!r} must be one of {list(METHODS)}")
    for k in ("ig_steps", "max_edges"):
        if k in o:
            check_positive_int(nm[k], o[k])
    for k in ("n_exact", "n_ov_heads"):
        if k in o:
            check_int_min(nm[k], o[k], 0)
    if "ablations" in o or "sizes" in o:
        check_curve_args(
            o.get("ablations", ("corrupt",)),
            MIB_SIZES if o.get("sizes") is None else o["sizes"],
            names=(nm.get("ablations", "ablations"), nm.get("sizes", "sizes")),
        )
    if "target" in o:
        t = o["target"]
        if not is_real(t) or not 0 < t <= 1:
            raise ArgumentError(f"{nm['target']}={t!r} must be a faithfulness in (0, 1], e.g. 0.8")
    for k in ("static", "progress"):
        if k in o:
            check_bool(nm[k], o[k])


def task_report(
    model: Union[str, Model],
    task: Any = "ioi",
    *,
    out_dir: Union[str, Path],
    method: str = "eap-ig",
    ig_steps: int = 5,
    n_prompts: Optional[int] = 16,
    max_edges: int = 2000,
    n_exact: int = 20,
    ablations: Sequence[str] = ("corrupt", "zero", "mean", "resample"),
    sizes: Optional[Sequence[float]] = None,
    n_ov_heads: int = 16,
    target: float = 0.8,
    static: bool = False,
    exporter: Optional[Exporter] = None,
    progress: bool = False,
) -> Path:
    """Write ``out_dir/index.html`` (circuit graph, faithfulness curves, tables), ``edges.json``,
    ``faithfulness.json`` and ``results.json``; returns the index path (see the module docstring).

    ``model``: an interp Model or a catalog name; ``task``: a task name (``"ioi"``, ...) or an object with
    ``clean`` / ``corrupt`` prompts and a ``metric``; ``n_prompts``: pairs drawn from a named task (None: the
    task's own default); ``method``: "eap" or "eap-ig" (``ig_steps`` points);
    ``max_edges``: edges drawn in the graph (the strongest); ``n_exact``: edges patched exactly;
    ``ablations`` / ``sizes``: the faithfulness curve's (``sizes`` default: MIB's fractions);
    ``n_ov_heads``: heads whose OV top tokens are computed; ``static``: also PNG/SVG (needs a browser).

    The graph has a slider over the circuits the faithfulness curve evaluated (the top-k edges by |score|,
    pruned, for each k of ``sizes`` with at most ``max_edges`` edges) and the ``max_edges`` strongest edges;
    it opens on the smallest circuit whose faithfulness reaches ``target`` (under the first of corrupt,
    resample, mean, zero among ``ablations``), or on the largest when none does — the page says which.
    """
    # 1. the options checked, the model and task resolved, out_dir prepared
    check_circuit_options(
        method=method,
        ig_steps=ig_steps,
        max_edges=max_edges,
        n_exact=n_exact,
        ablations=ablations,
        sizes=sizes,
        n_ov_heads=n_ov_heads,
        target=target,
        static=static,
        progress=progress,
    )
    model = _resolve_model(model)
    if static and exporter is None:
        find_browser()
    task = _resolve_task(task, model, n_prompts)
    out = _prepare_out_dir(out_dir)
    task_name = str(getattr(task, "name", None) or type(task).__name__)
    steps = _Steps(total=6, progress=progress, desc=f"circuit {model.name} {task_name}")
    t_start = time.perf_counter()
    res: dict[str, Any] = {"model": dict(_model_card(model)), "task": task_name, "method": method}
    figs: dict[str, Any] = {}
    try:
        # 2. every edge scored, the strongest patched exactly, the faithfulness curve
        with steps("edge attribution"):
            sc = edge_attribution(
                model, task.clean, task.corrupt, metric=task.metric, method=method, ig_steps=ig_steps, progress=progress
            )
        with steps("exact edge patching"):
            if n_exact:
                sc = _with_exact(model, task, sc, n_exact, progress)
        with steps("faithfulness curve"):
            curve = faithfulness_curve(
                model,
                task.clean,
                task.corrupt,
                sc,
                metric=task.metric,
                ablations=tuple(ablations),
                progress=progress,
                sizes=MIB_SIZES if sizes is None else sizes,
            )
            figs["faithfulness"] = curve.plot()
        # 3. the graph's steps, the edges they draw, and the heads by edge weight
        gsteps = _graph_steps(sc, curve, max_edges, target)
        drawn, nodes, heads = _drawn(sc, gsteps)
        # 4. each node's hover: DLA, where its head attends, its OV top tokens
        with steps("node information"):
            info, pats, dla_note, ov_note = _node_info(model, task, nodes, heads, n_ov_heads, progress)
        # 5. the circuit graph with its slider, the curve's title, the attention view
        with steps("figures"):
            view = _figures(model, sc, gsteps, info, heads, pats, figs)
        with steps("write"):
            files, _ = _export_static({k: figs[k] for k in ("faithfulness",)}, out, exporter, static=static)
            _write_json(out, model, task_name, sc, curve)
    finally:
        steps.close()
    # 6. results.json and the page
    res.update(_summary(sc, curve, dla_note, ov_note, n_drawn=len(drawn)))
    res["metric_for_task"] = _metric_text(model, task, sc)
    res.update(_graph_results(gsteps, target))
    res["timings_seconds"] = dict(steps.times, total=round(time.perf_counter() - t_start, 3))
    write_atomic(out / "results.json", json.dumps(_jsonable(res), indent=1).encode())
    page = _page(model, task, task_name, sc, curve, figs, files, view, res)
    index = out / "index.html"
    write_atomic(index, page.render().encode())
    log.info("circuit report written to %s in %.1f s", index, time.perf_counter() - t_start)
    return index


def _graph_results(gsteps: dict[str, Any], target: float) -> dict[str, Any]:
    """results.json's ``graph_steps`` (each slider step's label, size, faithfulness) and ``graph_default`` (the step
    the graph opens on, and why)."""
    return {
        "graph_steps": [
            {"label": lab, "n_edges": len(st), "faithfulness": f}
            for lab, st, f in zip(gsteps["labels"], gsteps["circuits"], gsteps["faithfulness"])
        ],
        "graph_default": {
            "step": gsteps["active"],
            "n_edges": len(gsteps["circuits"][gsteps["active"]]),
            "target": target,
            "ablation": gsteps["ablation"],
            "reached": gsteps["reached"],
        },
    }


def _with_exact(model: Model, task: Any, sc: Any, n_exact: int, progress: bool) -> Any:
    """The scores with the exact patching effect of the ``n_exact`` edges of largest |score|."""
    top = [sc.edges[i] for i in torch.argsort(sc.scores.abs(), descending=True)[:n_exact].tolist()]
    return sc.with_exact(edge_patch(model, task.clean, task.corrupt, top, metric=task.metric, progress=progress))


def _drawn(sc: Any, gsteps: dict[str, Any]) -> tuple[np.ndarray, set[str], list[str]]:
    """The edges some graph step draws (indices), the nodes they join, and their heads by summed edge weight."""
    scores = sc.scores.double().numpy()
    pos = {e: i for i, e in enumerate(sc.edges)}
    drawn = np.array(sorted({pos[e] for st in gsteps["circuits"] for e in st}), dtype=np.int64)
    nodes = {x for i in drawn for x in sc.edges[i].split("→")}
    heads_by_weight = sorted(_head_scores([sc.edges[i] for i in drawn], scores[drawn]).items(), key=lambda t: -t[1])
    return drawn, nodes, [h for h, _ in heads_by_weight]


def _node_info(
    model: Model, task: Any, nodes: set[str], heads: list[str], n_ov_heads: int, progress: bool
) -> tuple[dict[str, dict[str, Any]], Any, str, str]:
    """Hover lines per node (DLA, where each head's last token attends, its OV top tokens), the heads'
    patterns, and why DLA or OV tokens are missing ("" when not)."""
    ov_heads = heads[:n_ov_heads] if model.arch.has_logits else []
    # its own bar: direct logit attribution, attention patterns, then one OV circuit per head (the slow part)
    inner = tqdm(total=2 + len(ov_heads), desc="node information", unit="step", disable=not progress)
    try:
        info: dict[str, dict[str, Any]] = {}
        inner.set_postfix_str("direct logit attribution")
        dla, dla_note = _dla(model, task, nodes | set(heads))
        for lab, v in dla.items():
            info.setdefault(lab, {})["DLA"] = v
        inner.update(1)
        inner.set_postfix_str("attention")
        pats, summary, src = _attention_summary(model, task, heads) if heads else (None, {}, {})
        for h, s in summary.items():
            info.setdefault(h, {})["attends to (last token)"] = s
        inner.update(1)
        ov_note = ""
        if ov_heads:
            inner.set_postfix_str("OV circuits")
            try:
                for h, s in _ov_tokens(model, task, ov_heads, src, bar=inner).items():
                    info.setdefault(h, {})["OV top tokens"] = s
            except InterpError as e:  # e.g. a model whose OV circuit cannot be materialised
                ov_note = str(e)
    finally:
        inner.close()
    return info, pats, dla_note, ov_note


def _figures(
    model: Model,
    sc: Any,
    gsteps: dict[str, Any],
    info: dict[str, dict[str, Any]],
    heads: list[str],
    pats: Any,
    figs: dict[str, Any],
) -> Any:
    """The circuit graph (a slider over the steps) and the curve's title into ``figs``; the attention view of
    the 6 heads with the most edge weight (None without heads)."""
    figs["circuit_graph"] = circuit_graph_figure(
        sc,
        node_info=info,
        steps=gsteps["circuits"],
        step_labels=gsteps["labels"],
        active=gsteps["active"],
        scale="log",
        title=f"Circuit graph — {model.name}, {sc.method}",
    )
    # fits a 900-px-high window under the page's header (the heads' rows shrink; the layers run across)
    figs["circuit_graph"].update_layout(
        height=min(int(figs["circuit_graph"].layout.height or 0) or _GRAPH_HEIGHT, _GRAPH_HEIGHT)
    )
    figs["faithfulness"].update_layout(title=f"Faithfulness of the top-k {sc.method} circuits ({model.name})")
    view = (
        pats.view(title=f"Attention of the {min(6, len(heads))} heads with the most edge weight")
        if pats is not None
        else None
    )
    if pats is not None and view is not None and len(heads) > 6:
        view = attention_view(pats.patterns[:6], pats.str_tokens, heads=pats.labels[:6], title=view.title)
    return view


def _write_json(out: Path, model: Model, task_name: str, sc: Any, curve: Any) -> None:
    df = sc.to_dataframe()
    exact = df["exact"].tolist() if "exact" in df else [math.nan] * len(df)
    edges = [
        {"edge": e, "writer": w, "reader": r, "score": float(s), "exact": x}
        for e, w, r, s, x in zip(df["edge"], df["writer"], df["reader"], df["score"], exact)
    ]
    meta = {
        "model": model.name,
        "task": task_name,
        "method": sc.method,
        "ig_steps": sc.ig_steps,
        "metric": sc.metric,
        "convention": sc.convention,
        "clean": sc.clean,
        "corrupt": sc.corrupt,
        "completeness": sc.completeness,
        "completeness_of": sc.completeness_of,
        "completeness_error": sc.completeness_error,
        "n_edges": len(edges),
        "edges": edges,
    }
    write_atomic(out / "edges.json", json.dumps(_jsonable(meta)).encode())
    fa = {
        "method": curve.method,
        "metric": curve.metric,
        "n_total": curve.n_total,
        "points": curve.to_dataframe().to_dict(orient="records"),
        "areas": curve.areas().to_dict(orient="records"),
        "smallest_80": {a: curve.smallest(0.8, ablation=a) for a in curve.ablations},
    }
    write_atomic(out / "faithfulness.json", json.dumps(_jsonable(fa), indent=1).encode())


def _summary(sc: Any, curve: Any, dla_note: str, ov_note: str, *, n_drawn: int) -> dict[str, Any]:
    ex = sc.exact.double().numpy() if sc.exact is not None else np.full(len(sc.edges), np.nan)
    have = np.isfinite(ex)
    rank_corr = None
    if have.sum() >= 3:
        a, b = sc.scores.double().numpy()[have], ex[have]
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        rank_corr = float(np.corrcoef(ra, rb)[0, 1]) if ra.std() and rb.std() else None
    return {
        "metric": sc.metric,
        "clean": sc.clean,
        "corrupt": sc.corrupt,
        "n_edges": len(sc.edges),
        "n_drawn": n_drawn,
        "n_prompts": sc.n_prompts,
        "completeness": sc.completeness,
        "completeness_of": sc.completeness_of,
        "completeness_error": sc.completeness_error,
        "n_exact": int(have.sum()),
        "spearman_score_vs_exact": rank_corr,
        "cpr": dict(zip(curve.ablations, curve.cpr.tolist())),
        "cmd": dict(zip(curve.ablations, curve.cmd.tolist())),
        "smallest_80": {a: curve.smallest(0.8, ablation=a) for a in curve.ablations},
        "dla_note": dla_note,
        "ov_note": ov_note,
    }
