"""report(): one prompt, one model -> a folder a researcher can open with no network.

Steps (each timed; the times go into ``results.json``):

1. Trace the prompt once (:func:`interp.trace`): the prediction and its top-k alternatives
   (decoders), and the residual stream of the last token (the residual-stream picture).
2. Attribute the answer's logit (minus the wrong answer's, if given) to every head, MLP,
   embedding and bias with the final norm frozen (:func:`interp.attribute_logits`; docs/math.md
   §5) — the heatmap, the waterfall and the closure error |Σ terms − model logit|.
   Encoders have no logits: their mean-pooled final hidden state h̄ is attributed along its
   own direction (:func:`interp.attribution.attribute_direction`), so the terms sum to ‖h̄‖.
3. The top heads by |attribution|: their attention patterns on the prompt, the Q/K/V
   composition graph between them (:func:`interp.circuits.composition_scores`), and the OV
   circuit of the top head (eigenvalues, log-radius when one dominates; its full OV circuit
   restricted to the prompt's tokens, read through the effective token embedding
   :func:`interp.circuits.effective_embedding` where the model has one, the caption says which).
4. Copying scores of every head (:func:`interp.circuits.copying_scores`).
5. Causal effects of every head on the attributed metric (:func:`interp.causal.effects`): noising
   with the ``corrupt`` prompt's head outputs (zero ablation when none is given); per head
   total = M(head replaced, downstream recomputed) − M(clean), direct = the same with every later
   node and the final norm's scale frozen (the change of its attribution term), indirect = total − direct.
6. Write every figure as PNG and SVG (one reused browser, :class:`Exporter`),
   ``results.json`` with the numbers, and ``index.html`` last (self-contained: plotly.js
   inlined, no external resources), each atomically.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any, Optional, Union

import plotly.graph_objects as go
import torch

from interp.attribution import attribute_direction, attribute_logits
from interp.attribution.internal import resolve_tokens, warn_unspaced
from interp.causal import Direction, Logit, LogitDiff, effects
from interp.circuits.internal import EFFECTIVE_EMBEDDING
from interp.circuits import composition_edges, composition_scores, copying_scores, ov_circuit
from interp._io import write_atomic
from interp._validate import check_positive_int
from interp.errors import ArgumentError, ShapeError, UnsupportedOperationError
from interp.models import Model
from interp.plots import (
    Exporter,
    attention_pattern_figure,
    attribution_heatmap,
    attribution_waterfall,
    copying_score_map,
    ov_eigenvalue_figure,
    residual_stream_figure,
    top_token_table,
)
from interp.plots.internal import (
    attribution_vector,
    find_browser,
    parse_head,
    residual_stream_norms,
    top_token_values,
)
from interp.labels import Head
from interp.reports._common import (
    _decode,
    _export_static,
    _jsonable,
    _model_card,
    _prepare_out_dir,
    _resolve_model,
    _Steps,
)
from interp.reports._report_page import _page
from interp.stream.internal import as_batch
from interp.stream import attention_patterns, trace

__all__ = ["report"]

log = logging.getLogger(__name__)


def _prediction(model: Model, tr: Any, answer_id: Optional[int], wrong_id: Optional[int], k: int) -> dict[str, Any]:
    """Top-k next tokens at the last real position, and the answer/wrong tokens' rank and probability."""
    mask = tr.attention_mask[0].bool()
    last = int(mask.nonzero().max())
    logits = tr.logits[0, last].double()
    logp = torch.log_softmax(logits, dim=-1)
    top = torch.topk(logits, k)
    dec = _decode(model)
    out: dict[str, Any] = {
        "position": last,
        "top": [
            {"token": dec(i), "id": int(i), "logit": float(logits[i]), "prob": float(logp[i].exp())}
            for i in top.indices
        ],
    }
    for name, tid in (("answer", answer_id), ("wrong", wrong_id)):
        if tid is not None:
            out[name] = {
                "token": dec(tid),
                "id": int(tid),
                "logit": float(logits[tid]),
                "prob": float(logp[tid].exp()),
                "rank": int((logits > logits[tid]).sum()) + 1,
            }
    if answer_id is not None and wrong_id is not None:
        out["logit_diff"] = float(logits[answer_id] - logits[wrong_id])
    return out


def _token_id(model: Model, spec: Any, arg: str) -> int:
    ids = resolve_tokens(model, spec, 1, arg)
    if ids is None:
        raise ArgumentError(f"{arg} is required here (got None)")
    return int(ids[0])


