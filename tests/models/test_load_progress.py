"""A first load reports every step: one bar naming the step under way (shown by default only when the load builds a
cache entry) and a log record per step with its time. A local ``.gguf`` stands in for a catalog GGUF, its
dequantizer replaced by a tiny random Llama (the steps are the same; only their durations differ)."""

from __future__ import annotations

import logging

import pytest

import interp
from interp.models import _gguf
from interp.models.internal import load_step
from tests.tiny_models import tiny_hf_model, tiny_tokenizer

FIRST = [
    "hash the GGUF (its cache key)",
    "verify the cache entry",
    "read the GGUF (stand-in)",
    "write the cache entry (safetensors, tokenizer)",
    "hash the cache entry (sha256)",
    "load the Hugging Face model",
    "import transformer-lens",
    "read the weights",
    "boot the transformer-lens bridge",
    "self-check interp's forward against the model's own",
]
CACHED = [
    s
    for s in FIRST
    if s
    not in (
        "read the GGUF (stand-in)",
        "write the cache entry (safetensors, tokenizer)",
        "hash the cache entry (sha256)",
    )
]


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF stand-in")  # keyed by its size and sha256 like any GGUF

    def read(gguf, dtype):  # the real reader times "dequantize the GGUF's weights" and "convert the GGUF's tokenizer"
        with load_step("read the GGUF (stand-in)"):
            return tiny_hf_model("llama"), tiny_tokenizer()

    monkeypatch.setattr(_gguf, "_read_gguf", read)
    return path


def _load(path, cache, caplog, capsys, **kw):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="interp.models"):
        model = interp.load_model(str(path), cache_dir=cache, **kw)
    steps = [(r.step, r.seconds) for r in caplog.records if hasattr(r, "step")]
    return model, steps, capsys.readouterr().err


@pytest.mark.slow
def test_first_load_reports_every_step_then_a_cached_load_is_quiet(fake_gguf, tmp_path, caplog, capsys):
    cache = tmp_path / "cache"
    model, steps, err = _load(fake_gguf, cache, caplog, capsys)
    assert [s for s, _ in steps] == FIRST
    assert all(sec >= 0 for _, sec in steps)
    assert "load_model" in err and "read the GGUF (stand-in)" in err and "self-check" in err  # the bar, by default
    assert isinstance(model, interp.Model)

    _, steps, err = _load(fake_gguf, cache, caplog, capsys)  # cached: the same log, no bar unless asked
    assert [s for s, _ in steps] == CACHED
    assert "load_model" not in err
    _, _, err = _load(fake_gguf, cache, caplog, capsys, progress=True)
    assert "load_model" in err and "boot the transformer-lens bridge" in err


def test_progress_false_shows_no_bar_even_for_a_first_load(fake_gguf, tmp_path, caplog, capsys):
    _, steps, err = _load(fake_gguf, tmp_path / "cache", caplog, capsys, progress=False)
    assert [s for s, _ in steps] == FIRST and "load_model" not in err


def test_progress_must_be_a_bool_or_none(fake_gguf, tmp_path):
    with pytest.raises(interp.InterpError, match=r"progress='yes' must be True, False or None"):
        interp.load_model(str(fake_gguf), cache_dir=tmp_path, progress="yes")
