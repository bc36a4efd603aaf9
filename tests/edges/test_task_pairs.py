"""Your own task: ``interp.Task.from_jsonl`` / ``interp circuit --pairs FILE`` (each record checked on load, errors
naming the line), and ``interp.Task(..., model=)`` checking token lengths when it is built. Token lengths and ids are
checked against the Hugging Face tokenizer itself, the metric against the plain HF model's logits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

import interp
from interp.cli import main
from interp.errors import ArgumentError, ShapeError
from tiny_models import tiny_hf_dir, tiny_hf_model, tiny_model, tiny_tokenizer

PAIRS = [
    {"clean": "w1 w2 w3 w4 w1", "corrupt": "w1 w2 w3 w4 w9", "answer": "w2", "wrong": "w3"},
    {"clean": "w5 w6 w7 w8 w5", "corrupt": "w5 w6 w7 w8 w10", "answer": "w6", "wrong": 9},
    {
        "clean": "w11 w12 w13 w14 w11",
        "corrupt": "w11 w12 w13 w14 w15",
        "answer": "w12",
        "wrong": "w16",
        "metric": "logit_diff",
    },
]


def _write(path, records, raw_lines=()):
    lines = [json.dumps(r) for r in records] + list(raw_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def test_from_jsonl_loads_every_pair(llama, tmp_path):
    p = _write(
        tmp_path / "mine.jsonl", PAIRS[:2] + [{}][:0], raw_lines=["", json.dumps(PAIRS[2])]
    )  # blank line skipped
    t = interp.Task.from_jsonl(p, llama)
    assert t.name == "mine" and t.n == 3 and t.metric_name == "logit_diff"
    assert t.clean == [r["clean"] for r in PAIRS] and t.corrupt == [r["corrupt"] for r in PAIRS]
    assert t.answer == ["w2", "w6", "w12"] and t.wrong == ["w3", 9, "w16"]
    assert isinstance(t.metric, interp.LogitDiff)


def test_from_jsonl_metric_equals_hf_logit_difference(llama, tmp_path):
    """The loaded task's metric, run by an analysis (patch with no nodes changed = the clean metric), equals the
    logit difference of the plain HF model on the tokenizer's own ids."""
    t = interp.Task.from_jsonl(_write(tmp_path / "m.jsonl", PAIRS), llama)
    hf, tok = tiny_hf_model("llama"), tiny_tokenizer()
    want = []
    for r in PAIRS:
        ids = torch.tensor([[tok.bos_token_id] + tok(r["clean"], add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logits = hf(ids).logits[0, -1].double()
        a = tok.convert_tokens_to_ids(r["answer"])
        w = r["wrong"] if isinstance(r["wrong"], int) else tok.convert_tokens_to_ids(r["wrong"])
        want.append(float(logits[a] - logits[w]))
    res = interp.patch(llama, t.clean, t.corrupt, metric=t.metric, nodes=["L0.H0"], progress=False)
    assert res.clean == pytest.approx(float(np.mean(want)), abs=1e-4)  # the mean over prompts


def test_from_jsonl_names_the_bad_line(llama, tmp_path):
    tok = tiny_tokenizer()
    # unequal token lengths, by the tokenizer itself: line 2
    bad = dict(PAIRS[1], corrupt="w5 w6 w7 w8")
    assert len(tok(bad["clean"])["input_ids"]) != len(tok(bad["corrupt"])["input_ids"])
    with pytest.raises(ArgumentError, match=r"line 2: clean has 6 tokens but corrupt has 5"):
        interp.Task.from_jsonl(_write(tmp_path / "a.jsonl", [PAIRS[0], bad, PAIRS[2]]), llama)
    with pytest.raises(ArgumentError, match=r"line 3: missing key\(s\) \['wrong'\]"):
        interp.Task.from_jsonl(
            _write(tmp_path / "b.jsonl", [PAIRS[0], PAIRS[1], {k: v for k, v in PAIRS[2].items() if k != "wrong"}]),
            llama,
        )
    with pytest.raises(ArgumentError, match=r"line 2: not valid JSON"):
        interp.Task.from_jsonl(_write(tmp_path / "c.jsonl", [PAIRS[0]], raw_lines=['{"clean": "w1"']), llama)
    with pytest.raises(ArgumentError, match=r"line 1: unknown key\(s\) \['answr'\]"):
        interp.Task.from_jsonl(_write(tmp_path / "d.jsonl", [dict(PAIRS[0], answr="w1")]), llama)
    with pytest.raises(ArgumentError, match=r"line 1: metric='kl' is not a task metric"):
        interp.Task.from_jsonl(_write(tmp_path / "e.jsonl", [dict(PAIRS[0], metric="kl")]), llama)
    with pytest.raises(ArgumentError, match=r"line 2: metric='logprob' but line 1 gives metric='logit_diff'"):
        interp.Task.from_jsonl(
            _write(tmp_path / "f.jsonl", [dict(PAIRS[0], metric="logit_diff"), dict(PAIRS[1], metric="logprob")]), llama
        )
    with pytest.raises(ArgumentError, match=r"line 1: clean=3 must be a non-empty string"):
        interp.Task.from_jsonl(_write(tmp_path / "g.jsonl", [dict(PAIRS[0], clean=3)]), llama)
    with pytest.raises(ArgumentError, match="holds no pairs"):
        interp.Task.from_jsonl(_write(tmp_path / "h.jsonl", [], raw_lines=["", "  "]), llama)
    with pytest.raises(ArgumentError, match="cannot be read"):
        interp.Task.from_jsonl(tmp_path / "missing.jsonl", llama)
    with pytest.raises(ArgumentError, match="multi_token='all'"):
        interp.Task.from_jsonl(tmp_path / "a.jsonl", llama, multi_token="all")
    with pytest.raises(ArgumentError, match=r"line 1: wrong=100 is not an output token id"):
        interp.Task.from_jsonl(_write(tmp_path / "i.jsonl", [dict(PAIRS[0], wrong=100)]), llama)


def test_multi_token_answers(llama, tmp_path):
    tok = tiny_tokenizer()
    p = _write(tmp_path / "multi.jsonl", [PAIRS[0], dict(PAIRS[1], answer="w6 w7")])
    assert len(tok("w6 w7", add_special_tokens=False)["input_ids"]) == 2
    with pytest.raises(ArgumentError, match=r"line 2: answer='w6 w7' is 2 tokens .*multi_token='first'"):
        interp.Task.from_jsonl(p, llama)
    t = interp.Task.from_jsonl(p, llama, multi_token="first", name="firsts")
    assert t.name == "firsts" and t.answer[1] == tok("w6 w7", add_special_tokens=False)["input_ids"][0]


def test_other_task_metrics_read_the_answer(llama, tmp_path):
    t = interp.Task.from_jsonl(_write(tmp_path / "lp.jsonl", [dict(r, metric="logprob") for r in PAIRS]), llama)
    assert isinstance(t.metric, interp.LogProb) and t.metric_name == "logprob"
    with pytest.raises(ArgumentError, match="metric_name='nope'"):
        interp.Task("x", ["w1"], ["w2"], ["w3"], ["w4"], metric_name="nope")


def test_task_checks_token_lengths_when_built(llama):
    tok = tiny_tokenizer()
    clean, corrupt = ["w1 w2 w3", "w4 w5 w6"], ["w1 w9 w3", "w4 w5"]
    assert len(tok(clean[1])["input_ids"]) != len(tok(corrupt[1])["input_ids"])
    with pytest.raises(ShapeError, match="corrupt prompt 1 has 3 tokens but clean prompt 1 has 4"):
        interp.Task("mine", clean, corrupt, ["w2", "w5"], ["w3", "w6"], model=llama)
    with pytest.raises(ArgumentError, match=r"wrong\[0\]='w3 w4' must be a single token"):
        interp.Task("mine", clean, ["w1 w9 w3", "w4 w5 w7"], ["w2", "w5"], ["w3 w4", "w6"], model=llama)
    t = interp.Task("mine", clean, ["w1 w9 w3", "w4 w5 w7"], ["w2", "w5"], ["w3", "w6"], model=llama)
    assert t.n == 2 and t.head(1).n == 1
    # token ids need no model: their shapes are compared when built
    with pytest.raises(ArgumentError, match=r"clean has shape \(2, 4\) but corrupt has \(2, 3\)"):
        interp.Task("ids", torch.ones(2, 4, dtype=torch.long), torch.ones(2, 3, dtype=torch.long), [5, 6], [7, 8])


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_hf_dir("llama", tmp_path_factory.mktemp("tiny-llama-hf"))


@pytest.mark.slow
def test_cli_pairs(tiny_dir, tmp_path, capsys):
    p = _write(tmp_path / "capitals.jsonl", PAIRS)
    out = tmp_path / "c"
    assert (
        main(
            [
                "circuit",
                "--model",
                str(tiny_dir),
                "--pairs",
                str(p),
                "--method",
                "eap",
                "--exact",
                "3",
                "--ablations",
                "zero",
                "--sizes",
                "0.5,1",
                "--out",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().endswith("index.html")
    r = json.loads((out / "results.json").read_text())
    assert r["task"] == "capitals" and r["n_prompts"] == 3
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    tok = tiny_tokenizer()
    want = []
    for rec in PAIRS:
        ids = torch.tensor([[tok.bos_token_id] + tok(rec["clean"], add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logits = hf(ids).logits[0, -1].double()
        w = rec["wrong"] if isinstance(rec["wrong"], int) else tok.convert_tokens_to_ids(rec["wrong"])
        want.append(float(logits[tok.convert_tokens_to_ids(rec["answer"])] - logits[w]))
    e = json.loads((out / "edges.json").read_text())
    assert e["clean"] == pytest.approx(float(np.mean(want)), abs=1e-4)


def test_cli_pairs_errors(tiny_dir, tmp_path, capsys):
    assert main(["circuit", "--model", str(tiny_dir), "--task", "capitals", "--out", str(tmp_path / "x"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "--task='capitals' is not a shipped task" in err and "--pairs FILE" in err
    p = _write(tmp_path / "bad.jsonl", [PAIRS[0], dict(PAIRS[1], corrupt="w5 w6")])
    assert main(["circuit", "--model", str(tiny_dir), "--pairs", str(p), "--out", str(tmp_path / "y"), "-q"]) == 2
    assert "bad.jsonl, line 2: clean has" in capsys.readouterr().err
    assert (
        main(
            [
                "circuit",
                "--model",
                str(tiny_dir),
                "--pairs",
                str(p),
                "--task",
                "ioi",
                "--out",
                str(tmp_path / "z"),
                "-q",
            ]
        )
        == 2
    )
    assert "give one of them" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_from_jsonl_one_metric_for_every_line(llama, tmp_path):
    """A metric given on one line only is an error naming both lines, not silently every line's metric: line 1
    without "metric" is a logit difference, line 2's "logprob" disagrees with it (and the other way round)."""
    p = _write(tmp_path / "mixed.jsonl", [PAIRS[0], dict(PAIRS[1], metric="logprob")])
    with pytest.raises(
        ArgumentError,
        match=r"mixed.jsonl, line 2: metric='logprob' but line 1 gives no metric "
        r"\(the default 'logit_diff'\); a task has one metric",
    ):
        interp.Task.from_jsonl(p, llama)
    p = _write(tmp_path / "mixed2.jsonl", [dict(PAIRS[0], metric="prob"), PAIRS[1]])
    with pytest.raises(
        ArgumentError,
        match=r"line 2: no metric \(the default 'logit_diff'\) but line 1 gives "
        r"metric='prob'",
    ):
        interp.Task.from_jsonl(p, llama)
    # the same metric on every line, or on none: one metric
    assert (
        interp.Task.from_jsonl(
            _write(tmp_path / "lp.jsonl", [dict(r, metric="prob") for r in PAIRS]), llama
        ).metric_name
        == "prob"
    )
    assert isinstance(
        interp.Task.from_jsonl(_write(tmp_path / "none.jsonl", PAIRS[:2]), llama).metric, interp.LogitDiff
    )


def test_cli_pairs_checked_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """Everything that needs no model (the pairs file's JSON, keys, types and metric, the other flags) is checked
    before the model is loaded: a bad file fails at once, with a model name that would be slow to load."""
    import interp.cli as cli
    import interp.models as models

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the pairs file was checked")

    monkeypatch.setattr(cli, "_load", no_load)
    monkeypatch.setattr(models, "load_model_unchecked", no_load)
    bad = _write(tmp_path / "bad.jsonl", [PAIRS[0]], raw_lines=['{"clean": "w1"'])
    assert main(["circuit", "--model", "smollm2-135m", "--pairs", str(bad), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "bad.jsonl, line 2: not valid JSON" in capsys.readouterr().err
    mixed = _write(tmp_path / "mixed.jsonl", [PAIRS[0], dict(PAIRS[1], metric="logprob")])
    assert main(["circuit", "--model", "smollm2-135m", "--pairs", str(mixed), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "line 2: metric='logprob' but line 1" in capsys.readouterr().err
    good = _write(tmp_path / "good.jsonl", PAIRS)
    for flags, says in (
        (["--ablations", "zero,nope"], "--ablations"),
        (["--sizes", "0.5,2"], "--sizes"),
        (["--ig-steps", "0"], "--ig-steps"),
        (["--max-edges", "0"], "--max-edges"),
        (["--exact", "-1"], "--exact"),
        (["--prompts", "0"], "--prompts"),
    ):
        assert (
            main(
                ["circuit", "--model", "smollm2-135m", "--pairs", str(good), "--out", str(tmp_path / "o"), "-q", *flags]
            )
            == 2
        )
        assert says in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