def _check_corrupt(model: Model, prompt: str, corrupt: Any) -> None:
    """``corrupt`` must be a prompt of the same token length as ``prompt`` (noising aligns positions)."""
    if corrupt is None:
        return
    if not isinstance(corrupt, str) or not corrupt.strip():
        raise ArgumentError(
            f"corrupt={corrupt!r:.60} must be a non-empty string (a prompt of the same token "
            "length as prompt) or None (zero ablation)"
        )
    lc = int(as_batch(model, prompt).attention_mask.sum())
    lk = int(as_batch(model, corrupt).attention_mask.sum())
    if lc != lk:
        raise ShapeError(
            f"corrupt={corrupt!r:.60} has {lk} tokens but prompt has {lc}; the corrupt prompt must "
            "have the same token length (noising replaces each head's output position by position)"
        )


def _top_heads(attr: Any, n: int) -> list[tuple[str, float]]:
    labels, v, _ = attribution_vector(attr, prompt=0)
    heads = [(lab, float(x)) for lab, x in zip(labels, v) if parse_head(lab) is not None]
    heads.sort(key=lambda t: -abs(t[1]))
    return heads[:n]


def report(
    model: Union[str, Model],
    prompt: str,
    *,
    answer: Any = None,
    wrong: Any = None,
    corrupt: Optional[str] = None,
    out_dir: Union[str, Path],
    n_heads: int = 6,
    top_k: int = 10,
    static: bool = True,
    exporter: Optional[Exporter] = None,
    progress: bool = False,
) -> Path:
    """Write ``out_dir/index.html`` (self-contained), every figure as PNG and SVG, and ``results.json``.

    ``model``: an interp Model or a catalog name; ``prompt``: one string; ``answer`` / ``wrong``:
    single tokens (string or id) whose logit (difference) is attributed — ``answer`` defaults to the
    model's top prediction at the last position (recorded as ``answer_source`` in results.json);
    encoders take neither (their hidden state is attributed along its own direction). ``corrupt``: a
    prompt of the same token length; each head's output is replaced by its value on it (noising) for
    the causal-effects section — without it, by zero. ``n_heads``: how many top heads get patterns /
    composition / OV views (and rows in the effects table);
    ``top_k``: alternatives listed for the prediction; ``static=False`` skips PNG/SVG (no
    browser needed). Returns the path of index.html.
    """
    # 1. the inputs checked: prompt, counts, answer / wrong tokens, the corrupt prompt, a browser, out_dir
    model, answer_id, wrong_id = _read_inputs(model, prompt, answer, wrong, corrupt, n_heads, top_k)
    arch = model.arch
    decoder = arch.has_logits
    if static and exporter is None:
        find_browser()  # fail now (with install hints), not after minutes of work
    out = _prepare_out_dir(out_dir)
    steps = _Steps(total=10 if decoder else 9, progress=progress, desc=f"report {model.name}")
    t_start = time.perf_counter()
    figs: dict[str, go.Figure] = {}
    results: dict[str, Any] = {"model": dict(_model_card(model)), "arch": arch.to_dict(), "prompt": prompt}
    try:
        # 2. the trace, and the default answer (the model's top prediction)
        with steps("trace"):
            tr, answer_id, wrong_id = _trace_step(model, prompt, answer, wrong, answer_id, wrong_id, results)
        # 3. the prediction and the attribution of its logit (decoders) or of the pooled hidden state (encoders)
        attr, metric = _attribution_step(model, prompt, tr, answer_id, wrong_id, top_k, steps, results)
        top = _attribution_results(attr, n_heads, results, figs)
        head_labels = [lab for lab, _ in top]
        # 4. the per-head analyses of the top heads
        with steps("causal effects"):
            effects_note = _effects_step(model, prompt, corrupt, metric, progress, results, figs)
        with steps("attention patterns"):
            attention_view_html = _attention_step(model, prompt, head_labels, results, figs)
        with steps("composition scores"):
            _composition_step(model, top, results, figs)
        with steps("copying scores"):
            copying_note = _copying_step(model, results, figs)
        with steps("OV circuit of the top head"):
            _ov_step(model, tr, head_labels[0], answer_id, wrong_id, results, figs, decoder=decoder)
        with steps("residual stream"):
            _stream_step(tr, results, figs)
        # 5. the figures as PNG and SVG
        with steps("static export"):
            files, results["export_seconds"] = _export_static(figs, out, exporter, static=static)
    finally:
        steps.close()
    # 6. results.json and the page
    results["timings_seconds"] = dict(steps.times, total=round(time.perf_counter() - t_start, 3))
    results["generated"] = {
        "at": _dt.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    write_atomic(out / "results.json", json.dumps(_jsonable(results), indent=1).encode())
    page = _page(
        model,
        prompt,
        results,
        figs,
        files,
        decoder=decoder,
        copying_note=copying_note,
        attention_view=attention_view_html,
        effects_note=effects_note,
        n_rows=n_heads,
    )
    index = out / "index.html"
    write_atomic(index, page.render().encode())
    log.info("report written to %s in %.1f s", index, time.perf_counter() - t_start)
    return index


def _read_inputs(
    model: Union[str, Model], prompt: Any, answer: Any, wrong: Any, corrupt: Optional[str], n_heads: Any, top_k: Any
) -> tuple[Model, Optional[int], Optional[int]]:
    """The model resolved and the inputs checked; the ``answer`` / ``wrong`` token ids (None: not given)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ArgumentError(f"prompt={prompt!r:.60} must be a non-empty string")
    check_positive_int("n_heads", n_heads)
    check_positive_int("top_k", top_k)
    model = _resolve_model(model)
    decoder = model.arch.has_logits
    if not decoder and (answer is not None or wrong is not None):
        raise ArgumentError(
            f"answer={answer!r}/wrong={wrong!r} given, but {model.name!r} is an encoder without an unembedding "
            "(no logits); omit them for a direction-based report of its hidden state"
        )
    answer_id = _token_id(model, answer, "answer") if (decoder and answer is not None) else None
    wrong_id = _token_id(model, wrong, "wrong") if (decoder and wrong is not None) else None
    if decoder and (answer is not None or wrong is not None):
        b = as_batch(model, prompt)
        for arg, spec in (("answer", answer), ("wrong", wrong)):
            warn_unspaced(model, spec, arg, b.tokens, b.last_positions(), owner="report")
    _check_corrupt(model, prompt, corrupt)
    return model, answer_id, wrong_id


def _trace_step(
    model: Model,
    prompt: str,
    answer: Any,
    wrong: Any,
    answer_id: Optional[int],
    wrong_id: Optional[int],
    results: dict[str, Any],
) -> tuple[Any, Optional[int], Optional[int]]:
    """The trace and its tokens; a decoder's answer defaults to its top prediction (dropping a ``wrong`` equal
    to it)."""
    decoder = model.arch.has_logits
    tr = trace(model, prompt)
    str_tokens = tr.str_tokens[0] if tr.str_tokens else [str(int(t)) for t in tr.tokens[0]]
    results["str_tokens"] = str_tokens
    results["token_ids"] = tr.tokens[0].tolist()
    if decoder and answer_id is None and tr.logits is not None:  # default: the model's top prediction
        last = int(tr.attention_mask[0].bool().nonzero().max())
        answer_id = int(tr.logits[0, last].argmax())
        if wrong_id == answer_id:  # logit(answer) − logit(wrong) would be 0 by construction
            wrong_id = None
            results["wrong_dropped"] = f"wrong={wrong!r} is the model's top prediction (the default answer)"
    results["answer_source"] = "given" if answer is not None else ("top prediction" if decoder else None)
    return tr, answer_id, wrong_id


def _attribution_step(
    model: Model,
    prompt: str,
    tr: Any,
    answer_id: Optional[int],
    wrong_id: Optional[int],
    top_k: int,
    steps: _Steps,
    results: dict[str, Any],
) -> tuple[Any, Any]:
    """(the attribution, the metric the causal effects read: the one it decomposes). A decoder's prediction and
    the attribution of its answer's logit (difference); an encoder's pooled hidden state along its own direction."""
    if not model.arch.has_logits:
        with steps("attribution"):
            return _direction_attribution(model, prompt, tr, results)
    if answer_id is None:  # a decoder's trace has logits, so the default answer was set above
        raise UnsupportedOperationError(f"model {model.name!r}: the trace has no logits to read a prediction from")
    with steps("prediction"):
        results["prediction"] = _prediction(model, tr, answer_id, wrong_id, top_k)
    with steps("attribution"):
        attr = attribute_logits(model, prompt, answer=answer_id, wrong=wrong_id)
    metric: Any = LogitDiff(answer_id, wrong_id) if wrong_id is not None else Logit(answer_id)
    return attr, metric


def _direction_attribution(model: Model, prompt: str, tr: Any, results: dict[str, Any]) -> tuple[Any, Any]:
    """An encoder's attribution: the mean-pooled final hidden state along its own unit direction, and that metric."""
    final_point = f"blocks.{model.arch.n_layers - 1}.hook_resid_post"
    h = tr.activations[final_point][0].double()
    m = tr.attention_mask[0].double()[:, None]
    pooled = (h * m).sum(0) / m.sum()
    direction = (pooled / pooled.norm()).to(model.dtype)
    attr = attribute_direction(model, prompt, direction, pos="mean")
    metric = Direction(direction, pos="mean")  # the same unit direction of the same pooled state
    results["embedding_norm"] = float(pooled.norm())
    return attr, metric


