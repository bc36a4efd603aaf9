"""The interactive attention view: self-contained HTML, escaped tokens, and hovering in headless Chromium.

The weights the page shows are read back from its DOM after a mouseover and compared with the plain
Hugging Face model's attention weights (``output_attentions=True``), not with interp's own capture.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import interp
from interp.errors import ArgumentError, ShapeError
from interp.plots import AttentionView, attention_view
from interp.stream import attention_patterns
from plots_helpers import chromium_path, external_resources, probe_in_chromium, render_in_chromium
from tiny_models import tiny_hf_model, tiny_model

PROMPT = "w1 w2 w3 w4 w1 w2"
HEADS = ["L0.H3", "L1.H0"]
needs_browser = pytest.mark.skipif(chromium_path() is None, reason="needs Chromium (apt-get install chromium)")

NASTY = ["<bos>", "</script><script>window.__pwned = 1</script>", " \"q'", "&amp;", "<!--", "\n", "\u2028x", ""]

# After the page loads: the weights shown for the initial token, then a mouseover on token POS and the
# weights shown for it, per head: the "from" row's data-weight attributes and the "to" row's printed numbers.
HOVER = """
window.addEventListener("load", function () {
  var root = document.querySelector(".interp-attention-view");
  function read() {
    return Array.from(root.querySelectorAll(".ia-head")).map(function (b) {
      return {head: b.querySelector(".ia-head-name").textContent,
              from: Array.from(b.querySelectorAll(".ia-from .ia-cell")).map(function (c) {
                return c.getAttribute("data-weight"); }),
              to: Array.from(b.querySelectorAll(".ia-to .ia-cell .ia-w")).map(function (c) { return c.textContent; })};
    });
  }
  var before = read();
  var tokens = Array.from(root.querySelectorAll(".ia-tokens .ia-tok"));
  tokens[POS].dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  var after = read();
  root.querySelector('.ia-controls input[data-head="0"]').click();  // switch the first head off
  var one_head = read().map(function (h) { return h.head; });
  window.__probe = {before: before, after: after, one_head: one_head, pwned: window.__pwned || 0,
                    tokens: tokens.map(function (s) { return s.textContent; })};
});
"""


@pytest.fixture(scope="module")
def patterns():
    m = tiny_model("gpt2")
    hf = tiny_hf_model("gpt2")
    with torch.no_grad():
        att = hf(m.to_tokens(PROMPT), output_attentions=True).attentions
    ref = torch.stack([att[0][0, 3], att[1][0, 0]]).double().numpy()  # [head, query, key]
    return attention_patterns(m, PROMPT, HEADS), ref


@pytest.mark.slow
def test_view_html_is_self_contained_and_holds_every_head(patterns, tmp_path):
    ap, _ = patterns
    view = ap.view()
    assert isinstance(view, AttentionView) and view.heads == HEADS and view.str_tokens == ap.str_tokens
    frag = view._repr_html_()  # what Jupyter shows: a div, its style and an inline script, nothing fetched
    assert frag.startswith('<div id="interp-attn-') and "<script>" in frag and external_resources(frag) == []
    assert view._repr_html_() != frag  # two displays of one view get distinct element ids
    page = interp.export(view, tmp_path / "attn.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and external_resources(page) == []
    assert "http://" not in page and "https://" not in page


def test_tokens_are_escaped_in_the_markup(tmp_path):
    a = np.tril(np.ones((len(NASTY), len(NASTY))))
    view = attention_view(a / a.sum(-1, keepdims=True), NASTY, heads=["L0.H0"])
    html = view.to_html()
    assert "</script><script>window" not in html and "<!--" not in html.split("<script>", 1)[1]
    assert html.count("<script>") == 1 and html.count("</script>") == 1  # only the view's own script element


@needs_browser
def test_hovering_a_token_shows_that_tokens_weights_in_chromium(patterns, tmp_path):
    ap, ref = patterns
    path = interp.export(ap.view(), tmp_path / "attn.html")
    pos = 3
    r = probe_in_chromium(path.resolve().as_uri(), HOVER.replace("POS", str(pos)))
    n = ref.shape[-1]
    assert [h["head"] for h in r["after"]] == HEADS
    for h, shown in enumerate(r["after"]):
        np.testing.assert_allclose(np.array(shown["from"], dtype=float), ref[h, pos], atol=6e-5)  # where 3 attends
        np.testing.assert_allclose(np.array(shown["to"], dtype=float), ref[h, :, pos], atol=6e-4)  # who attends 3
    # before the hover the view showed the last token's row; the hover changed what is displayed
    for h, shown in enumerate(r["before"]):
        np.testing.assert_allclose(np.array(shown["from"], dtype=float), ref[h, n - 1], atol=6e-5)
    assert r["before"] != r["after"]
    assert r["one_head"] == HEADS[1:]  # the check box hides a head


@pytest.mark.slow
@needs_browser
def test_nasty_tokens_render_as_text_and_run_nothing(tmp_path):
    a = np.tril(np.ones((len(NASTY), len(NASTY))))
    view = attention_view(a / a.sum(-1, keepdims=True), NASTY, heads=["L0.H0"])
    path = interp.export(view, tmp_path / "nasty.html")
    r = probe_in_chromium(path.resolve().as_uri(), HOVER.replace("POS", "1"))
    assert r["pwned"] == 0
    shown = [t.replace("\\n", "\n") for t in r["tokens"]]
    assert shown == [t if t else "∅" for t in NASTY]  # every token as its own text (empty one shown as ∅)
    _, urls = render_in_chromium(path.resolve().as_uri(), width=800, height=400)
    assert urls == []  # the page requested nothing from the network


def test_export_and_bad_input(tmp_path):
    view = attention_view(torch.eye(3)[None], ["a", "b", "c"])
    with pytest.raises(ArgumentError, match=r"export it to \.html"):
        interp.export(view, tmp_path / "v.png")
    with pytest.raises(ArgumentError, match="str_tokens must be 3 strings"):
        attention_view(torch.eye(3)[None], ["a", "b"])
    with pytest.raises(ArgumentError, match="heads has 2 labels"):
        attention_view(torch.eye(3)[None], ["a", "b", "c"], heads=["x", "y"])
    with pytest.raises(ArgumentError, match="NaN"):
        attention_view(torch.full((1, 2, 2), float("nan")), ["a", "b"])
    with pytest.raises(ShapeError, match="query positions"):
        attention_view(torch.ones(1, 4, 3), ["a", "b", "c"])
    with pytest.raises(ArgumentError, match="at most 512 tokens"):
        attention_view(torch.ones(1, 1, 600))
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_report_embeds_the_attention_view(tmp_path):
    from interp.reports import report

    m = tiny_model("gpt2")
    index = report(m, PROMPT, answer="w3", wrong="w4", out_dir=tmp_path / "rep", n_heads=2, static=False)
    html = index.read_text()
    section = html.split('id="heads"', 1)[1].split("</section>", 1)[0]
    assert "interp-attention-view" in section and external_resources(html) == []
    if chromium_path() is not None:  # the view works inside the report page too
        r = probe_in_chromium(index.resolve().as_uri(), HOVER.replace("POS", "2"))
        results = json.loads((tmp_path / "rep" / "results.json").read_text())
        heads = [h["head"] for h in results["top_heads"]][:2]
        assert [h["head"] for h in r["after"]] == heads
        for h, shown in zip(heads, r["after"]):
            row = results["attention_from_last_token"][h]["pattern_row"]  # the last token's row, from results.json
            np.testing.assert_allclose(np.array(r["before"][heads.index(h)]["from"], dtype=float), row, atol=6e-5)
