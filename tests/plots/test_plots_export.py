"""export(): every format is a valid file, HTML is self-contained, writes are atomic, errors are typed."""

import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import plotly.graph_objects as go
import pytest
import torch

from interp.errors import ArgumentError, ExportError, InterpError
from interp.circuits import composition_edges
from interp.plots import Exporter, export
from interp.plots import _export as export_module
from interp.stream import trace
from plots_helpers import PNG_SIGNATURE, chromium_path, external_resources, png_size
from tiny_models import tiny_model

needs_browser = pytest.mark.skipif(
    chromium_path() is None, reason="static export needs Chromium (apt-get install chromium)"
)


def _fig():
    f = go.Figure(
        go.Heatmap(z=[[1.0, -2.0], [0.5, 3.0]], x=["a", "b"], y=["c", "d"], hovertext=[["x", "y"], ["z", "w"]])
    )
    f.update_layout(width=320, height=240, title="tiny")
    return f


@pytest.fixture(scope="module")
def exporter():
    with Exporter() as ex:
        yield ex


def _listing(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


@pytest.mark.slow
@needs_browser
def test_static_formats_are_valid_files(tmp_path, exporter):
    f = _fig()
    png = exporter.export(f, tmp_path / "f.png")
    data = png.read_bytes()
    assert data[:8] == PNG_SIGNATURE and png_size(data) == (320, 240)
    png2 = export(f, tmp_path / "f2.png", exporter=exporter, scale=2)
    assert png_size(png2.read_bytes()) == (640, 480)
    svg = exporter.export(f, tmp_path / "f.svg")
    root = ET.fromstring(svg.read_bytes())
    assert root.tag.endswith("svg") and root.get("width") == "320"
    pdf = exporter.export(f, tmp_path / "f.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and b"%%EOF" in pdf[-64:]
    assert _listing(tmp_path) == {"f.png", "f2.png", "f.svg", "f.pdf"}  # no temp files left
    assert oct(os.stat(png).st_mode & 0o777) != oct(0o600)  # usual permissions, not mkstemp's


def test_html_is_self_contained_and_json_round_trips(tmp_path):
    f = _fig()
    html = export(f, tmp_path / "f.html").read_text()
    assert external_resources(html) == []  # no <script src>, <link href>, <img src>
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js inlined
    assert "cdn.plot.ly" not in html.split("<body>")[1][:2000]
    j = export(f, tmp_path / "f.json")
    back = go.Figure(json.loads(j.read_text()))
    assert list(back.data[0].z[1]) == [0.5, 3.0] and back.layout.title.text == "tiny"


def test_results_with_plot_and_graph_results(tmp_path):
    dec = trace(tiny_model("gpt2"), "w1 w2 w3").decompose("unembed")
    out = export(dec, tmp_path / "dec.json")
    fig = go.Figure(json.loads(out.read_text()))
    assert fig.data[0].type == "bar"
    g = composition_edges(torch.rand(2, 2, 2, 2), max_edges=3)
    j = json.loads(export(g, tmp_path / "graph.json").read_text())
    assert set(j) >= {"nodes", "edges"} and len(j["edges"]) == 3
    html = export(g, tmp_path / "graph.html").read_text()  # graph results also have .plot()
    assert external_resources(html) == []


def test_bad_suffix_and_unwritable_targets_raise_typed_errors_and_leave_no_file(tmp_path):
    f = _fig()
    with pytest.raises(ArgumentError, match=r"suffix '.gif'.*allowed"):
        export(f, tmp_path / "f.gif")
    with pytest.raises(ArgumentError, match="suffix"):
        export(f, tmp_path / "noext")
    with pytest.raises(ExportError, match="does not exist"):
        export(f, tmp_path / "missing" / "f.html")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ExportError, match="not a directory"):
        export(f, tmp_path / "afile" / "f.html")
    (tmp_path / "d.html").mkdir()
    with pytest.raises(ExportError, match="is a directory"):
        export(f, tmp_path / "d.html")
    with pytest.raises(ExportError, match="not writable|cannot write"):
        export(f, "/proc/interp-test-figure.html")  # not writable even as root
    assert _listing(tmp_path) == {"afile", "d.html"} and list((tmp_path / "d.html").iterdir()) == []
    assert not Path("/proc/interp-test-figure.html").exists()


def test_empty_results_are_refused(tmp_path):
    with pytest.raises(ArgumentError, match="empty"):
        export(go.Figure(), tmp_path / "e.html")
    with pytest.raises(ArgumentError, match="empty"):
        export(composition_edges(torch.full((2, 1, 2, 1), float("nan"))), tmp_path / "g.json")
    with pytest.raises(ArgumentError, match="expected a plotly Figure"):
        export(42, tmp_path / "x.png")
    assert list(tmp_path.iterdir()) == []


def test_too_large_for_static_export_suggests_html(tmp_path, monkeypatch):
    big = _fig().update_layout(width=20000, height=20000)
    with pytest.raises(ExportError, match=r"too large.*\.html"):
        export(big, tmp_path / "big.png")
    monkeypatch.setattr(export_module, "MAX_STATIC_JSON_BYTES", 1000)
    with pytest.raises(ExportError, match=r"too large.*\.html"):
        export(_fig(), tmp_path / "big.svg")
    assert list(tmp_path.iterdir()) == []
    export(big, tmp_path / "big.html")  # HTML has no such limit
    assert _listing(tmp_path) == {"big.html"}


def test_failed_render_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    class Broken(Exporter):
        def render(self, *a, **k):
            raise ExportError("renderer crashed")

    target = tmp_path / "f.png"
    target.write_bytes(b"old")
    with pytest.raises(ExportError, match="crashed"):
        export(_fig(), target, exporter=Broken())
    assert target.read_bytes() == b"old" and _listing(tmp_path) == {"f.png"}


def test_failure_while_writing_removes_the_temp_file(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_module.os, "replace", boom)
    with pytest.raises(ExportError, match="No space left"):
        export(_fig(), tmp_path / "f.html")
    assert list(tmp_path.iterdir()) == []


def test_missing_browser_error_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))
    with pytest.raises(ExportError) as e:
        export(_fig(), tmp_path / "f.png", exporter=Exporter())
    msg = str(e.value)
    assert "apt-get install chromium" in msg and "kaleido_get_chrome" in msg and "BROWSER_PATH" in msg
    assert isinstance(e.value, InterpError) and list(tmp_path.iterdir()) == []


@pytest.mark.slow
@needs_browser
def test_many_exports_reuse_one_browser_process(tmp_path):
    psutil = pytest.importorskip("psutil")
    me = psutil.Process()

    def browsers():
        return {p.pid for p in me.children(recursive=True) if "chrom" in p.name().lower()}

    def main_process(pids):  # the browser itself: the chromium process whose parent is not chromium
        return {p for p in pids if psutil.Process(p).ppid() not in pids}

    before = browsers()  # e.g. the module's shared exporter
    with Exporter() as ex:
        ex.export(_fig(), tmp_path / "0.png")
        mine = browsers() - before
        assert mine
        main = main_process(mine)
        for i in range(1, 5):
            ex.export(_fig(), tmp_path / f"{i}.{'svg' if i % 2 else 'png'}")
        # no process started after the first export, and the same browser still runs (a helper process of
        # chromium may exit on its own between exports: that is not a new browser)
        now = browsers() - before
        assert now <= mine and main and main <= now and ex.n_rendered == 5
    for _ in range(50):  # closed with the Exporter
        if not (browsers() & mine):
            break
        time.sleep(0.1)
    assert not (browsers() & mine)