def _attribution_results(
    attr: Any, n_heads: int, results: dict[str, Any], figs: dict[str, go.Figure]
) -> list[tuple[str, float]]:
    """The attribution's numbers and figures; the ``n_heads`` heads with the largest |attribution|."""
    labels, values, total = attribution_vector(attr, prompt=0)
    results["attribution"] = {
        "target": getattr(attr, "target", ""),
        "labels": labels,
        "values": values,
        "total": total,
        "sum_of_terms": float(values.sum()),
        "closure_error": float(attr.closure_error),
        "relative_error": float(getattr(attr, "relative_error", float("nan"))),
        "position": int(attr.positions[0]) if getattr(attr, "positions", None) is not None else None,
    }
    figs["attribution_heatmap"] = attribution_heatmap(attr, prompt=0)
    figs["attribution_waterfall"] = attribution_waterfall(attr, prompt=0, k=15)
    top = _top_heads(attr, n_heads)
    results["top_heads"] = [{"head": lab, "value": v} for lab, v in top]
    return top


def _effects_step(
    model: Model,
    prompt: str,
    corrupt: Optional[str],
    metric: Any,
    progress: bool,
    results: dict[str, Any],
    figs: dict[str, go.Figure],
) -> str:
    """Every head's total / direct / indirect effect on ``metric``; the reason when the model has none ("" else)."""
    try:
        eff = effects(
            model,
            prompt,
            corrupt,
            metric=metric,
            nodes="heads",
            ablation="corrupt" if corrupt is not None else "zero",
            progress=progress,
        )
    except UnsupportedOperationError as e:
        results["effects"] = None
        return str(e)
    figs["causal_effects"] = eff.plot()
    results["effects"] = {
        "ablation": "corrupt" if corrupt is not None else "zero (no corrupt prompt given)",
        "corrupt_prompt": corrupt,
        "metric": eff.metric,
        "clean": eff.clean,
        "corrupt": eff.corrupt if corrupt is not None else None,
        "heads": [
            {
                "head": lab,
                "total": float(eff.total[i]),
                "direct": float(eff.direct[i]),
                "indirect": float(eff.indirect[i]),
            }
            for i, lab in enumerate(eff.labels)
        ],
    }
    return ""


