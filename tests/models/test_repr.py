"""A model's repr states its blocks' real norm placement and, for a model placed by accelerate, where its blocks
are (a ``device=cpu`` alone hid blocks on disk)."""

from __future__ import annotations

import pytest

import interp
from tests.tiny_models import tiny_hf_model, tiny_model, tiny_tokenizer

# what each family's block does with its norms (docs/math.md §1), written out independently of ArchInfo
EXPECTED = {
    "llama": "pre-norm rmsnorm",
    "gpt2": "pre-norm layernorm",
    "neox": "parallel pre-norm layernorm",
    "gptj": "parallel pre-norm layernorm",
    "bert": "post-norm layernorm",
    "gemma2": "sandwich-norm rmsnorm",
    "gemma3_text": "sandwich-norm rmsnorm",
    "olmo2": "output-norm rmsnorm",
    "olmoe": "pre-norm rmsnorm",
}


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_repr_states_the_real_norm_placement(family):
    text = repr(tiny_model(family))
    assert EXPECTED[family] in text, text
    assert "device=cpu," in text  # in memory: no block placement to state


def test_repr_of_an_offloaded_model_says_where_its_blocks_are(tmp_path):
    tiny_hf_model("llama", n_layers=4).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    placement = {
        **{f"model.layers.{l}": "cpu" if l == 0 else "disk" for l in range(4)},
        **dict.fromkeys(["model.embed_tokens", "model.norm", "model.rotary_emb", "lm_head"], "cpu"),
    }
    model = interp.load_model(str(tmp_path), device_map=placement, offload_folder=str(tmp_path / "offload"))
    assert model.block_devices == ("cpu", "disk", "disk", "disk")
    assert "device=cpu (blocks: 1 on cpu, 3 on disk)" in repr(model), repr(model)
