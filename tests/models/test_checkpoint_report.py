"""A checkpoint folder that lacks tensors of its model is refused at load (transformers would initialise them at
random: its loading report lists them as missing), naming them; a tokenizer larger than the model is warned of at
load and its out-of-range ids refused where inputs are read; ``progress=False`` hides transformers' GGUF bar.

Each folder is a tiny random Llama saved with ``save_pretrained`` whose safetensors file is then rewritten."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import interp
from interp.errors import ModelLoadError, VocabularyWarning
from tests.tiny_models import tiny_hf_model, tiny_tokenizer


def _folder(path: Path, *, tied: bool = False, vocab: int = 100) -> Path:
    hf = tiny_hf_model("llama", tie_word_embeddings=tied) if vocab == 100 else None
    if hf is None:  # a model narrower than its tokenizer
        from tests.tiny_models import tiny_config

        import transformers

        torch.manual_seed(0)
        c = tiny_config("llama")
        c.vocab_size = vocab
        hf = transformers.AutoModelForCausalLM.from_config(c)
    if tied:
        hf.tie_weights()
    hf.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def _rewrite(path: Path, edit) -> None:
    f = path / "model.safetensors"
    sd = load_file(str(f))
    save_file(edit(dict(sd)), str(f), metadata={"format": "pt"})


def _drop(*names):
    def edit(sd):
        for n in names:
            del sd[n]
        return sd

    return edit


def test_a_complete_folder_loads_and_equals_its_checkpoint(tmp_path):
    path = _folder(tmp_path / "ok")
    model = interp.load_model(str(path), progress=False)
    saved = load_file(str(path / "model.safetensors"))
    assert torch.equal(model.weights.W_U, saved["lm_head.weight"].T.to(model.weights.W_U.dtype))


def test_a_missing_o_proj_is_refused_naming_it(tmp_path):
    path = _folder(tmp_path / "no-o")
    _rewrite(path, _drop("model.layers.0.self_attn.o_proj.weight"))
    with pytest.raises(ModelLoadError, match=r"lacks 1 of the model's tensors \(model\.layers\.0\.self_attn\.o_proj"):
        interp.load_model(str(path), progress=False)


def test_an_untied_lm_head_missing_is_refused(tmp_path):
    path = _folder(tmp_path / "no-head")
    assert json.loads((path / "config.json").read_text()).get("tie_word_embeddings") is False
    _rewrite(path, _drop("lm_head.weight"))
    with pytest.raises(ModelLoadError, match=r"\(lm_head\.weight\).*save_pretrained"):
        interp.load_model(str(path), progress=False)


def test_a_tied_head_is_not_missing(tmp_path):
    path = _folder(tmp_path / "tied", tied=True)
    assert "lm_head.weight" not in load_file(str(path / "model.safetensors"))  # tied: stored once
    model = interp.load_model(str(path), progress=False)
    assert torch.equal(model.weights.W_U, model.weights.W_E.T)


def test_every_tensor_under_an_old_prefix_is_refused_listing_both_sides(tmp_path):
    path = _folder(tmp_path / "prefix")
    _rewrite(path, lambda sd: {k.replace("model.", "transformer.", 1): v for k, v in sd.items()})
    with pytest.raises(ModelLoadError) as e:
        interp.load_model(str(path), progress=False)
    msg = str(e.value)
    assert "lacks 20 of the model's tensors (model.embed_tokens.weight" in msg  # every parameter: sorted,
    assert "… and 8 more)" in msg  # the first 12 shown
    assert "holds 20 tensors the model does not use (transformer.embed_tokens.weight" in msg  # the old prefix
    assert "rename" in msg


def test_a_tokenizer_larger_than_the_model_warns_at_load_and_types_every_read(tmp_path):
    path = _folder(tmp_path / "narrow", vocab=60)  # ids 60..99 of the tokenizer have no embedding
    with pytest.warns(VocabularyWarning, match=r"100 tokens but the model embeds 60"):
        model = interp.load_model(str(path), progress=False)
    assert model.arch.d_vocab == 60
    ok = "w1 w2 w3"  # ids 5..7: fine
    assert interp.predict(model, ok) is not None
    bad, corrupt = "w1 w2 w70", "w1 w2 w3"  # w70 is id 74
    calls = {
        "predict": lambda: interp.predict(model, bad),
        "trace": lambda: interp.trace(model, bad),
        "attribute_logits": lambda: interp.attribute_logits(model, bad, answer=5, wrong=6),
        "patch": lambda: interp.patch(model, bad, corrupt, metric=interp.LogitDiff(5, 6), progress=False),
        "patch corrupt": lambda: interp.patch(model, corrupt, bad, metric=interp.LogitDiff(5, 6), progress=False),
        "logit_lens": lambda: interp.logit_lens(model, bad),
    }
    for name, call in calls.items():
        with pytest.raises(interp.InterpError, match=r"token id 74 \(token 'w70'\).*d_vocab=60"):
            call()
    with pytest.raises(interp.InterpError, match=r"answer='w70' tokenises to id 74"):
        interp.attribute_logits(model, ok, answer="w70")
    with pytest.raises(interp.InterpError, match=r"token id 74"):
        interp.trace(model, torch.tensor([[1, 5, 74]]))
    with pytest.raises(interp.InterpError, match=r"token id -1"):
        interp.trace(model, torch.tensor([[1, 5, -1]]))


def test_a_tokenizer_that_fits_gives_no_warning(tmp_path):
    path = _folder(tmp_path / "fits")
    with warnings.catch_warnings():
        warnings.simplefilter("error", VocabularyWarning)
        interp.load_model(str(path), progress=False)


def test_progress_false_hides_transformers_gguf_bar(tmp_path, monkeypatch, capsys):
    """transformers' GGUF reader draws its bar with tqdm directly (not through transformers' switch): a stand-in
    for its dequantizer draws it the same way, from the reader module, while the load runs."""
    import transformers
    from transformers import modeling_gguf_pytorch_utils as reader

    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF stand-in")

    def from_pretrained(path, *args, gguf_file=None, **kwargs):
        if gguf_file is None:  # the cache entry written from the stand-in: a Llama folder
            return transformers.LlamaForCausalLM.from_pretrained(path, *args, **kwargs)
        for _ in reader.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
            pass
        model = tiny_hf_model("llama")
        return (model, {"missing_keys": set()}) if kwargs.get("output_loading_info") else model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    tok = tiny_tokenizer()
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    own = reader.tqdm
    interp.load_model(str(gguf), cache_dir=tmp_path / "cache", progress=False)
    err = capsys.readouterr().err
    assert "de-quantizing" not in err and "load_model" not in err
    assert reader.tqdm is own  # restored after the load


@pytest.mark.real
@pytest.mark.slow
def test_a_first_gguf_load_with_progress_false_prints_no_bar(tmp_path, capfd):
    """smollm2's GGUF dequantized into an empty cache (its catalog GGUF is complete: nothing is missing)."""
    model = interp.load_model("smollm2-135m", cache_dir=tmp_path, progress=False)
    err = capfd.readouterr().err
    assert "de-quantizing" not in err and "load_model" not in err, err[-500:]
    assert model.arch.d_vocab == 49152