def _attention_step(
    model: Model, prompt: str, head_labels: list[str], results: dict[str, Any], figs: dict[str, go.Figure]
) -> str:
    """The top heads' patterns and where the last token attends; the interactive view's HTML."""
    pats = attention_patterns(model, prompt, head_labels)
    figs["attention_patterns"] = attention_pattern_figure(pats)
    attention_view_html = pats.view(title=f"Attention of the top {len(head_labels)} heads").to_html()
    last_q = pats.patterns[:, -1]  # [n_heads, key_pos]: where the final token looks
    rest = last_q[:, 1:]  # without position 0, where attention sinks put their mass
    results["attention_from_last_token"] = {
        lab: {
            "top_key_pos": int(last_q[i].argmax()),
            "top_key_token": pats.str_tokens[int(last_q[i].argmax())],
            "weight": float(last_q[i].max()),
            "top_key_after_first": pats.str_tokens[1 + int(rest[i].argmax())] if rest.shape[1] else None,
            "weight_after_first": float(rest[i].max()) if rest.shape[1] else None,
            "pattern_row": last_q[i],
        }
        for i, lab in enumerate(head_labels)
    }
    return attention_view_html


def _composition_step(
    model: Model, top: list[tuple[str, float]], results: dict[str, Any], figs: dict[str, go.Figure]
) -> None:
    """Q/K/V-composition among the top heads (their pairs only, not all n_heads_total²), as a graph."""
    head_labels = [lab for lab, _ in top]
    comp = {k: composition_scores(model, kind=k, heads=head_labels) for k in ("Q", "K", "V")}
    graph = composition_edges(
        comp,
        heads=head_labels,
        max_edges=None,
        node_values=dict(top),
        node_value_name="attribution",
        title=f"Composition between the top {len(head_labels)} heads",
    )
    figs["composition_graph"] = graph.plot()
    results["composition"] = graph.to_json_dict()


