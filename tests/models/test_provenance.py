"""Models say what their weights are (a quantized release, dequantized; a cast), and reports record it."""

from __future__ import annotations

import json

import pytest
import torch

import interp
from interp.reports import report
from tiny_models import tiny_hf_model, tiny_tokenizer


def test_catalog_says_smollm2_is_the_quantized_release():
    entry = {e.name: e for e in interp.list_models()}["smollm2-135m"]
    assert "Q4_1" in entry.provenance and "dequantized to float32" in entry.provenance
    assert all(e.provenance for e in interp.list_models())


@pytest.mark.slow
def test_loaded_models_carry_provenance_and_the_cast(tmp_path):
    d = tmp_path / "tiny"
    tiny_hf_model("gpt2").save_pretrained(d)
    tiny_tokenizer().save_pretrained(d)
    m32 = interp.load_model(str(d))
    m64 = interp.load_model(str(d), dtype=torch.float64)
    assert str(d) in m32.provenance and "cast" not in m32.provenance
    assert m64.provenance.endswith("cast to float64")
    out = report(m32, "w1 w2 w3", answer="w2", out_dir=tmp_path / "rep", static=False)
    card = json.loads((out.parent / "results.json").read_text())["model"]
    assert card["weights"] == m32.provenance
    assert m32.provenance in out.read_text()


@pytest.mark.real
def test_smollm2_model_records_quantization():
    m = interp.load_model("smollm2-135m")
    assert m.provenance.startswith("the Q4_1-quantized GGUF release")
