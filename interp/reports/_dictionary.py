"""A dictionary's page: what a user looks at before trusting a set of transcoders or SAEs, as one self-contained HTML
file (plotly.js inlined, no network).

Per dictionary (one row of :func:`interp.features.evaluate_dictionary` on held-out text): FVU, spliced-in loss
recovered, KL to the clean next-token distribution, L0, dead and dense feature counts; the scores against the layer;
the histogram of feature densities (log10 of the fraction of tokens each feature is active on); and a seeded sample of
live features per dictionary with their top activating contexts (:func:`interp.features.top_activating_contexts`)
and logit effects (the tokens its decoder direction promotes and suppresses through the unembedding). The page's
numbers are the evaluation's, formatted (a test reads them back).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch

from torch import Tensor

from interp._io import write_atomic
from interp._validate import check_positive_int, is_int, keyword_only_since
from interp.errors import ArgumentError, ExportError
from interp.dictionaries import (
    SAE,
    CrossLayerTranscoder,
    DictionaryEvaluation,
    Transcoder,
    evaluate_dictionary,
    feature_logit_effects,
    top_activating_contexts,
)
from interp.models import Model
from interp.plots import dictionary_density_figure, dictionary_evaluation_figure
from interp.plots.internal import esc
from interp.reports._html import Page, data_table, kv_table

__all__ = ["dictionary_page"]


def _num(x: float, digits: int = 4) -> str:
    """A score as the page prints it (a test parses it back): 4 decimals, — for NaN."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _by_layer(dicts: Any) -> Union[dict[int, Any], CrossLayerTranscoder]:
    """The dictionaries keyed by model layer (a CLT as it is); SAEs by their layer."""
    inner = getattr(dicts, "transcoders", None)
    if inner is not None and not isinstance(dicts, (list, tuple, dict)):
        dicts = inner
    if not isinstance(dicts, (list, tuple, dict, Transcoder, SAE)):  # a cross-layer set: as it is
        return dicts
    if isinstance(dicts, (Transcoder, SAE)):
        dicts = [dicts]
    if isinstance(dicts, dict):
        return dict(dicts)
    lst = list(dicts)
    if all(getattr(d, "layer", None) is not None for d in lst):
        return {int(d.layer): d for d in lst}
    return dict(enumerate(lst))


