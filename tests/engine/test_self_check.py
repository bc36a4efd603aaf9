"""The load-time self-check (interp.engine.self_check): interp's forward of each family agrees with the
model's own on the probe, and a quirk of a checkpoint that interp does not model is refused, naming where."""

from __future__ import annotations

import pytest

import interp
from interp.engine import model_from_hf, self_check
from interp.errors import EngineMismatchError, UnsupportedArchitectureError
from tiny_models import FAMILIES, MORE_FAMILIES, tiny_hf_model, tiny_model, tiny_tokenizer


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
def test_every_family_passes_with_room(family):
    assert self_check(tiny_model(family)) < 1e-5


def test_toy_passes():
    assert self_check(interp.load_model("toy-attn-only-2l")) < 1e-5


def test_a_quirk_interp_does_not_model_is_refused_at_its_block():
    """A checkpoint whose block 0 MLP does something extra (its output doubled, as a custom module might):
    interp's forward, built from the weights, cannot know it, and loading refuses the model at block 1."""
    hf = tiny_hf_model("llama", n_layers=3)
    mlp = hf.model.layers[0].mlp
    plain = mlp.forward
    mlp.forward = lambda x: 2.0 * plain(x)
    with pytest.raises(EngineMismatchError, match="entering block 1") as info:
        model_from_hf(hf, tiny_tokenizer(), name="quirky")
    assert "relative" in str(info.value) and "quirky" in str(info.value)


def test_interp_load_model_checks():
    """interp.load_model is the checked loader (it is interp.engine.load_model)."""
    assert interp.load_model is interp.engine.load_model


@pytest.mark.parametrize("model_type,capability", [("gemma3", "multimodal wrapper")])
def test_families_not_yet_modelled_say_what_they_lack(model_type, capability):
    hf = tiny_hf_model("llama")
    hf.config.model_type = model_type  # a config of a family interp knows of but does not model
    with pytest.raises(UnsupportedArchitectureError, match=capability) as info:
        model_from_hf(hf, tiny_tokenizer(), name="x")
    assert "llama" in str(info.value)  # the supported list


def test_unknown_family_names_the_nearest_supported_one():
    hf = tiny_hf_model("llama")
    hf.config.model_type = "lama"
    with pytest.raises(UnsupportedArchitectureError, match="nearest supported family is 'llama'"):
        model_from_hf(hf, tiny_tokenizer(), name="x")


def test_no_tokenizer_boots_without_a_network_call(monkeypatch):
    import transformers

    def fetch(*a, **k):
        raise AssertionError("model_from_hf(tokenizer=None) tried to load a tokenizer by name")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fetch)
    m = interp.models.model_from_hf_unchecked(tiny_hf_model("llama"), None, name="x")
    assert m.tokenizer is None and self_check(m) < 1e-4  # tests/models/test_no_tokenizer.py: analyses on ids


@pytest.mark.real
def test_smollm2_passes(smollm2):
    assert self_check(smollm2) < 1e-4
