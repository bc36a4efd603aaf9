"""Gemma Scope 2's cross-layer transcoders (its ``JumpReLUMultiLayerSAE``: per layer i
``params_layer_{i}.safetensors`` with ``w_enc`` [d, F], ``b_enc``, ``threshold``, ``b_dec``, ``w_dec`` [F, L, d]) are
recognised and refused: circuit-tracer loads them with ``feature_input_hook="hook_resid_mid"`` — the stream before
each MLP's norm — while interp's cross-layer transcoders read the MLP's input, so reading them as interp's would give
wrong features. A per-layer file in the same names (``w_dec`` [F, d]) is not taken for one.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from interp.engine import model_from_hf
from interp.errors import InterpError, UnsupportedOperationError
from interp.features import load_transcoders
from tiny_models import tiny_hf_model, tiny_tokenizer

L, F = 3, 10


@pytest.fixture(scope="module")
def llama():
    hf = tiny_hf_model("llama", n_layers=L, dtype=torch.float64)
    return model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-3", dtype=torch.float64)


def _write(folder, d: int, stem: str, *, w_dec_shape) -> None:
    folder.mkdir()
    g = torch.Generator().manual_seed(0)
    for i in range(L):
        p = {
            "w_enc": torch.randn(d, F, generator=g),
            "b_enc": torch.zeros(F),
            "threshold": torch.ones(F),
            "b_dec": torch.zeros(d),
            "w_dec": torch.randn(*w_dec_shape, generator=g),
        }
        save_file(p, str(folder / f"{stem}{i}.safetensors"))


@pytest.mark.parametrize("stem", ["params_layer_", "layer_"])
def test_gemma_scope_2_clts_are_refused_naming_their_read_point(llama, tmp_path, stem):
    d = llama.arch.d_model
    _write(tmp_path / "clt", d, stem, w_dec_shape=(F, L, d))
    with pytest.raises(UnsupportedOperationError, match=r"Gemma Scope 2 cross-layer transcoders.*hook_resid_mid"):
        load_transcoders(tmp_path / "clt", llama)


def test_a_per_layer_file_of_the_same_names_is_not_taken_for_a_clt(llama, tmp_path):
    d = llama.arch.d_model
    _write(tmp_path / "plt", d, "params_layer_", w_dec_shape=(F, d))
    with pytest.raises(InterpError) as err:
        load_transcoders(tmp_path / "plt", llama)
    assert "Gemma Scope 2 cross-layer" not in str(err.value)