def _sample(ev: DictionaryEvaluation, n: int, seed: int) -> list[tuple[int, int]]:
    """``n`` live features of each dictionary row (seeded), most frequent first within the row."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for lab, layer, nf in zip(ev.labels, ev.layers, ev.n_features):
        if not nf:
            continue
        d = ev.densities(lab).cpu()
        live = (d > 0).nonzero().flatten()
        pick = live[torch.randperm(len(live), generator=g, device="cpu")[:n]]
        pick = pick[d[pick].argsort(descending=True)]
        out += [(int(layer), int(f)) for f in pick]
    return out


def _contexts(model: Model, dicts: Any, texts: Any, feats: list[tuple[int, int]], k: int) -> dict:
    """Top activating contexts of the transcoder features (SAEs: none); a partial set is read at its layers only."""
    if not feats or texts is None or len(texts) == 0:
        return {}
    if isinstance(dicts, dict):
        if any(isinstance(d, SAE) for d in dicts.values()):
            return {}
        dicts = _pad(model, dicts)
    return top_activating_contexts(model, dicts, texts if isinstance(texts, Tensor) else list(texts), list(feats), k=k)


def _pad(model: Model, dicts: dict[int, Any]) -> list[Any]:
    """One transcoder per layer: the set's, and where it has none a one-feature placeholder never read (no feature of
    the sample is there)."""
    d = model.arch.d_model
    z = torch.zeros(1, d, device="cpu")
    return [
        dicts[l]
        if l in dicts
        else Transcoder(z, torch.zeros(1, device="cpu"), z, torch.zeros(d, device="cpu"), layer=l)
        for l in range(model.arch.n_layers)
    ]


def _summary(ev: DictionaryEvaluation) -> str:
    rows = []
    for i, lab in enumerate(ev.labels):
        nf = ev.n_features[i]
        dead = round(float(ev.dead_fraction[i]) * nf) if nf else None
        dense = round(float(ev.dense_fraction[i]) * nf) if nf else None
        rows.append(
            [
                esc(lab),
                nf or "—",
                _num(float(ev.fvu[i])),
                _num(float(ev.loss_recovered[i])),
                _num(float(ev.kl_spliced[i])),
                _num(float(ev.l0[i]), 2),
                "—" if dead is None else f"{dead} ({_num(float(ev.dead_fraction[i]), 3)})",
                "—" if dense is None else str(dense),
                _num(float(ev.ce_spliced[i])),
                _num(float(ev.ce_zero[i])),
            ]
        )
    head = ["dictionary", "features", "FVU", "loss recovered", "KL", "L0", "dead (fraction)", "dense", "CE spliced"]
    return data_table(head + ["CE zero"], rows, numeric=[False] + [True] * 9)


def _features_table(
    ev: DictionaryEvaluation, feats: list[tuple[int, int]], contexts: dict, effects: dict, row_of: dict[int, str]
) -> str:
    rows = []
    for l, f in feats:
        key = f"L{l}.F{f}"
        dens = float(ev.densities(row_of[l])[f])
        ctx = contexts.get(key)
        ctx_html = (
            "<br>".join(esc(c).replace("«", "<b>«").replace("»", "»</b>") for c in ctx)
            if ctx
            else "<i>no context (SAE, or not active in these texts)</i>"
        )
        eff = effects.get(key, [])
        k = len(eff) // 2
        up = ", ".join(f"<code>{esc(t)}</code> {v:+.2f}" for t, v in eff[:k])
        down = ", ".join(f"<code>{esc(t)}</code> {v:+.2f}" for t, v in eff[k:])
        rows.append([esc(key), f"{dens:.2e}", ctx_html, f"+ {up}<br>− {down}"])
    return data_table(["feature", "density", "top activating contexts", "logit effects"], rows, numeric=[False, True])


@keyword_only_since(2, "path")
def dictionary_page(
    model: Model,
    dicts: Any,
    *,
    path: Union[str, os.PathLike],
    tokens: Any = None,
    evaluation: Optional[DictionaryEvaluation] = None,
    texts: Optional[Sequence[str]] = None,
    features_per_layer: int = 6,
    contexts: int = 5,
    max_tokens: Optional[int] = 4096,
    seq_len: int = 128,
    seed: int = 0,
    title: Optional[str] = None,
) -> Path:
    """Write the dictionary set's page (module docstring) to ``path`` (an ``.html`` file, written atomically) and
    return it. ``evaluation``: a :func:`interp.features.evaluate_dictionary` result of ``dicts``, or None to run one on
    ``tokens`` (held-out ids, or texts cut into rows of ``seq_len``; ``max_tokens`` caps them). ``texts``: where top
    contexts are searched (default: ``tokens`` when they are texts, the first 48, each cut to 600 characters);
    ``features_per_layer`` live features sampled per dictionary with ``seed``, each with its ``contexts`` top
    contexts and as many promoted and suppressed tokens."""
    p = Path(path) if isinstance(path, (str, os.PathLike)) else None
    if p is None or p.suffix.lower() not in (".html", ".htm"):
        raise ExportError(f"path={path!r} must be a str or os.PathLike ending in .html")
    if not p.parent.is_dir():
        raise ExportError(f"path={str(p)!r}: directory {str(p.parent)!r} does not exist")
    check_positive_int("features_per_layer", features_per_layer)
    check_positive_int("contexts", contexts)
    if not is_int(seed):
        raise ArgumentError(f"seed={seed!r} must be an int")
    if evaluation is None:
        if tokens is None:
            raise ArgumentError("give tokens= (held-out ids or texts to score the set on) or evaluation=")
        evaluation = evaluate_dictionary(model, dicts, tokens=tokens, max_tokens=max_tokens, seq_len=seq_len)
    elif not isinstance(evaluation, DictionaryEvaluation) or evaluation.model_name != model.name:
        raise ArgumentError(f"evaluation= must be a DictionaryEvaluation of model {model.name!r}")
    if texts is None and isinstance(tokens, (list, tuple)) and all(isinstance(t, str) for t in tokens):
        texts = [t[:600] for t in tokens[:48]]
    by = _by_layer(dicts)
    feats = _sample(evaluation, features_per_layer, seed)
    has_texts = texts is not None and len(texts) > 0  # strings, or token ids [n, T] (a model without a tokenizer)
    ctx = _contexts(model, by, texts if texts is not None and has_texts else [], feats, contexts)
    effects = feature_logit_effects(model, by, feats, contexts)
    html = _render(model, evaluation, feats, ctx, effects, title, has_texts)
    write_atomic(p, html.encode("utf-8"))
    return p


def _render(
    model: Model, ev: DictionaryEvaluation, feats: list, ctx: dict, effects: dict, title: Optional[str], texts: bool
) -> str:
    page = Page(
        title or f"Dictionary — {model.name}",
        esc(f"{ev.kind}: {len([n for n in ev.n_features if n])} dictionaries, scored on {ev.n_tokens} held-out tokens"),
    )
    page.section(
        "Run",
        kv_table(
            [
                ("model", model.name),
                ("kind", ev.kind),
                ("scored tokens (each row's first excluded)", ev.n_tokens),
                ("next-token predictions", ev.n_predictions),
                ("clean CE (nats)", _num(ev.ce_clean)),
                ("dense: active on more than", f"{ev.dense_threshold:g} of the tokens"),
            ]
        ),
    )
    page.section(
        "Scores per dictionary",
        _summary(ev),
        note="loss recovered = 1 − (CE spliced − CE clean) / (CE zero − CE clean): the dictionary's output spliced in "
        "for the MLP's write (an SAE: its point) against that write zero-ablated; KL = KL(clean ‖ spliced) per "
        "token. 'all' splices every transcoder at once.",
    )
    page.section("Scores against the layer", page.figure(dictionary_evaluation_figure(ev)))
    page.section("Feature density", page.figure(dictionary_density_figure(ev)))
    row_of = {l: lab for lab, l, n in zip(ev.labels, ev.layers, ev.n_features) if n}
    page.section(
        "A sample of live features",
        _features_table(ev, feats, ctx, effects, row_of),
        note="sampled among the features active on the scored tokens; contexts from "
        + ("the given texts" if texts else "no texts (give texts=)")
        + "; logit effects: its decoder direction through the final norm's gain and the unembedding",
    )
    return page.render()
