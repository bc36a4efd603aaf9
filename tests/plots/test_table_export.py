"""A static export of a table figure shows every row (plotly clips a table to its height, so the figure
must be sized to its content), and the subtitle is not repeated."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.plots import Exporter, export, top_token_table
from plots_helpers import chromium_path, decode_png


@pytest.fixture(scope="module")
def exporter():
    if chromium_path() is None:
        pytest.fail("static export tests need Chromium (make test installs it; set BROWSER_PATH)")
    with Exporter(browser_path=chromium_path()) as ex:
        yield ex


def _row_bands(png: np.ndarray) -> int:
    """Number of table rows (header included) painted down the first column: runs of the cells' light
    blue-grey fill, separated by the white grid lines."""
    rgb = png[..., :3].astype(int)
    col = rgb[:, 166]  # a pixel column in the first column's right padding, where no text reaches
    fill = (np.abs(col - col.max(axis=0)).sum(axis=1) > 12) & (col.min(axis=1) > 200)  # tinted, not text
    runs, prev = [], False
    for y, f in enumerate(fill):
        if f and not prev:
            runs.append([y, y])
        elif f:
            runs[-1][1] = y
        prev = f
    return sum(1 for a, b in runs if b - a >= 10)


@pytest.mark.slow
@pytest.mark.parametrize("long_names", [False, True])
def test_static_table_shows_every_row(tmp_path, exporter, long_names):
    torch.manual_seed(0)
    M = torch.randn(40, 40)
    name = (lambda i: f" a rather long token string number {i}") if long_names else (lambda i: f" t{i}")
    ids = list(range(0, 40, 3))  # 14 rows
    fig = top_token_table(M, ids, k=5, decode=name, label="L0.H0 full OV")
    png = decode_png(export(fig, tmp_path / "t.png", exporter=exporter).read_bytes())
    assert _row_bands(png) == len(ids) + 1  # header + every row, none clipped


def test_subtitle_once():
    fig = top_token_table(torch.eye(6), [0, 1, 2], k=2, label="L0.H0 full OV")
    assert fig.layout.title.text.count("restricted to") == 1


def test_partial_utf8_tokens_read_as_escaped_bytes():
    from interp.models.internal import readable_token

    class ByteLevel:  # a byte-level BPE tokenizer's two views of a token (as GPT-2/SmolLM2 give them)
        pieces = {0: "âĢ", 1: "Ġthe", 2: "âĢĻ"}

        def decode(self, ids):
            raw = bytes(_bytes(self.pieces[ids[0]]))
            return raw.decode("utf-8", errors="replace")

        def convert_ids_to_tokens(self, i):
            return self.pieces[i]

    def _bytes(piece):
        from transformers.convert_slow_tokenizer import bytes_to_unicode  # the reference table

        inv = {c: b for b, c in bytes_to_unicode().items()}
        return [inv[c] for c in piece]

    tok = ByteLevel()
    assert readable_token(tok, 0) == "\\xe2\\x80"  # half a curly quote: its bytes, not U+FFFD
    assert readable_token(tok, 1) == " the"
    assert readable_token(tok, 2) == "\u2019"  # a whole character decodes normally


def test_closure_error_says_absolute_and_relative():
    from interp import attribute_logits, trace
    from interp.plots import attribution_heatmap, attribution_waterfall, decomposition_figure, residual_stream_figure
    from tiny_models import tiny_model

    model = tiny_model("gpt2")
    attr = attribute_logits(model, "a b c d", answer=5, wrong=7)
    for fig in (attribution_heatmap(attr), attribution_waterfall(attr)):
        assert "absolute (|Σ terms − total|)" in fig.layout.title.text
    assert f"{attr.relative_error:.1e} relative" in attribution_heatmap(attr).layout.title.text
    tr = trace(model, "a b c d")
    assert "absolute" in residual_stream_figure(tr).layout.title.text
    assert "relative" in decomposition_figure(tr.decompose("unembed")).layout.title.text


@pytest.mark.slow
def test_one_copying_number_per_head(tmp_path):
    """The eigenvalue figure of a full OV circuit shows the copying score; of W_V W_O it says it is not."""
    import json

    from interp import copying_scores, ov_circuit
    from interp.plots import ov_eigenvalue_figure
    from interp.reports import report
    from tiny_models import tiny_model

    model = tiny_model("llama")
    cs = copying_scores(model)
    full = ov_circuit(model, 1, 2, full=True)
    dense = torch.linalg.eigvals(full.AB.double())  # independent: eigenvalues of the vocab² matrix
    ratio = float(dense.real.sum() / dense.abs().sum())
    title = ov_eigenvalue_figure(full).layout.title.text
    assert "copying score" in title and f"{ratio:.3f}" in title
    assert float(cs.scores[1, 2]) == pytest.approx(ratio, abs=1e-4)
    assert "not the copying score" in ov_eigenvalue_figure(ov_circuit(model, 1, 2)).layout.title.text
    out = report(model, "w1 w2 w3 w1", answer="w2", out_dir=tmp_path / "r", static=False)
    r = json.loads((out.parent / "results.json").read_text())
    head = r["ov_top_head"]["head"]
    l, h = (int(x) for x in head[1:].split(".H"))
    assert r["ov_top_head"]["eigenvalue_ratio"] == pytest.approx(float(cs.scores[l, h]), abs=1e-4)
