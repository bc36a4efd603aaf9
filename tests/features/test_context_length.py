"""A prompt longer than the sequences the transcoders were trained on warns (ContextLengthWarning); the
trained length travels with the dictionaries through interp's cache and SAELens's cfg.json."""

from __future__ import annotations

import json
import random
import warnings

import pytest
import torch

from interp import ContextLengthWarning
from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import Transcoder, attribution_graph, load_transcoders, train_transcoders
from tiny_models import tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_transcoders


@pytest.fixture(scope="module")
def llama():
    return model_from_hf(tiny_hf_model("llama"), tiny_tokenizer(), name="tiny-llama")


def _with_length(tcs, n):
    return [Transcoder(t.W_enc, t.b_enc, t.W_dec, t.b_dec, t.W_skip, t.activation, t.threshold, t.k, n) for t in tcs]


def test_longer_prompt_warns_and_the_graph_is_unchanged(llama):
    tcs = random_transcoders(llama, 16, seed=2)
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 10]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        attribution_graph(llama, ids, _with_length(tcs, 7))  # as long as trained: silent
        plain = attribution_graph(llama, ids, tcs)  # unknown length: silent
    with pytest.warns(ContextLengthWarning, match="7 tokens but the transcoders were trained on sequences of 4"):
        g = attribution_graph(llama, ids, _with_length(tcs, 4))
    assert torch.equal(g.adjacency, plain.adjacency)  # a warning, not a different graph


def test_bad_context_length_is_typed(llama):
    t = random_transcoders(llama, 8)[0]
    for bad in (0, -3, 2.5, "64"):
        with pytest.raises(ArgumentError, match="context_length"):
            Transcoder(t.W_enc, t.b_enc, t.W_dec, t.b_dec, context_length=bad)


def test_trained_length_round_trips_through_the_cache(llama, tmp_path):
    rng = random.Random(0)
    docs = [" ".join(f"w{rng.randrange(3, 96)}" for _ in range(300)) for _ in range(40)]
    r = train_transcoders(
        llama,
        layers="all",
        width=16,
        k=2,
        tokens=8 * 4 * 2,
        seq_len=8,
        batch_size=4,
        lr=1e-2,
        corpus=docs,
        cache_dir=tmp_path,
        progress=False,
        eval_tokens=8 * 4,
    )
    assert {t.context_length for t in r.transcoders} == {8}
    again = train_transcoders(
        llama,
        layers="all",
        width=16,
        k=2,
        tokens=8 * 4 * 2,
        seq_len=8,
        batch_size=4,
        lr=1e-2,
        corpus=docs,
        cache_dir=tmp_path,
        progress=False,
        eval_tokens=8 * 4,
    )
    assert {t.context_length for t in again.transcoders} == {8}  # the cached reload keeps it


def test_saelens_context_size_is_read(tmp_path):
    src = __import__("pathlib").Path(__file__).parent / "fixtures" / "dictionaries" / "saelens_jumprelu"
    import shutil

    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    for cfg in dst.rglob("cfg.json"):
        c = json.loads(cfg.read_text())
        c.setdefault("metadata", {})["context_size"] = 128
        cfg.write_text(json.dumps(c))
    tcs = load_transcoders(dst)
    assert tcs and {t.context_length for t in tcs} == {128}
