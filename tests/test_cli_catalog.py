"""Every ``interp`` command × every catalog model, with the command's defaults: it runs, or it refuses with a typed
error before the model loads. The defaults of one model must not be applied to another (the IOI answer " Mary" /
" John" on the toy models, whose vocabulary has neither word, stopped ``interp report`` at step 3 of 10).

Each command runs in process (``interp.cli.main``) with only ``--out`` (and ``--no-static``: the PNG/SVG export is
the same code for every model and is tested with Chromium elsewhere); the toys and the encoder run here, the real
decoders are marked ``real`` and ``slow``. A refusal is listed once, with its reason, in :data:`REFUSED`.
"""

from __future__ import annotations

import json

import pytest

import interp
from interp import cli
from interp.models import list_models

COMMANDS = ("report", "circuits", "circuit")
#: (model, command) → why it is refused by design (the CLI says so before loading the model)
REFUSED = {
    ("minilm-l6", "circuit"): "an encoder has no logits: `interp circuit` scores edges by a logit metric",
}
REAL = {"smollm2-135m", "gemma3-270m"}


def _cases():
    for entry in list_models():
        marks = [pytest.mark.real, pytest.mark.slow] if entry.name in REAL else []
        for cmd in COMMANDS:
            yield pytest.param(entry.name, cmd, marks=marks, id=f"{entry.name}-{cmd}")


def test_every_refusal_names_a_catalog_model_and_a_command():
    names = {e.name for e in list_models()}
    assert {"smollm2-135m", "minilm-l6", "gemma3-270m", "toy-attn-only-1l", "toy-attn-only-2l"} <= names
    assert all(n in names and c in COMMANDS and why for (n, c), why in REFUSED.items())


@pytest.mark.slow
@pytest.mark.parametrize("name, cmd", list(_cases()))
def test_command_runs_with_its_defaults_or_refuses_before_loading(name, cmd, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    argv = [cmd, "--model", name, "--out", str(out), "-q"] + (["--no-static"] if cmd != "circuit" else [])
    if (name, cmd) in REFUSED:
        loaded: list[str] = []
        monkeypatch.setattr(cli, "_load", lambda n: loaded.append(n))
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "error:" in err and name in err and not loaded, err
        return
    assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
    assert (out / "index.html").is_file()
    if cmd == "report":
        r = json.loads((out / "results.json").read_text())
        example = interp.models.catalog_entry(name).example
        assert r["prompt"] == example.prompt
        if example.answer is not None:
            assert r["prediction"]["answer"]["token"].strip() == example.answer.strip()
            if name != "toy-attn-only-1l":  # one layer has no induction head: the others predict their answer
                assert r["prediction"]["answer"]["rank"] == 1, r["prediction"]