def _copying_step(model: Model, results: dict[str, Any], figs: dict[str, go.Figure]) -> str:
    """Every head's copying score; the reason when the model has none ("" else)."""
    try:
        cs = copying_scores(model)
        figs["copying_scores"] = copying_score_map(cs)
        cs_arr = getattr(cs, "scores", cs)
        results["copying_scores"] = cs_arr
    except UnsupportedOperationError as e:
        results["copying_scores"] = None
        return str(e)
    return ""


def _ov_step(
    model: Model,
    tr: Any,
    head: str,
    answer_id: Optional[int],
    wrong_id: Optional[int],
    results: dict[str, Any],
    figs: dict[str, go.Figure],
    *,
    decoder: bool,
) -> None:
    """The top head's OV circuit: its eigenvalues, and for decoders its top-token table over the prompt's tokens.

    Decoders: the full OV circuit W_E W_OV W_U, whose Σλ/Σ|λ| is the copying score shown in the copying-score
    map; encoders: the residual-space W_V W_O (no unembedding), named as such."""
    top_head = Head.parse(head)
    l0, h0 = top_head.layer, top_head.head
    ov = ov_circuit(model, l0, h0, full=decoder)
    figs["ov_eigenvalues"] = ov_eigenvalue_figure(ov)
    ev = ov.eigenvalues
    results["ov_top_head"] = {
        "head": head,
        "eigenvalues": ev,
        "matrix": ov.label,
        "eigenvalue_ratio": float(ev.real.sum() / ev.abs().sum()),
    }
    if decoder:
        _ov_top_tokens(model, tr, head, ov, answer_id, wrong_id, results, figs)


def _ov_top_tokens(
    model: Model,
    tr: Any,
    head: str,
    ov: Any,
    answer_id: Optional[int],
    wrong_id: Optional[int],
    results: dict[str, Any],
    figs: dict[str, go.Figure],
) -> None:
    """The top head's full-OV top-token table over the prompt's tokens (and answer / wrong), its rows read
    through the effective embedding (the token embedding through block 0's MLP, what later heads actually
    see); models without one use the raw W_E (``ov``)."""
    l0, h0 = Head.parse(head).layer, Head.parse(head).head
    try:
        full = ov_circuit(model, l0, h0, full=True, embedding="effective")
        emb, emb_caption = "effective", f"rows: {EFFECTIVE_EMBEDDING}"
    except UnsupportedOperationError as e:
        full, emb = ov, "raw"
        emb_caption = f"rows: the raw token embedding W_E (no effective embedding: {e})"
    extra = [t for t in (answer_id, wrong_id) if t is not None]
    ids = list(dict.fromkeys([int(t) for t in tr.tokens[0][tr.attention_mask[0].bool()]] + extra))
    ids = [i for i in ids if i not in getattr(model.tokenizer, "all_special_ids", [])] or ids
    dec = _decode(model)
    name = "W_E,eff W_OV W_U" if emb == "effective" else "W_E W_OV W_U"
    figs["ov_top_tokens"] = top_token_table(
        full, ids, k=min(5, len(ids)), decode=dec, kind="OV", label=f"{head} full OV ({name})", caption=emb_caption
    )
    rows, cols, vals, idx = top_token_values(full, ids, k=min(5, len(ids)))
    results["ov_top_head"]["top_tokens_embedding"] = {"embedding": emb, "caption": emb_caption}
    results["ov_top_head"]["top_tokens"] = {
        dec(r): [[dec(cols[j]), float(v)] for j, v in zip(idx[i], vals[i])] for i, r in enumerate(rows)
    }


def _stream_step(tr: Any, results: dict[str, Any], figs: dict[str, go.Figure]) -> None:
    """The last token's residual stream: norms at every point, of each write, and of what remains of it."""
    figs["residual_stream"] = residual_stream_figure(tr, pos=-1)
    rs = residual_stream_norms(tr, pos=-1)
    results["residual_stream"] = {k: rs[k] for k in ("points", "stream", "groups", "group_norms", "closure")}
