"""The dictionary page (interp.reports.dictionary_page): one self-contained HTML file whose numbers are the
evaluation's, written atomically, for full, partial and cross-layer sets."""

from __future__ import annotations

import math
import re

import pytest
import torch

from interp.errors import ArgumentError, ExportError
from interp.features import evaluate_dictionary, feature_logit_effects, top_activating_contexts
from interp.reports import dictionary_page
from tiny_models import tiny_model
from tiny_transcoders import random_clt, random_transcoders

TEXTS = [" ".join(f"w{(i * 7 + j) % 90}" for j in range(40)) for i in range(12)]


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", n_layers=3)


def _rows(html):
    """The scores table's rows: {label: [cells]} (tags stripped)."""
    table = html.split("<h2>Scores per dictionary</h2>")[1].split("</table>")[0]
    out = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        out[cells[0]] = cells
    return out


def _num(cell):
    return math.nan if cell == "—" else float(cell)


def test_page_numbers_are_the_evaluation(llama, tmp_path):
    tcs = random_transcoders(llama, 32)
    ev = evaluate_dictionary(llama, tcs, tokens=TEXTS, seq_len=32)
    p = dictionary_page(llama, tcs, path=tmp_path / "d.html", evaluation=ev, texts=TEXTS, features_per_layer=3)
    html = p.read_text(encoding="utf-8")
    rows = _rows(html)
    assert list(rows) == ev.labels
    for lab, cells in rows.items():
        want = ev[lab]
        for col, name, tol in ((2, "fvu", 5e-5), (3, "loss_recovered", 5e-5), (4, "kl_spliced", 5e-5), (5, "l0", 5e-3)):
            got = _num(cells[col])
            assert (math.isnan(got) and math.isnan(want[name])) or abs(got - want[name]) <= tol * max(
                1, abs(want[name])
            ), (lab, name)
        if want["n_features"]:
            assert int(cells[6].split()[0]) == round(want["dead_fraction"] * want["n_features"])
    # the sampled features: live ones, their contexts and logit effects as the public functions give them
    feats = re.findall(r"<td>(L\d+\.F\d+)</td>", html)
    assert len(feats) == 3 * 3
    some = feats[0]
    l, f = (int(x) for x in some[1:].split(".F"))
    assert float(ev.densities(f"L{l}")[f]) > 0
    ctx = top_activating_contexts(llama, tcs, TEXTS, [(l, f)], k=5)[some]
    assert ctx and ctx[0].split("«")[1].split("»")[0] in html
    eff = feature_logit_effects(llama, dict(enumerate(tcs)), [(l, f)], 5)[some]
    assert f"{eff[0][1]:+.2f}" in html


def test_page_is_self_contained(llama, tmp_path):
    p = dictionary_page(llama, random_transcoders(llama, 16), path=tmp_path / "d.html", tokens=TEXTS, seq_len=32)
    html = p.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in html
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"?(https?:)?//", html)  # nothing from the network
    assert html.count("Plotly.newPlot") == 2


def test_partial_and_cross_layer_sets(llama, tmp_path):
    tcs = random_transcoders(llama, 16)
    p = dictionary_page(llama, {1: tcs[1]}, path=tmp_path / "p.html", tokens=TEXTS, seq_len=32, features_per_layer=2)
    html = p.read_text(encoding="utf-8")
    assert list(_rows(html)) == ["L1"] and set(re.findall(r"<td>L(\d+)\.F\d+</td>", html)) == {"1"}
    p = dictionary_page(llama, random_clt(llama, 12), path=tmp_path / "c.html", tokens=TEXTS, seq_len=32)
    assert list(_rows(p.read_text(encoding="utf-8"))) == ["L0", "L1", "L2", "all"]


def test_written_atomically(llama, tmp_path, monkeypatch):
    """A failure while rendering or at the final rename leaves the old file as it was and no temporary file."""
    import importlib
    import os

    D = importlib.import_module("interp.reports._dictionary")
    p = tmp_path / "d.html"
    p.write_text("old")
    tcs = random_transcoders(llama, 16)

    def boom(*a, **k):
        raise RuntimeError("render failed")

    with monkeypatch.context() as m:
        m.setattr(D, "_render", boom)
        with pytest.raises(RuntimeError):
            dictionary_page(llama, tcs, path=p, tokens=TEXTS, seq_len=32)
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["d.html"]

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "replace", no_rename)
        with pytest.raises(ExportError, match="d.html"):
            dictionary_page(llama, tcs, path=p, tokens=TEXTS, seq_len=32)
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["d.html"]
    dictionary_page(llama, tcs, path=p, tokens=TEXTS, seq_len=32)
    assert p.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_bad_input(llama, tmp_path):
    tcs = random_transcoders(llama, 16)
    with pytest.raises(ExportError, match=r"\.html"):
        dictionary_page(llama, tcs, path=tmp_path / "d.txt", tokens=TEXTS)
    with pytest.raises(ExportError, match="does not exist"):
        dictionary_page(llama, tcs, path=tmp_path / "no" / "d.html", tokens=TEXTS)
    with pytest.raises(ArgumentError, match="tokens="):
        dictionary_page(llama, tcs, path=tmp_path / "d.html")
    other = tiny_model("gpt2", n_layers=3)
    ev = evaluate_dictionary(other, random_transcoders(other, 8), tokens=torch.randint(4, 90, (2, 8)))
    with pytest.raises(ArgumentError, match="DictionaryEvaluation of model"):
        dictionary_page(llama, tcs, path=tmp_path / "d.html", evaluation=ev)
