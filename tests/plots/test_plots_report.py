"""report() / weights_report(): files, numbers against the plain HF model, a self-contained page
that renders in headless Chromium without touching the network, and typed errors with no files."""

import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from interp.errors import ArgumentError, ExportError
from interp.plots import Exporter
from interp.reports import weights_report, report
from plots_helpers import PNG_SIGNATURE, chromium_path, decode_png, external_resources, render_in_chromium
from tiny_models import tiny_hf_model, tiny_model

PROMPT = "w1 w2 w3 w4 w1 w2"
FIGURES = {
    "attribution_heatmap",
    "attribution_waterfall",
    "causal_effects",
    "attention_patterns",
    "composition_graph",
    "copying_scores",
    "ov_eigenvalues",
    "ov_top_tokens",
    "residual_stream",
}
needs_browser = pytest.mark.skipif(chromium_path() is None, reason="needs Chromium (apt-get install chromium)")


@pytest.fixture(scope="module")
def exporter():
    with Exporter() as ex:
        yield ex


@pytest.fixture(scope="module")
def gpt2_report(tmp_path_factory, exporter):
    if chromium_path() is None:
        pytest.skip("needs Chromium for PNG/SVG")
    out = tmp_path_factory.mktemp("report-gpt2") / "rep"
    m = tiny_model("gpt2")
    index = report(m, PROMPT, answer="w3", wrong="w4", out_dir=out, n_heads=4, exporter=exporter)
    return m, out, index


@pytest.mark.slow
def test_report_writes_every_figure_as_png_and_svg(gpt2_report):
    _, out, index = gpt2_report
    assert index == out / "index.html" and index.is_file()
    figs = out / "figures"
    assert {p.name for p in figs.iterdir()} == {f"{n}.{s}" for n in FIGURES for s in ("png", "svg")}
    for n in FIGURES:
        png = (figs / f"{n}.png").read_bytes()
        assert png[:8] == PNG_SIGNATURE and len(png) > 2000
        assert ET.fromstring((figs / f"{n}.svg").read_bytes()).tag.endswith("svg")
    assert not [p for p in out.rglob(".*")]  # no temporary files left behind


@pytest.mark.slow
def test_report_numbers_match_the_hf_model(gpt2_report):
    m, out, _ = gpt2_report
    r = json.loads((out / "results.json").read_text())
    hf = tiny_hf_model("gpt2")
    with torch.no_grad():
        logits = hf(m.to_tokens(PROMPT)).logits[0, -1].double()
    tok = m.tokenizer.convert_tokens_to_ids
    diff = (logits[tok("w3")] - logits[tok("w4")]).item()
    pred = r["prediction"]
    assert pred["top"][0]["id"] == int(logits.argmax())
    assert [t["id"] for t in pred["top"]] == logits.topk(len(pred["top"])).indices.tolist()
    assert pred["logit_diff"] == pytest.approx(diff, abs=1e-4)
    a = r["attribution"]
    assert sum(a["values"]) == pytest.approx(diff, abs=1e-4)
    assert a["total"] == pytest.approx(diff, abs=1e-4)
    assert a["closure_error"] < 1e-4
    heads = [(lab, v) for lab, v in zip(a["labels"], a["values"]) if re.fullmatch(r"L\d+\.H\d+", lab)]
    expected = [lab for lab, _ in sorted(heads, key=lambda t: -abs(t[1]))[:4]]
    assert [h["head"] for h in r["top_heads"]] == expected
    assert len(r["copying_scores"]) == 2 and len(r["copying_scores"][0]) == 4
    assert all(e["src"] in expected and e["dst"] in expected for e in r["composition"]["edges"])
    assert r["timings_seconds"]["total"] > 0 and set(r["export_seconds"]) == {
        f"{n}.{s}" for n in FIGURES for s in ("png", "svg")
    }


@pytest.mark.slow
def test_report_page_is_self_contained_and_prints_the_closure_error(gpt2_report):
    _, out, index = gpt2_report
    text = index.read_text()
    assert external_resources(text) == []
    assert text.count("Plotly.newPlot(") == len(FIGURES)
    r = json.loads((out / "results.json").read_text())
    assert f"closure error = <b>{r['attribution']['closure_error']:.2e}</b>" in text
    for section in (
        "Model",
        "Prediction",
        "Attribution by head and component",
        "Top heads",
        "Composition",
        "Copying scores",
        "OV circuit of",
        "Residual stream",
    ):
        assert f">{section}" in text
    for n in FIGURES:
        assert f'href="figures/{n}.png"' in text and f'href="figures/{n}.svg"' in text


@pytest.mark.slow
@needs_browser
def test_report_renders_in_headless_chromium_without_network(gpt2_report, tmp_path):
    _, _, index = gpt2_report
    shot, requests = render_in_chromium(index.as_uri())
    assert requests == []
    px = decode_png(shot)
    assert px.shape[:2] == (2000, 1200)
    colours = np.unique(px.reshape(-1, px.shape[-1]), axis=0)
    assert len(colours) > 50  # text, tables and heatmaps, not a blank page
    # the check itself can fail: a page with a CDN script is caught
    ctrl = tmp_path / "ctrl.html"
    ctrl.write_text(
        '<html><head><script src="https://cdn.example.invalid/plotly.js"></script></head><body><p>x</p></body></html>'
    )
    _, ctrl_requests = render_in_chromium(ctrl.as_uri(), width=300, height=200)
    assert ctrl_requests == ["https://cdn.example.invalid/plotly.js"]


