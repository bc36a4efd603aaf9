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
import math
import platform
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np
import plotly.graph_objects as go
import torch

from interp.attribution import attribute_direction, attribute_logits
from interp.attribution.internal import resolve_tokens, warn_unspaced
from interp.causal import Direction, Logit, LogitDiff, effects
from interp.circuits.internal import EFFECTIVE_EMBEDDING
from interp.circuits import composition_edges, composition_scores, copying_scores, ov_circuit
from interp._io import write_atomic
from interp._validate import check_positive_int
from interp.errors import ArgumentError, ExportError, ShapeError, UnsupportedOperationError
from interp.engine import load_model
from interp.models import Model
from interp.models.internal import readable_token
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
    esc,
    find_browser,
    fmt,
    parse_head,
    residual_stream_norms,
    token_label,
    top_token_values,
)
from interp.labels import Head
from interp.report._html import Page, data_table, kv_table
from interp.stream.internal import as_batch
from interp.stream import attention_patterns, trace

__all__ = ["report", "weights_report"]

log = logging.getLogger(__name__)


class _Steps:
    """Times named steps, logs them, and advances an optional tqdm bar."""

    def __init__(self, total: int, progress: bool, desc: str) -> None:
        self.times: dict[str, float] = {}
        self._bar = None
        if progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="step")

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self._bar is not None:
            self._bar.set_postfix_str(name)
        log.log(logging.DEBUG if self._bar is not None else logging.INFO, "report: %s", name)  # the bar shows it
        t0 = time.perf_counter()
        yield
        self.times[name] = round(time.perf_counter() - t0, 3)
        if self._bar is not None:
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _jsonable(x: Any) -> Any:
    """Tensors/arrays/NaN -> JSON values (NaN and inf become null)."""
    if torch.is_tensor(x):
        x = x.detach().cpu().double().numpy() if not x.is_complex() else x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "c":
            return [[_jsonable(float(v.real)), _jsonable(float(v.imag))] for v in x.ravel()]
        return _jsonable(x.tolist())
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, Path):
        return str(x)
    return x


def _resolve_model(model: Any) -> Model:
    if isinstance(model, str):
        return load_model(model)
    if not isinstance(model, Model):
        raise ArgumentError(
            f"model is a {type(model).__name__}; pass an interp Model (interp.load_model) or a catalog name"
        )
    return model


def _prepare_out_dir(out_dir: Any) -> Path:
    if out_dir is None or not isinstance(out_dir, (str, Path)):
        raise ArgumentError(f"out_dir={out_dir!r} must be a directory path (str or Path)")
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise ExportError(f"out_dir={str(out_dir)!r} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create out_dir={str(out_dir)!r}: {e.strerror or e}") from e
    return out


def _model_card(model: Model) -> list[tuple[str, Any]]:
    a, block = model.arch, model.block
    norms = block.layout if a.norm == "none" else f"{block.layout} {a.norm}"
    wiring = (
        "attention only"
        if not block.has_mlp
        else "sequential"
        if block.sees("mlp", "attn")
        else "parallel attention + MLP"
    )
    rows = [
        ("name", model.name),
        ("family", a.family),
        ("source", getattr(model, "source", "") or "—"),
        ("layers", a.n_layers),
        ("heads (query / KV)", f"{a.n_heads} / {a.n_kv_heads}"),
        ("d_model / d_head / d_mlp", f"{a.d_model} / {a.d_head} / {a.d_mlp}"),
        ("vocabulary", a.d_vocab),
        ("context", a.n_ctx),
        ("norm", f"{norms} (ε = {a.norm_eps:g})"),
        ("positions", a.positional + (f" (rotary dim {a.rotary_dim})" if a.rotary_dim else "")),
        ("block", wiring),
        ("steps", str(block)),
        ("MLP", f"{'gated ' if a.gated_mlp else ''}{a.act_fn}"),
        ("causal", a.causal),
        ("unembedding", a.has_unembed),
        ("dtype / device", f"{model.dtype} / {model.device}"),
        ("weights", getattr(model, "provenance", "") or "—"),
    ]
    return rows


