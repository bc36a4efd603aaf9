"""Every family's config attributes are read or knowingly ignored; any other attribute refuses the model.

A Hugging Face config attribute interp's reader neither reads nor ignores may change the block's maths (a
soft-cap, a rope type, a bidirectional mask, a causal BERT), so the model is refused with an
UnsupportedArchitectureError naming it — never skipped (before, a Llama config with a soft-cap or a sliding
window set was read as capped or windowed, though Hugging Face's Llama applies neither).
"""

from __future__ import annotations

import pathlib
import re

import pytest
import transformers

from interp.errors import UnsupportedArchitectureError
from interp.models import SUPPORTED_FAMILIES
from interp.models._families import FAMILIES, arch_from_hf_config
from interp.models._families._spec import COMMON_IGNORED, COMMON_REQUIRED
from tiny_models import FAMILIES as BASE_FAMILIES
from tiny_models import MORE_FAMILIES, tiny_config

#: tests/tiny_models.py's names -> model_type
TINY = {("gpt_neox" if f == "neox" else f): f for f in BASE_FAMILIES + MORE_FAMILIES}


def test_every_family_has_a_tiny_model_and_one_table_line():
    assert set(FAMILIES) == set(TINY) == set(SUPPORTED_FAMILIES)
    for model_type, fam in FAMILIES.items():
        assert fam.model_type == model_type
        assert not (fam.attributes.reads & fam.attributes.ignores), model_type  # one answer per attribute


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_config_attributes_are_all_read_or_ignored(model_type):
    """The tiny config and transformers' default config of every family: each attribute is in the family's
    reads, ignores or requires (or the generic PretrainedConfig bookkeeping every family ignores)."""
    fam = FAMILIES[model_type]
    known = fam.attributes.known()
    for config in (tiny_config(TINY[model_type]), type(tiny_config(TINY[model_type]))()):
        unknown = set(config.to_dict()) - known
        assert not unknown, f"{model_type}: neither read nor ignored: {sorted(unknown)}"
        arch = arch_from_hf_config(config, name="x")
        assert arch.family == model_type


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_made_up_attribute_is_refused_by_name(model_type):
    config = tiny_config(TINY[model_type])
    config.attention_temperature = 0.5  # no family reads this: it could change the scores
    with pytest.raises(UnsupportedArchitectureError, match="attention_temperature=0.5.*neither reads nor"):
        arch_from_hf_config(config, name="x")


@pytest.mark.parametrize(
    "family,attribute,value",
    [
        ("llama", "attn_logit_softcapping", 50.0),  # Gemma 2's soft-cap: Hugging Face's Llama never applies it
        ("llama", "sliding_window", 3),  # Mistral's window: Llama's modules ignore it
        ("qwen2", "final_logit_softcapping", 30.0),
    ],
)
def test_another_familys_capability_is_refused_not_applied(family, attribute, value):
    """Regression: the shared Llama-shaped reader read soft-caps and windows off any config, so a Llama config
    carrying them was analysed as capped / windowed while its own forward is not."""
    config = tiny_config(family)
    setattr(config, attribute, value)
    with pytest.raises(UnsupportedArchitectureError, match=f"{attribute}={value!r}") as info:
        arch_from_hf_config(config, name="x")
    assert family in str(info.value)


def test_a_made_up_rope_type_is_refused():
    config = tiny_config("llama")
    config.rope_parameters = {"rope_type": "spiral", "rope_theta": 10000.0}
    with pytest.raises(UnsupportedArchitectureError, match="rope_type='spiral'"):
        arch_from_hf_config(config, name="x")
    config.rope_parameters = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}  # the module's own
    assert arch_from_hf_config(config, name="x").positional == "rotary"


@pytest.mark.parametrize(
    "family,attribute,value",
    [
        ("bert", "is_decoder", True),  # a causal BERT
        ("bert", "add_cross_attention", True),
        ("gemma2", "use_bidirectional_attention", True),  # Gemma's bidirectional (embedding) variant
        ("gpt2", "add_cross_attention", True),
    ],
)
def test_required_values_are_checked(family, attribute, value):
    """Regression: a BERT with is_decoder=True (causal attention in Hugging Face) was read as bidirectional."""
    config = tiny_config(family)
    setattr(config, attribute, value)
    with pytest.raises(UnsupportedArchitectureError, match=f"{attribute}={value!r}"):
        arch_from_hf_config(config, name="x")


def test_generic_attributes_stay_generic():
    """The generic ignore list holds no attribute a family reads (it must not hide a maths-changing one)."""
    for fam in FAMILIES.values():
        assert not (fam.attributes.reads & COMMON_IGNORED), fam.model_type
        assert not (set(fam.attributes.requires) & COMMON_IGNORED), fam.model_type
    assert "is_encoder_decoder" in COMMON_REQUIRED


def test_no_family_name_branches_outside_the_family_files():
    """Capabilities, not names: no ``family.startswith(...)`` / ``family in (...)`` branch in interp."""
    root = pathlib.Path(__file__).resolve().parents[2] / "interp"
    pattern = re.compile(r"family\s*\)?\s*\.startswith\(|family\s+(not\s+)?in\s+\(|family\s*[!=]=\s*\"(?!native)")
    hits = [
        f"{p.relative_to(root)}:{i}"
        for p in root.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, hits


def test_real_catalog_configs_pass():
    """The configs of the real catalog models (as transformers 5 reads their files) are all handled."""
    from interp.models import list_models

    entry = next(e for e in list_models() if e.name == "minilm-l6")
    if not entry.available:
        pytest.skip("minilm-l6's package is not installed")
    config = transformers.AutoConfig.from_pretrained(str(entry.path()))
    assert arch_from_hf_config(config, name="minilm-l6", has_unembed=False).family == "bert"