@pytest.mark.slow
def test_encoder_report_attributes_the_pooled_hidden_state(tmp_path):
    m = tiny_model("bert")
    index = report(m, PROMPT, out_dir=tmp_path / "rep", static=False)
    r = json.loads((tmp_path / "rep" / "results.json").read_text())
    hf = tiny_hf_model("bert")
    with torch.no_grad():
        h = hf.bert(m.to_tokens(PROMPT)).last_hidden_state[0].double()
    norm = h.mean(0).norm().item()
    assert r["embedding_norm"] == pytest.approx(norm, rel=1e-5)
    assert sum(r["attribution"]["values"]) == pytest.approx(norm, rel=1e-4)
    assert "prediction" not in r and r["copying_scores"] is None
    text = index.read_text()
    assert "Not defined for this model" in text and external_resources(text) == []
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["index.html", "results.json"]


def test_bad_report_input_raises_before_writing_anything(tmp_path):
    gpt2, bert = tiny_model("gpt2"), tiny_model("bert")
    out = tmp_path / "never"
    with pytest.raises(ArgumentError, match="encoder"):
        report(bert, PROMPT, answer="w3", out_dir=out)
    with pytest.raises(ArgumentError, match="single token"):
        report(gpt2, PROMPT, answer="w3 w4", out_dir=out)
    with pytest.raises(ArgumentError, match="prompt"):
        report(gpt2, "  ", answer="w3", out_dir=out)
    with pytest.raises(ArgumentError, match="out_dir"):
        report(gpt2, PROMPT, answer="w3", out_dir=None)
    assert not out.exists()
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ExportError, match="not a directory"):
        report(gpt2, PROMPT, answer="w3", out_dir=afile, static=False)
    assert afile.read_text() == "x"


def test_circuits_report_writes_the_weight_only_pages(tmp_path):
    m = tiny_model("llama", n_layers=3)
    index = weights_report(m, out_dir=tmp_path / "c", max_edges=5, static=False)
    graph = json.loads((tmp_path / "c" / "composition.json").read_text())
    assert {e["kind"] for e in graph["edges"]} == {"Q", "K", "V"}
    assert sum(e["kind"] == "K" for e in graph["edges"]) == 5
    for e in graph["edges"]:
        assert int(e["src"][1:].split(".")[0]) < int(e["dst"][1:].split(".")[0])
    text = index.read_text()
    assert external_resources(text) == [] and text.count("Plotly.newPlot(") == 2


@pytest.mark.real
def test_minilm_report_is_direction_based(minilm, tmp_path):
    index = report(minilm, "The cat sat on the mat.", out_dir=tmp_path / "m", static=False)
    r = json.loads((tmp_path / "m" / "results.json").read_text())
    a = r["attribution"]
    assert a["closure_error"] < 1e-3 * abs(a["total"])
    assert a["total"] == pytest.approx(r["embedding_norm"], rel=1e-4)
    assert "residual_stream" in r and index.is_file()


@pytest.mark.slow
def test_report_ov_table_reads_through_the_effective_embedding_and_says_so(tmp_path):
    """The OV top-token table starts from W_E + MLP₀(N₂(W_E)) (what later heads read), and its caption and the
    section's note name that embedding; an attention-only model has none: its table says it uses the raw W_E."""
    from interp.circuits import effective_embedding, ov_circuit
    from interp.labels import Head
    from interp.models import ToyConfig, build_toy, toy_words

    m = tiny_model("gpt2")
    index = report(m, PROMPT, answer="w3", wrong="w4", out_dir=tmp_path / "gpt2", n_heads=2, static=False)
    r = json.loads((tmp_path / "gpt2" / "results.json").read_text())
    ov = r["ov_top_head"]
    assert ov["top_tokens_embedding"]["embedding"] == "effective"
    assert "W_E + MLP₀(N₂(W_E))" in ov["top_tokens_embedding"]["caption"]
    text = index.read_text()
    assert "through block 0" in text and "W_E,eff W_OV W_U" in text  # the table's caption and title
    assert "rows read through the effective token embedding" in text  # the section's note
    # the table's numbers are the effective-embedding circuit's (not the raw one's)
    h = Head.parse(ov["head"])
    eff = ov_circuit(m, h.layer, h.head, full=True, embedding="effective")
    assert torch.allclose(eff.A[:, :1], effective_embedding(m) @ ov_circuit(m, h.layer, h.head).A[:, :1])
    first_row = next(iter(ov["top_tokens"].values()))
    ids = list(
        dict.fromkeys(m.to_tokens(PROMPT)[0].tolist() + [m.tokenizer.convert_tokens_to_ids(t) for t in ("w3", "w4")])
    )
    ids = [i for i in ids if i not in m.tokenizer.all_special_ids]
    sub = (eff.A[ids] @ eff.B[:, ids]).double()  # the circuit restricted to the prompt's tokens
    assert [v for _, v in first_row] == pytest.approx(sub[0].topk(len(first_row)).values.tolist(), rel=1e-5)

    toy = build_toy(ToyConfig())
    words = toy_words(4)
    index = report(toy, " ".join(words + words[:2]), answer=words[2], out_dir=tmp_path / "toy", n_heads=2, static=False)
    r = json.loads((tmp_path / "toy" / "results.json").read_text())
    assert r["ov_top_head"]["top_tokens_embedding"]["embedding"] == "raw"
    assert "rows: the raw token embedding W_E" in r["ov_top_head"]["top_tokens_embedding"]["caption"]
    assert "rows read through the raw token embedding W_E" in index.read_text()