def _decode(model: Model) -> Any:
    tok = getattr(model, "tokenizer", None)
    return (lambda i: readable_token(tok, int(i))) if tok is not None else (lambda i: f"#{int(i)}")


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


def _export_static(
    figs: dict[str, Any], out: Path, exporter: Optional[Exporter], *, static: bool
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Each figure as PNG and SVG under ``out/figures`` through one browser; (files, seconds per file)."""
    files: dict[str, list[str]] = {name: [] for name in figs}
    seconds: dict[str, float] = {}
    if not static:
        return files, seconds
    (out / "figures").mkdir(exist_ok=True)
    ex = exporter if exporter is not None else Exporter()
    try:
        for name, fig in figs.items():
            for suf in ("png", "svg"):
                t0 = time.perf_counter()
                ex.export(fig, out / "figures" / f"{name}.{suf}")
                seconds[f"{name}.{suf}"] = round(time.perf_counter() - t0, 3)
                files[name].append(f"figures/{name}.{suf}")
    finally:
        if exporter is None:
            ex.close()
    return files, seconds


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


def _page(
    model: Model,
    prompt: str,
    r: dict[str, Any],
    figs: dict[str, go.Figure],
    files: dict[str, list[str]],
    *,
    decoder: bool,
    copying_note: str,
    attention_view: str = "",
    effects_note: str = "",
    n_rows: int = 6,
) -> Page:
    """The report page: one section per analysis, in the order they ran."""
    toks = r["str_tokens"]
    sub = f"prompt: <span class='tok'>{esc(prompt)}</span> · {len(toks)} tokens"
    page = Page(title=f"interp report — {model.name}", subtitle=sub)
    page.section("Model", kv_table(_model_card(model)), anchor="model")
    _prediction_section(page, r, decoder=decoder)
    _attribution_section(page, r, figs, files)
    _effects_section(page, r, figs, files, decoder=decoder, note=effects_note, n_rows=n_rows)
    _heads_section(page, r, figs, files, attention_view)
    _composition_section(page, r, figs, files)
    _copying_section(page, figs, files, copying_note)
    _ov_section(page, r, figs, files)
    page.section(
        "Residual stream of the last token",
        page.figure(figs["residual_stream"], files=files.get("residual_stream", [])),
        anchor="stream",
        note="Norm of the stream at every resid point, of each sublayer's write, and of what remains of "
        "each write at later points (exact decomposition with frozen norm scales).",
    )
    t = r["timings_seconds"]
    rows = [[esc(k), f"{v:.2f} s"] for k, v in t.items()]
    page.section(
        "Provenance",
        data_table(["step", "time"], rows, numeric=[False, True])
        + "<p class='files'>numbers: <a href='results.json'>results.json</a></p>",
        anchor="provenance",
    )
    return page


def _prediction_section(page: Page, r: dict[str, Any], *, decoder: bool) -> None:
    """The prompt's tokens and, for decoders, the next-token distribution with the answer's (and wrong's) rank."""
    tok_row = " ".join(f"<span class='tok'>{esc(token_label(t))}</span>" for t in r["str_tokens"])
    if not decoder:
        page.section(
            "Input",
            f"<p>tokens: {tok_row}</p><p>‖mean-pooled final hidden state‖ = "
            f"{r.get('embedding_norm', float('nan')):.4f}</p>",
            anchor="prediction",
            note="An encoder without an unembedding: there are no logits; the report attributes the "
            "mean-pooled final hidden state along its own direction (the terms sum to its norm).",
        )
        return
    p = r["prediction"]
    rows = [
        [f"<span class='tok'>{esc(token_label(t['token']))}</span>", t["id"], f"{t['logit']:.3f}", f"{t['prob']:.3%}"]
        for t in p["top"]
    ]
    summary = []
    for key in ("answer", "wrong"):
        if key in p:
            t = p[key]
            summary.append(
                f"{key} <span class='tok'>{esc(token_label(t['token']))}</span>: rank {t['rank']}, "
                f"p = {t['prob']:.2%}, logit {t['logit']:.3f}"
            )
    if "logit_diff" in p:
        summary.append(f"logit difference answer − wrong = <b>{p['logit_diff']:.4f}</b>")
    body = f"<p>tokens: {tok_row}</p><p>{'<br>'.join(summary)}</p>" + data_table(
        ["next token", "id", "logit", "probability"], rows, numeric=[False, True, True, True]
    )
    page.section(
        "Prediction",
        body,
        anchor="prediction",
        note=f"The model's distribution for the token after position {p['position']}.",
    )


def _attribution_section(
    page: Page, r: dict[str, Any], figs: dict[str, go.Figure], files: dict[str, list[str]]
) -> None:
    """The attribution's target and closure, its heatmap and waterfall."""
    a = r["attribution"]
    closure = (
        f"Σ terms = <b>{a['sum_of_terms']:.6g}</b>, the model's own value = <b>{fmt(a['total'], 7)}</b>; "
        f"closure error = <b>{a['closure_error']:.2e}</b> (relative {a['relative_error']:.1e})."
    )
    body = (
        f"<p>target: <code>{esc(a['target'])}</code>. {closure}</p>"
        + page.figure(figs["attribution_heatmap"], files=files.get("attribution_heatmap", []))
        + page.figure(figs["attribution_waterfall"], files=files.get("attribution_waterfall", []))
    )
    page.section(
        "Attribution by head and component",
        body,
        anchor="attribution",
        note="Direct attribution with the final norm's scale frozen from this forward pass: every head, "
        "MLP, embedding and bias gets an exact share, and the shares add up to the model's number.",
    )


def _heads_section(
    page: Page, r: dict[str, Any], figs: dict[str, go.Figure], files: dict[str, list[str]], attention_view: str
) -> None:
    """The top heads: where the last token attends most (and apart from position 0), and their patterns."""
    rows = []
    for h in r["top_heads"]:
        att = r["attention_from_last_token"][h["head"]]
        after = att["top_key_after_first"]
        rows.append(
            [
                f"<code>{esc(h['head'])}</code>",
                f"{h['value']:.4f}",
                f"<span class='tok'>{esc(token_label(att['top_key_token']))}</span>",
                f"{att['weight']:.3f}",
                f"<span class='tok'>{esc(token_label(after))}</span>" if after is not None else "—",
                f"{att['weight_after_first']:.3f}" if after is not None else "—",
            ]
        )
    body = (
        data_table(
            ["head", "attribution", "last token attends most to", "weight", "… apart from position 0", "weight"],
            rows,
            numeric=[False, True, False, True, False, True],
        )
        + attention_view
        + page.figure(figs["attention_patterns"], files=files.get("attention_patterns", []))
    )
    page.section(
        "Top heads and their attention patterns",
        body,
        anchor="heads",
        note="The heads with the largest |attribution|, and where each position looks: hover a token of "
        "the interactive view to see where each head attends from it and which tokens attend to it.",
    )


def _composition_section(
    page: Page, r: dict[str, Any], figs: dict[str, go.Figure], files: dict[str, list[str]]
) -> None:
    """The composition graph among the top heads and its 15 strongest edges."""
    comp = r["composition"]
    edge_rows = [
        [f"<code>{esc(e['src'])}</code>", f"<code>{esc(e['dst'])}</code>", e["kind"], f"{e['score']:.4f}"]
        for e in sorted(comp["edges"], key=lambda e: -e["score"])[:15]
    ]
    body = page.figure(figs["composition_graph"], files=files.get("composition_graph", []))
    body += (
        data_table(["source", "destination", "kind", "score"], edge_rows, numeric=[False, False, False, True])
        if edge_rows
        else "<p>No pair of top heads is in different layers, so there is no composition to draw.</p>"
    )
    page.section(
        "Composition between the top heads",
        body,
        anchor="composition",
        note="Q/K/V-composition scores ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F) from the weights alone "
        "(Elhage et al. 2021); node colour is each head's attribution.",
    )


def _copying_section(page: Page, figs: dict[str, go.Figure], files: dict[str, list[str]], copying_note: str) -> None:
    """The copying-score map, or why the model has none."""
    if "copying_scores" in figs:
        page.section(
            "Copying scores",
            page.figure(figs["copying_scores"], files=files.get("copying_scores", [])),
            anchor="copying",
            note="Σλ/Σ|λ| of each head's full OV circuit W_E W_OV W_U: +1 copies its input token, −1 suppresses it.",
        )
    else:
        page.section("Copying scores", f"<p>Not defined for this model: {esc(copying_note)}</p>", anchor="copying")


def _ov_section(page: Page, r: dict[str, Any], figs: dict[str, go.Figure], files: dict[str, list[str]]) -> None:
    """The top head's OV eigenvalues and top-token table, naming the embedding its rows are read through."""
    body = page.figure(figs["ov_eigenvalues"], files=files.get("ov_eigenvalues", []))
    if "ov_top_tokens" in figs:
        body += page.figure(figs["ov_top_tokens"], files=files.get("ov_top_tokens", []))
    page.section(
        f"OV circuit of {r['top_heads'][0]['head']}",
        body,
        anchor="ov",
        note="Eigenvalues of the full OV circuit W_E W_V W_O W_U (W_V W_O for encoders; positive real: "
        "the head copies what it reads); for decoders, the top-token table of the full OV circuit "
        "restricted to the prompt's tokens, its rows read through "
        + (
            "the effective token embedding W_E + MLP₀(N₂(W_E)) (the embedding through block 0's MLP)"
            if (r["ov_top_head"].get("top_tokens_embedding") or {}).get("embedding") == "effective"
            else "the raw token embedding W_E"
        )
        + ".",
    )


EFFECTS_TITLE = "Causal effects: total vs direct effect per head"


def _effects_section(
    page: Page,
    r: dict[str, Any],
    figs: dict[str, go.Figure],
    files: dict[str, list[str]],
    *,
    decoder: bool,
    note: str,
    n_rows: int,
) -> None:
    e = r.get("effects")
    if e is None:
        page.section(EFFECTS_TITLE, f"<p>Not computed for this model: {esc(note)}</p>", anchor="effects")
        return
    if e["corrupt"] is not None:
        how = (
            f"Noising: the clean prompt is run with one head's output replaced by its value on the corrupt prompt "
            f"<span class='tok'>{esc(e['corrupt_prompt'])}</span>."
        )
        base = f"clean = <b>{fmt(e['clean'])}</b>, corrupt = <b>{fmt(e['corrupt'])}</b>"
    else:
        how = (
            "Ablation: <b>zero (no corrupt prompt given)</b> — each head's output is set to zero in the clean run "
            "(pass <code>corrupt=</code> / <code>--corrupt</code> to replace it by a corrupt prompt's instead)."
        )
        base = f"clean = <b>{fmt(e['clean'])}</b>"
    frozen = (
        "everything downstream (later heads and MLPs) frozen and the final norm's scale frozen at the clean "
        "run — equal to the change of its direct-logit-attribution term"
        if decoder
        else "everything downstream (later heads, MLPs and every later norm's scale) frozen at the clean run — "
        "equal to the change of its attribution term along the direction"
    )
    what = (
        f"Total: the change of the metric with everything downstream recomputed. Direct: the head's output "
        f"replaced with {frozen}. Indirect = total − direct: what the head does through later components."
    )
    rows = [
        [f"<code>{esc(h['head'])}</code>", fmt(h["total"]), fmt(h["direct"]), fmt(h["indirect"])]
        for h in sorted(e["heads"], key=lambda h: -abs(h["total"]))[:n_rows]
    ]
    body = (
        f"<p>{how} Metric <code>{esc(e['metric'])}</code>: {base}.</p><p>{what}</p>"
        + data_table(["head", "total", "direct", "indirect"], rows, numeric=[False, True, True, True])
        + page.figure(figs["causal_effects"], files=files.get("causal_effects", []))
    )
    page.section(
        EFFECTS_TITLE,
        body,
        anchor="effects",
        note=f"The top {len(rows)} of {len(e['heads'])} heads by |total effect|; every head is in results.json.",
    )


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
