"""The ``interp`` console script, run through its installed entry point (subprocess)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plots_helpers import PNG_SIGNATURE, chromium_path, external_resources
from tiny_models import tiny_hf_dir

INTERP = Path(sys.executable).parent / "interp"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def run(*args, timeout=600):
    return subprocess.run([str(INTERP), *args], capture_output=True, text=True, timeout=timeout, env=ENV)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny GPT-2 saved as a local Hugging Face folder, loadable by name from the CLI."""
    return tiny_hf_dir("gpt2", tmp_path_factory.mktemp("tiny-gpt2-hf"))


def test_entry_point_is_installed():
    assert INTERP.is_file(), f"console script missing at {INTERP}; pip install -e . declares interp = interp.cli:main"


@pytest.mark.parametrize(
    "cmd, expect",
    [
        ([], ["models", "report", "circuits"]),
        (["models"], ["--json"]),
        (["report"], ["--model", "--prompt", "--answer", "--wrong", "--out", "smollm2-135m", "Mary"]),
        (["circuits"], ["--model", "--out", "--max-edges"]),
    ],
)
def test_help_for_every_command(cmd, expect):
    p = run(*cmd, "--help")
    assert p.returncode == 0, p.stderr
    for word in expect:
        assert word in p.stdout


@pytest.mark.slow
def test_models_lists_the_catalog_with_availability():
    p = run("models")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:4] == ["name", "family", "params", "available"]
    names = {line.split()[0] for line in lines[2:]}
    assert {"smollm2-135m", "minilm-l6", "toy-attn-only-2l"} <= names
    j = json.loads(run("models", "--json").stdout)
    import interp

    assert {e["name"]: e["available"] for e in j} == {e.name: e.available for e in interp.list_models()}


