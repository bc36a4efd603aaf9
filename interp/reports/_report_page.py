"""The page of :func:`interp.reports.report`: one section per analysis, in the order they ran — the model card, the
prediction, the attribution, the causal effects, the heads, composition, copying, the OV circuits, the residual stream
and the provenance."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from interp.models import Model
from interp.plots.internal import esc, fmt, token_label
from interp.reports._common import _model_card
from interp.reports._html import Page, data_table, kv_table


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
