"""Training gives the same cache key as the tree these fixtures were written on, and on a CPU of the same kernel
family the same weights to the bit (tests/dictionaries/fixtures/train_*.safetensors and train_keys.json: three tiny
runs — per-layer, skip, cross-layer — trained with one thread by the same code as below, before the dictionary package
was reorganised, on an AVX-512 CPU). Training's top-k choices turn a GEMM's last-bit differences into different
weights, and an AVX2 CPU's kernels sum in another order: there the weights are compared with nothing, and the test
says so (a skip naming both CPUs) after the cache key has been checked."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from interp.engine import model_from_hf
from interp.features import train_transcoders
from tiny_models import tiny_hf_model, tiny_tokenizer

FIX = Path(__file__).parent / "fixtures"
RUNS = {
    "per_layer": dict(layers="all", width=32, k=4),
    "skip": dict(layers=[1], width=32, k=4, skip=True),
    "cross_layer": dict(layers="all", width=16, k=2, cross_layer=True),
}


@pytest.fixture(scope="module")
def setup():
    rng = random.Random(0)
    docs = [" ".join(f"w{rng.randrange(3, 96)}" for _ in range(300)) for _ in range(60)]
    return model_from_hf(tiny_hf_model("llama"), tiny_tokenizer(), name="tiny-llama"), docs


@pytest.mark.parametrize("name", list(RUNS))
def test_training_reproduces_the_saved_weights_and_cache_key(setup, name, tmp_path):
    model, docs = setup
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the fixtures were written with one thread (a GEMM's sums may split by thread)
    try:
        r = train_transcoders(
            model,
            tokens=32 * 4 * 6,
            seq_len=32,
            batch_size=4,
            corpus=docs,
            eval_tokens=32 * 2,
            cache_dir=tmp_path,
            progress=False,
            checkpoint_every=4,
            **RUNS[name],
        )
    finally:
        torch.set_num_threads(threads)
    fixture = json.loads((FIX / "train_keys.json").read_text())
    keys = fixture[name]
    assert r.path.name == keys["dir"] and r.config == keys["config"]
    written_on, here = fixture["_written_on"]["cpu_capability"], torch.backends.cpu.get_cpu_capability()
    if here != written_on:
        pytest.skip(f"the cache key matches; the weights were written on a {written_on} CPU and this one is {here}")
    want = load_file(str(FIX / f"train_{name}.safetensors"))
    if name == "cross_layer":
        c = r.clt
        got = {"W_enc": c.W_enc, "b_enc": c.b_enc, "b_dec": c.b_dec} | {f"W_dec_{i}": w for i, w in enumerate(c.W_dec)}
    else:
        got = {}
        for l, t in zip(r.layers, r.transcoders):
            got |= {f"{l}.W_enc": t.W_enc, f"{l}.b_enc": t.b_enc, f"{l}.W_dec": t.W_dec, f"{l}.b_dec": t.b_dec}
            if t.W_skip is not None:
                got[f"{l}.W_skip"] = t.W_skip
    assert sorted(got) == sorted(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k


def test_a_config_and_keywords_are_one_call(setup, tmp_path):
    """train_transcoders(model, config) = (model, **keywords) = (model, config, **overrides): one cache directory,
    read back without training; an unknown option or a missing required one is an ArgumentError naming it."""
    from interp.dictionaries import TrainConfig
    from interp.errors import ArgumentError

    model, docs = setup
    kw = dict(tokens=32 * 4 * 2, seq_len=32, batch_size=4, corpus=docs, eval_tokens=0, progress=False, **RUNS["skip"])
    first = train_transcoders(model, TrainConfig(cache_dir=tmp_path, **kw))
    again = train_transcoders(model, cache_dir=tmp_path, **kw)
    assert again.from_cache and again.path == first.path
    over = train_transcoders(model, TrainConfig(cache_dir=tmp_path, **(kw | {"seed": 5})), seed=0)
    assert over.from_cache and over.path == first.path
    with pytest.raises(ArgumentError, match=r"unknown option\(s\) \['widht'\]"):
        train_transcoders(model, widht=4, **kw)
    with pytest.raises(ArgumentError, match=r"needs \['tokens'\]"):
        train_transcoders(model, layers=[1], width=4, k=1)
    with pytest.raises(ArgumentError, match="config="):
        train_transcoders(model, {"width": 4})