@pytest.mark.slow
@pytest.mark.skipif(chromium_path() is None, reason="needs Chromium for the PNG/SVG figures")
def test_report_on_a_local_model_folder(tiny_dir, tmp_path):
    out = tmp_path / "rep"
    p = run(
        "report",
        "--model",
        str(tiny_dir),
        "--prompt",
        "w1 w2 w3 w1",
        "--answer",
        "w2",
        "--wrong",
        "w3",
        "--out",
        str(out),
        "--heads",
        "3",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == str(out / "index.html")
    assert external_resources((out / "index.html").read_text()) == []
    assert (out / "figures" / "attribution_heatmap.png").read_bytes()[:8] == PNG_SIGNATURE
    r = json.loads((out / "results.json").read_text())
    assert r["attribution"]["closure_error"] < 1e-4 and len(r["top_heads"]) == 3
    assert "report" in p.stderr  # progress on stderr


@pytest.mark.slow
def test_report_errors_exit_2_with_a_message_and_no_output(tiny_dir, tmp_path):
    out = tmp_path / "never"
    p = run(
        "report", "--model", str(tiny_dir), "--prompt", "w1 w2", "--answer", "w1 w2", "--out", str(out), "--no-static"
    )
    assert p.returncode == 2
    assert "single token" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()
    p = run("report", "--model", str(tmp_path / "no-such-model"), "--out", str(out))
    assert p.returncode == 2 and "no-such-model" in p.stderr and not out.exists()


@pytest.mark.slow
def test_report_without_answer_attributes_the_top_prediction_and_flags_go_anywhere(tiny_dir, tmp_path):
    """No --answer: the model's own top prediction; -q works after the subcommand too."""
    from interp import load_model

    out = tmp_path / "rep"
    p = run("report", "--model", str(tiny_dir), "--prompt", "w1 w2 w3 w1", "--out", str(out), "--no-static", "-q")
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == ""  # quiet: no progress
    r = json.loads((out / "results.json").read_text())
    model = load_model(str(tiny_dir))
    with __import__("torch").no_grad():
        logits = model.bridge(model.to_tokens("w1 w2 w3 w1"))[0, -1]
    top = int(logits.argmax())
    assert r["answer_source"] == "top prediction"
    assert r["prediction"]["answer"]["id"] == top and r["prediction"]["answer"]["rank"] == 1
    assert r["attribution"]["total"] == pytest.approx(float(logits[top]), abs=1e-4)
    assert (
        run(
            "-q", "report", "--model", str(tiny_dir), "--prompt", "w1", "--out", str(tmp_path / "r2"), "--no-static"
        ).returncode
        == 0
    )


@pytest.mark.slow
def test_report_corrupt_reaches_the_causal_effects(tiny_dir, tmp_path):
    """--corrupt: the effects section noises with that prompt (its baseline checked on the bridge)."""
    import torch

    from interp import load_model

    out = tmp_path / "rep"
    p = run(
        "report",
        "--model",
        str(tiny_dir),
        "--prompt",
        "w1 w2 w3 w1",
        "--answer",
        "w2",
        "--wrong",
        "w3",
        "--corrupt",
        "w4 w5 w3 w4",
        "--out",
        str(out),
        "--no-static",
        "-q",
    )
    assert p.returncode == 0, p.stderr
    e = json.loads((out / "results.json").read_text())["effects"]
    assert e["ablation"] == "corrupt" and e["corrupt_prompt"] == "w4 w5 w3 w4"
    model = load_model(str(tiny_dir))
    a, w = model.tokenizer.convert_tokens_to_ids(["w2", "w3"])
    with torch.no_grad():
        lk = model.bridge(model.to_tokens("w4 w5 w3 w4"))[0, -1]
    assert e["corrupt"] == pytest.approx(float(lk[a] - lk[w]), abs=1e-4)
    assert "Causal effects: total vs direct effect per head" in (out / "index.html").read_text()


@pytest.mark.slow
def test_report_corrupt_errors_exit_2(tiny_dir, tmp_path):
    out = tmp_path / "never"
    p = run(
        "report",
        "--model",
        str(tiny_dir),
        "--prompt",
        "w1 w2 w3 w1",
        "--corrupt",
        "w4 w5",
        "--out",
        str(out),
        "--no-static",
        "-q",
    )
    assert p.returncode == 2 and "corrupt=" in p.stderr and "Traceback" not in p.stderr
    p = run(
        "report",
        "--model",
        str(tiny_dir),
        "--prompt",
        "w1 w2",
        "--prompt",
        "w3 w1",
        "--corrupt",
        "w4 w5",
        "--out",
        str(out),
        "--no-static",
        "-q",
    )
    assert p.returncode == 2 and "--corrupt: 1 corrupt prompt(s) for 2 prompts" in p.stderr
    assert not out.exists()


@pytest.mark.slow
def test_report_of_several_prompts_writes_one_report_each_and_an_index(tiny_dir, tmp_path):
    out = tmp_path / "many"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w1 w2 w3\n\nw2 w3 w1 w2\n")
    p = run(
        "report",
        "--model",
        str(tiny_dir),
        "--prompt",
        "w3 w3",
        "--prompts-file",
        str(prompts),
        "--answer",
        "w2",
        "--out",
        str(out),
        "--no-static",
        "-q",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == str(out / "index.html")
    got = [json.loads((out / f"prompt-{i:02d}" / "results.json").read_text())["prompt"] for i in (1, 2, 3)]
    assert got == ["w3 w3", "w1 w2 w3", "w2 w3 w1 w2"]
    index = (out / "index.html").read_text()
    for i in (1, 2, 3):
        assert f'href="prompt-{i:02d}/index.html"' in index
    assert external_resources(index) == [] and "plotly" not in index.lower()


@pytest.mark.slow
def test_circuits_command_writes_pages(tiny_dir, tmp_path):
    out = tmp_path / "circ"
    p = run("circuits", "--model", str(tiny_dir), "--out", str(out), "--max-edges", "4", "--no-static")
    assert p.returncode == 0, p.stderr
    g = json.loads((out / "composition.json").read_text())
    assert len(g["edges"]) == 12 and (out / "index.html").is_file()


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.skipif(chromium_path() is None, reason="needs Chromium for the PNG/SVG figures")
def test_default_report_on_smollm2_is_meaningful(tmp_path):
    """`interp report` with no options: IOI prompt on smollm2-135m; the model predicts ' Mary'."""
    out = tmp_path / "report"
    p = subprocess.run(
        [str(INTERP), "report", "--out", str(out)], capture_output=True, text=True, timeout=1800, env=ENV, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    assert r["model"]["name"] == "smollm2-135m"
    assert r["prompt"] == "When John and Mary went to the shops, John gave the bag to"
    assert r["prediction"]["top"][0]["token"] == " Mary" and r["prediction"]["answer"]["rank"] == 1
    a = r["attribution"]
    assert a["target"] == "logit[' Mary'] − logit[' John']"
    assert a["closure_error"] <= 1e-4 * max(1.0, abs(a["total"]))
    assert a["total"] == pytest.approx(r["prediction"]["logit_diff"], abs=1e-3)
    assert len(r["copying_scores"]) == 30 and len(r["copying_scores"][0]) == 9
    figs = {f.name for f in (out / "figures").iterdir()}
    assert {
        "attribution_heatmap.png",
        "attribution_heatmap.svg",
        "residual_stream.png",
        "composition_graph.svg",
    } <= figs
    assert external_resources((out / "index.html").read_text()) == []
