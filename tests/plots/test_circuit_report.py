"""task_report() / ``interp circuit``: the files, numbers checked against independent computations (the
plain HF model's logits; the toy's induction heads found from attention patterns), a self-contained page
that draws in headless Chromium without touching the network, and typed errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import interp
from interp.causal import LogitDiff
from interp.cli import main
from interp.errors import ArgumentError
from interp.labels import Edge, parse
from interp.reports import task_report
from plots_helpers import TIME_NEWPLOT, chromium_path, external_resources, probe_in_chromium, render_in_chromium
from tiny_models import tiny_hf_model, tiny_model

needs_browser = pytest.mark.skipif(chromium_path() is None, reason="needs Chromium (apt-get install chromium)")

CLEAN = ["w1 w2 w3 w4 w1 w2", "w5 w6 w7 w8 w5 w6", "w9 w10 w11 w12 w9 w10"]
CORRUPT = ["w1 w2 w3 w4 w13 w14", "w5 w6 w7 w8 w15 w16", "w9 w10 w11 w12 w17 w18"]
ANSWER, WRONG = ["w3", "w7", "w11"], ["w4", "w8", "w12"]


@pytest.fixture(scope="module")
def llama_report(tmp_path_factory):
    """A GQA model (4 query heads, 2 KV heads) through the whole report, small curve grid."""
    m = tiny_model("llama")
    task = SimpleNamespace(
        name="tiny-induction", clean=CLEAN, corrupt=CORRUPT, metric=LogitDiff(answer=ANSWER, wrong=WRONG)
    )
    out = tmp_path_factory.mktemp("circuit") / "llama"
    index = task_report(
        m,
        task,
        out_dir=out,
        method="eap-ig",
        ig_steps=3,
        n_exact=6,
        max_edges=40,
        ablations=("zero", "resample"),
        sizes=(0.05, 0.2, 0.5, 1.0),
    )
    return m, out, index


@pytest.mark.slow
def test_files_and_edge_list(llama_report):
    m, out, index = llama_report
    assert index == out / "index.html"
    assert {p.name for p in out.iterdir()} == {"index.html", "edges.json", "faithfulness.json", "results.json"}
    e = json.loads((out / "edges.json").read_text())
    graph = interp.edges.circuit_graph(m)
    assert [x["edge"] for x in e["edges"]] == list(graph.edges) and e["n_edges"] == graph.n_edges
    for x in e["edges"]:
        lab = parse(x["edge"])
        assert isinstance(lab, Edge) and str(lab.writer) == x["writer"] and str(lab.reader) == x["reader"]
    exact = [x for x in e["edges"] if x["exact"] is not None]
    assert len(exact) == 6  # the six largest |scores| were patched exactly
    top6 = sorted(e["edges"], key=lambda x: -abs(x["score"]))[:6]
    assert {x["edge"] for x in exact} == {x["edge"] for x in top6}
    # EAP-IG completeness: the scores out of the token embedding add up to M(clean) − M(corrupt), up to the error
    s = sum(x["score"] for x in e["edges"] if x["writer"] == "embed")
    assert s == pytest.approx(e["completeness"], abs=1e-6)  # scores are float32
    assert abs(s - (e["clean"] - e["corrupt"])) == pytest.approx(e["completeness_error"], abs=1e-6)


def test_metric_values_match_the_hf_model(llama_report):
    m, out, _ = llama_report
    r = json.loads((out / "results.json").read_text())
    hf = tiny_hf_model("llama")
    tok = m.tokenizer.convert_tokens_to_ids

    def ld(prompts):
        vals = []
        for p, a, w in zip(prompts, ANSWER, WRONG):
            with torch.no_grad():
                logits = hf(m.to_tokens(p)).logits[0, -1].double()
            vals.append(float(logits[tok(a)] - logits[tok(w)]))
        return float(np.mean(vals))

    assert r["clean"] == pytest.approx(ld(CLEAN), abs=1e-4)
    assert r["corrupt"] == pytest.approx(ld(CORRUPT), abs=1e-4)
    f = json.loads((out / "faithfulness.json").read_text())
    at_one = [p["faithfulness"] for p in f["points"] if p["k"] == 1.0]
    assert at_one == pytest.approx([1.0, 1.0], abs=1e-4)  # every edge in: the clean run, whatever the ablation
    assert set(f["smallest_80"]) == {"zero", "resample"} and r["n_drawn"] == 40


def test_page_is_self_contained_small_and_carries_node_info(llama_report):
    _, out, index = llama_report
    html = index.read_text()
    assert index.stat().st_size <= 3_000_000
    assert external_resources(html) == []
    assert "interp-attention-view" in html  # the attention view of the top heads
    assert html.count('class="interp-figure"') == 2  # the circuit graph and the faithfulness curves


@pytest.mark.slow
@needs_browser
def test_page_draws_in_chromium_without_network(llama_report):
    _, _, index = llama_report
    r = probe_in_chromium(index.resolve().as_uri(), TIME_NEWPLOT)
    assert r["afterplot"] > r["start"] and r["traces"] >= 2
    _, urls = render_in_chromium(index.resolve().as_uri(), width=1200, height=1600)
    assert urls == []


def test_toy_induction_circuit_found_by_the_report(tmp_path):
    """The toy's previous-token head → induction head's k and induction head → logits are among the top edges
    (heads identified independently, from their attention patterns on repeated sequences)."""
    from interp.groundtruth import induction_circuit
    from interp.toy import repeated_tokens

    m = interp.load_model("toy-attn-only-2l")
    truth = induction_circuit(m)
    g = torch.Generator().manual_seed(0)
    n = 10
    seq = repeated_tokens(12, n, m.arch.d_vocab, generator=g)  # <bos> s s
    other = repeated_tokens(12, n, m.arch.d_vocab, generator=g)
    clean = seq[:, : 2 * n]  # <bos> s s[:n-1]: the next token is s[n-1]
    corrupt = torch.cat([seq[:, :1], other[:, 1 : n + 1], seq[:, n + 1 : 2 * n]], dim=1)  # first half replaced
    task = SimpleNamespace(
        name="toy-induction",
        clean=clean,
        corrupt=corrupt,
        metric=LogitDiff(answer=seq[:, 2 * n].tolist(), wrong=other[:, n].tolist()),
    )
    index = task_report(
        m, task, out_dir=tmp_path / "toy", method="eap", n_exact=4, max_edges=30, ablations=("zero",), sizes=(0.1, 1.0)
    )
    e = json.loads((tmp_path / "toy" / "edges.json").read_text())
    top = [x["edge"] for x in sorted(e["edges"], key=lambda x: -abs(x["score"]))[:12]]
    true_edges = {str(x) for x in truth.edges}
    k_comp = [x for x in true_edges if ".attn.k[" in x and x.split("→")[0].startswith("L")]
    to_logits = [x for x in true_edges if x.endswith("→unembed")]
    assert k_comp and to_logits
    assert any(x in top for x in k_comp), (top, k_comp)
    assert any(x in top for x in to_logits), (top, to_logits)
    assert index.stat().st_size <= 3_000_000


def test_bad_input(tmp_path):
    m = tiny_model("gpt2")
    with pytest.raises(ArgumentError, match="without"):
        task_report(m, object(), out_dir=tmp_path / "x")
    task = SimpleNamespace(clean=CLEAN, corrupt=CORRUPT, metric=LogitDiff(answer=ANSWER, wrong=WRONG))
    with pytest.raises(ArgumentError, match="method"):
        task_report(m, task, out_dir=tmp_path / "x", method="acdc")
    with pytest.raises(ArgumentError, match="max_edges"):
        task_report(m, task, out_dir=tmp_path / "x", max_edges=0)
    assert not (tmp_path / "x").exists()  # refused before writing anything


def test_cli_unknown_task_exits_2(capsys, tmp_path):
    assert (
        main(["circuit", "--model", "toy-attn-only-2l", "--task", "no-such-task", "--out", str(tmp_path / "c"), "-q"])
        == 2
    )
    assert "task" in capsys.readouterr().err


def test_cli_on_the_toy_with_a_shipped_task(tmp_path, capsys):
    out = tmp_path / "toy"
    assert (
        main(
            [
                "circuit",
                "--model",
                "toy-attn-only-2l",
                "--task",
                "induction",
                "--prompts",
                "6",
                "--method",
                "eap",
                "--exact",
                "3",
                "--ablations",
                "zero,resample",
                "--sizes",
                "0.1,1",
                "--out",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().endswith("index.html")
    r = json.loads((out / "results.json").read_text())
    assert r["task"] == "induction" and r["n_prompts"] == 6 and set(r["cpr"]) == {"zero", "resample"}
    assert r["n_edges"] == interp.edges.circuit_graph(interp.load_model("toy-attn-only-2l")).n_edges
    assert (
        main(
            [
                "circuit",
                "--model",
                "toy-attn-only-2l",
                "--task",
                "induction",
                "--sizes",
                "1,x",
                "--out",
                str(tmp_path / "bad"),
                "-q",
            ]
        )
        == 2
    )
    assert (
        main(
            [
                "circuit",
                "--model",
                "toy-attn-only-2l",
                "--task",
                "induction",
                "--ablations",
                "nope",
                "--out",
                str(tmp_path / "bad2"),
                "-q",
            ]
        )
        == 2
    )


@pytest.mark.real
@pytest.mark.slow
def test_smollm2_ioi_circuit_page(tmp_path):
    """``interp circuit`` on smollm2 IOI (kept small: 4 pairs, EAP, two curve points): the page stays under 3 MB,
    every one of the ~70,000 edges is listed, and M(clean) is the logit difference of the plain HF model."""
    out = tmp_path / "smol"
    assert (
        main(
            [
                "circuit",
                "--model",
                "smollm2-135m",
                "--task",
                "ioi",
                "--prompts",
                "4",
                "--method",
                "eap",
                "--exact",
                "5",
                "--max-edges",
                "2000",
                "--ablations",
                "resample",
                "--sizes",
                "0.05,1",
                "--out",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    index = out / "index.html"
    size = index.stat().st_size
    print(f"\nsmollm2 IOI circuit page: {size / 1e6:.2f} MB")
    assert size <= 3_000_000 and external_resources(index.read_text()) == []
    e = json.loads((out / "edges.json").read_text())
    m = interp.load_model("smollm2-135m")
    assert e["n_edges"] == interp.edges.circuit_graph(m).n_edges > 60_000
    task = interp.edges.load_task("ioi", m, n=4)
    vals = []
    for p, a, w in zip(task.clean, task.answer, task.wrong):
        with torch.no_grad():  # the model's own logits, from a plain forward of the HF module
            logits = m.bridge.original_model(m.to_tokens(p)).logits[0, -1].double()
        ai, wi = (t if isinstance(t, int) else m.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (a, w))
        vals.append(float(logits[ai] - logits[wi]))
    assert e["clean"] == pytest.approx(float(np.mean(vals)), abs=1e-3)


def test_node_information_has_its_own_progress(tmp_path, capsys):
    """The node-information step (direct logit attribution, attention, one OV circuit per head: minutes on a real
    model) shows its own progress: a bar of 2 + n_ov_heads steps that reaches its end."""
    m = tiny_model("llama")
    task = SimpleNamespace(name="tiny", clean=CLEAN, corrupt=CORRUPT, metric=LogitDiff(answer=ANSWER, wrong=WRONG))
    task_report(
        m,
        task,
        out_dir=tmp_path / "p",
        method="eap",
        n_exact=0,
        max_edges=40,
        n_ov_heads=3,
        ablations=("zero",),
        sizes=(0.5, 1.0),
        progress=True,
    )
    err = capsys.readouterr().err
    bars = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("node information")]
    assert bars and "5/5" in bars[-1], bars[-3:]  # 2 + 3 OV heads
    task_report(
        m,
        task,
        out_dir=tmp_path / "q",
        method="eap",
        n_exact=0,
        max_edges=40,
        n_ov_heads=3,
        ablations=("zero",),
        sizes=(0.5, 1.0),
        progress=False,
    )
    assert "node information" not in capsys.readouterr().err
