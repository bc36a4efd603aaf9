"""load_transcoders on dictionaries written by SAELens's, sparsify's and circuit-tracer's own save functions.

The fixtures (fixtures/dictionaries/, written by scripts/sidenv/make_dictionary_fixtures.py in side environments
with sae-lens 6.54.12, eai-sparsify 1.3.3 and circuit-tracer 0.5.0; Gemma Scope 2's keys read back by
circuit-tracer's loader) hold, beside each dictionary, an input x and
what the library's own code computed from it: its feature activations and its output (skip term included).
interp's loaded Transcoder must give the same numbers; residual SAEs and bad inputs are refused with typed errors.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from interp.errors import ArgumentError, ResultFormatError, ShapeError, UnsupportedOperationError
from interp.features import attribution_graph, load_transcoders
from tiny_models import tiny_model

FIX = Path(__file__).parent / "fixtures" / "dictionaries"
CASES = {  # fixture → (activation, skip, per-layer folders with expected.safetensors)
    "saelens_relu": ("relu", False, ["layer_0", "layer_1"]),
    "saelens_skip": ("relu", True, ["layer_0", "layer_1"]),
    "saelens_jumprelu": ("jumprelu", False, ["layer_0", "layer_1"]),
    "sparsify": ("topk", False, ["layers.0.mlp", "layers.1.mlp"]),
    "sparsify_skip": ("topk", True, ["layers.0.mlp", "layers.1.mlp"]),
}


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")  # d_model 32, 2 layers: the fixtures' shape


def _check(tc, exp):
    x = exp["x"]
    acts = tc.encode(x)
    assert torch.allclose(acts, exp["acts"], rtol=1e-5, atol=1e-6)
    assert int((acts != 0).sum()) > 0
    out = tc.decode(acts, x if tc.W_skip is not None else None)
    assert torch.allclose(out, exp["out"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_library_written_dictionaries(name, llama):
    act, skip, dirs = CASES[name]
    tcs = load_transcoders(FIX / name, llama)
    assert len(tcs) == 2
    for tc, d in zip(tcs, dirs):
        assert tc.activation == act and (tc.W_skip is not None) == skip
        _check(tc, load_file(str(FIX / name / d / "expected.safetensors")))
    assert load_transcoders(str(FIX / name))[1].n_features == 8  # without the model: same files, layer order


def test_one_saelens_folder_is_one_layer():
    (tc,) = load_transcoders(FIX / "saelens_jumprelu" / "layer_0")
    _check(tc, load_file(str(FIX / "saelens_jumprelu" / "layer_0" / "expected.safetensors")))


def test_circuit_tracer_written_transcoders(llama):
    tcs = load_transcoders(FIX / "circuit_tracer", llama)
    for l, tc in enumerate(tcs):
        assert tc.activation == "jumprelu" and tc.W_skip is not None
        _check(tc, load_file(str(FIX / "circuit_tracer" / f"expected_{l}.safetensors")))


def test_gemma_scope_2_keys(llama):
    """Gemma Scope 2's key names and layouts (w_enc [d, F], affine_skip_connection [d_in, d_out]); the expected
    numbers are those of circuit-tracer's own load_gemma_scope_2_transcoder on the same files."""
    tcs = load_transcoders(FIX / "gemma_scope_2", llama)
    for l, tc in enumerate(tcs):
        assert tc.activation == "jumprelu" and tc.W_skip is not None
        _check(tc, load_file(str(FIX / "gemma_scope_2" / f"expected_{l}.safetensors")))


def test_loaded_transcoders_build_a_closed_graph(llama):
    g = attribution_graph(llama, "w1 w2 w3 w4", load_transcoders(FIX / "sparsify_skip", llama))
    assert g.relative_error <= 1e-4


def test_residual_saes_are_refused():
    with pytest.raises(UnsupportedOperationError, match="standard.*not a.*transcoder"):
        load_transcoders(FIX / "saelens_resid_sae")
    with pytest.raises(UnsupportedOperationError, match="transcode: false"):
        load_transcoders(FIX / "sparsify_sae")


@pytest.mark.slow
def test_shapes_and_formats(llama, tmp_path):
    one = tiny_model("llama", n_layers=1)
    with pytest.raises(ShapeError, match="layers \\[1\\].*1 layers"):
        load_transcoders(FIX / "sparsify", one)
    part = tmp_path / "part"
    shutil.copytree(FIX / "saelens_relu" / "layer_1", part / "layer_1")
    # a set of some layers loads as such (it was a ShapeError with model=, a ResultFormatError "not 0..0" without);
    # an attribution graph still needs every layer and names the missing one
    for loaded in (load_transcoders(part, llama), load_transcoders(part)):
        assert [t.layer for t in loaded] == [1]
    with pytest.raises(ArgumentError, match="layers \\[0\\] are missing"):
        attribution_graph(llama, "w1 w2 w3", load_transcoders(part, llama))
    gpt = tiny_model("gpt2")
    big = tmp_path / "big"
    shutil.copytree(FIX / "saelens_relu", big)
    cfg = json.loads((big / "layer_0" / "cfg.json").read_text())
    cfg["metadata"]["hook_name"] = "blocks.0.hook_resid_pre"
    (big / "layer_0" / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedOperationError, match="hook_resid_pre.*SAE, not a transcoder"):
        load_transcoders(big, gpt)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(ResultFormatError, match="SAELens.*sparsify"):
        load_transcoders(tmp_path / "empty")
    with pytest.raises(ResultFormatError, match="not a directory.*nor a name"):
        load_transcoders("no-such-set", llama)
    clt = tmp_path / "clt"
    clt.mkdir()
    (clt / "config.yaml").write_text(
        "model_kind: cross_layer_transcoder\n"
    )  # read (tests/features/test_clt.py): files needed
    with pytest.raises(ResultFormatError, match="no W_enc_0.safetensors"):
        load_transcoders(clt)
    (clt / "config.yaml").write_text("model_kind: sparse_crosscoder\n")
    with pytest.raises(UnsupportedOperationError, match="model_kind='sparse_crosscoder'"):
        load_transcoders(clt)


def test_name_from_interp_cache(llama, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    dest = tmp_path / "transcoders" / llama.name / "mine"
    shutil.copytree(FIX / "circuit_tracer", dest)
    assert len(load_transcoders("mine", llama)) == 2
