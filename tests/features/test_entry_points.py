"""Checks every public function of interp.features must pass, found by enumerating the package (so a new entry point
cannot skip them):

* a token-taking parameter (annotated ``TokenSpec``) warns with interp.TokenSpacingWarning for ``"Rome"`` after
  "… is" where ``" Rome"`` is a token — the same check as the rest of interp (tests/attribution/test_token_spacing.py);
* every function runs under ``torch.set_grad_enabled(False)`` (transformer-lens's demos start so): those that train
  or differentiate turn gradients on for themselves;
* transcoders know their layer: a list out of layer order is a typed error, hand-built ones (no layer) still work,
  and the loaders order files by layer number (layer_10 after layer_9).
"""

from __future__ import annotations

import inspect
import random
import warnings

import pytest
import torch
from transformers import AutoTokenizer

import interp
import interp.features as F
from interp.engine import model_from_hf
from interp.errors import ArgumentError
from tiny_models import tiny_hf_model, tiny_model
from tiny_transcoders import random_transcoders

PROMPT = "The capital of Spain is"


@pytest.fixture(scope="module")
def bpe():
    from attribution.test_token_spacing import _tokenizer_dir

    m = model_from_hf(tiny_hf_model("gpt2"), AutoTokenizer.from_pretrained(_tokenizer_dir()), name="tiny-gpt2-bpe")
    return m, random_transcoders(m, 16, seed=4)


def _token_params() -> dict[str, list[str]]:
    out = {}
    for name in F.__all__:
        fn = getattr(F, name)
        if inspect.isfunction(fn):
            ps = [p.name for p in inspect.signature(fn).parameters.values() if "TokenSpec" in str(p.annotation)]
            if ps:
                out[name] = ps
    return out


# how to call each token-taking entry point with its token arguments (keyword) on (model, transcoders)
CALLS = {
    "attribution_graph": lambda m, tcs, **kw: F.attribution_graph(m, PROMPT, tcs, **kw),
    "intervene": lambda m, tcs, **kw: F.intervene(m, PROMPT, tcs, (0, None, 1, 0.0), **kw),
}


def test_every_token_parameter_warns_without_its_space(bpe):
    m, tcs = bpe
    found = _token_params()
    assert set(found) == set(CALLS), f"token-taking entry points {sorted(found)}: add the new ones to CALLS"
    for name, params in found.items():
        for p in params:
            kw = {"target": " Madrid"} if p != "target" else {}
            kw[p] = "Rome"
            with warnings.catch_warnings(record=True) as rec:
                warnings.simplefilter("always")
                CALLS[name](m, tcs, **kw)
            msgs = [str(w.message) for w in rec if issubclass(w.category, interp.TokenSpacingWarning)]
            print(f"{name}({p}='Rome'): {msgs}")
            assert len(msgs) == 1 and f"{p}='Rome'" in msgs[0] and "' Rome'" in msgs[0] and name in msgs[0]
            with warnings.catch_warnings():
                warnings.simplefilter("error", interp.TokenSpacingWarning)
                CALLS[name](m, tcs, **{k: " Rome" if v == "Rome" else v for k, v in kw.items()})  # spaced: silent


def _docs(n: int = 40, length: int = 200) -> list[str]:
    rng = random.Random(0)
    return [" ".join(f"w{rng.randrange(3, 96)}" for _ in range(length)) for _ in range(n)]


def test_every_function_runs_with_gradients_disabled(tmp_path):
    m = tiny_model("llama")
    tcs = random_transcoders(m, 16, seed=1)
    calls = {
        "train_transcoders": lambda: F.train_transcoders(
            m,
            layers="all",
            width=16,
            k=2,
            tokens=32 * 4 * 3,
            seq_len=32,
            batch_size=4,
            corpus=_docs(),
            cache_dir=tmp_path,
            progress=False,
            eval_tokens=64,
        ),
        "qk_attribution": lambda: F.qk_attribution(m, "w1 w2 w3 w4", tcs, 1, 0, -1, 1),
        "attribution_graph": lambda: F.attribution_graph(m, "w1 w2 w3 w4", tcs),
        "intervene": lambda: F.intervene(m, "w1 w2 w3 w4", tcs, "L0.F1@*"),
        "generate": lambda: F.generate(m, "w1 w2 w3 w4", tcs, ["L0.F1@*"], max_new_tokens=2, frozen_attention=True),
        "aggregate_graphs": lambda: F.aggregate_graphs(m, ["w1 w2 w3 w4", "w5 w6 w7"], tcs, progress=False),
        "top_activating_contexts": lambda: F.top_activating_contexts(m, tcs, ["w1 w2 w3"], ["L0.F1@*"]),
        "feature_logit_effects": lambda: F.feature_logit_effects(m, tcs, ["L0.F1", "L1.F2"], k=2),
        "evaluate_dictionary": lambda: F.evaluate_dictionary(
            m, tcs, tokens=[" ".join(f"w{i % 90 + 3}" for i in range(64))], seq_len=8
        ),
        "sae_reconstruction": lambda: F.sae_reconstruction(
            m, "w1 w2 w3", F.SAE(tcs[0].W_enc, tcs[0].b_enc, tcs[0].W_dec, tcs[0].b_dec, layer=0, site="resid_pre")
        ),
    }
    public = {n for n in F.__all__ if inspect.isfunction(getattr(F, n))} - {
        "load_saes",
        "load_transcoders",
        "modern_corpus",  # text from a package: no tensors, no gradients
        "held_out_corpus",
        "english_corpus",
        "default_lr",
        "default_passes",
    }
    assert public == set(calls), f"public functions {sorted(public)}: add the new ones here"
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        for name, call in calls.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
            assert not torch.is_grad_enabled(), f"{name} left gradients on"
    finally:
        torch.set_grad_enabled(before)


def test_transcoders_know_their_layer(tmp_path):
    m = tiny_model("llama", n_layers=3)
    tcs = [
        F.Transcoder(t.W_enc, t.b_enc, t.W_dec, t.b_dec, layer=l)
        for l, t in enumerate(random_transcoders(m, 16, seed=2))
    ]
    F.attribution_graph(m, "w1 w2 w3", tcs)  # in order
    with pytest.raises(ArgumentError, match=r"transcoders\[0\] is the transcoder of layer 2.*layer order"):
        F.attribution_graph(m, "w1 w2 w3", list(reversed(tcs)))
    for call in (
        lambda t: F.intervene(m, "w1 w2 w3", t, "L0.F1@*"),
        lambda t: F.qk_attribution(m, "w1 w2 w3", t, 1, 0, -1, 0),
        lambda t: F.top_activating_contexts(m, t, ["w1 w2"], ["L0.F1@*"]),
    ):
        with pytest.raises(ArgumentError, match="is the transcoder of layer"):
            call([tcs[1], tcs[0], tcs[2]])
    hand = random_transcoders(m, 16, seed=2)  # built by hand: no layer, taken in the order given
    assert all(t.layer is None for t in hand)
    F.attribution_graph(m, "w1 w2 w3", list(reversed(hand)))
    with pytest.raises(ArgumentError, match="layer=-1"):
        F.Transcoder(hand[0].W_enc, hand[0].b_enc, hand[0].W_dec, hand[0].b_dec, layer=-1)


def test_loaders_order_by_layer_number_and_record_it(tmp_path):
    from safetensors.torch import save_file

    m = tiny_model("llama", n_layers=12)
    tcs = random_transcoders(m, 8, seed=3)
    for l, t in enumerate(tcs):
        save_file(
            {"W_enc": t.W_enc, "W_dec": t.W_dec, "b_enc": t.b_enc, "b_dec": t.b_dec},
            str(tmp_path / f"layer_{l}.safetensors"),
        )
    got = F.load_transcoders(tmp_path, m)
    assert [t.layer for t in got] == list(range(12))
    assert all(torch.equal(g.W_enc, t.W_enc) for g, t in zip(got, tcs))  # layer_10 is the 11th, not the 3rd


def test_trained_transcoders_know_their_layer(tmp_path):
    m = tiny_model("llama")
    # three batches of 128 tokens are too few for 16 features: the budget warns with the numbers
    with pytest.warns(
        F.DictionaryQualityWarning, match=r"384 · 2 / 16 = 48.0 firings per feature .*at least 512 tokens"
    ):
        r = F.train_transcoders(
            m,
            layers="all",
            width=16,
            k=2,
            tokens=32 * 4 * 3,
            seq_len=32,
            batch_size=4,
            corpus=_docs(),
            cache_dir=tmp_path,
            progress=False,
            eval_tokens=64,
        )
    assert [t.layer for t in r.transcoders] == [0, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = F.train_transcoders(
            m,
            layers="all",
            width=16,
            k=2,
            tokens=32 * 4 * 3,
            seq_len=32,
            batch_size=4,
            corpus=_docs(),
            cache_dir=tmp_path,
            progress=False,
            eval_tokens=64,
        )
    assert again.from_cache and [t.layer for t in again.transcoders] == [0, 1]
    with pytest.raises(ArgumentError, match="is the transcoder of layer 1"):
        F.attribution_graph(m, "w1 w2", list(reversed(r.transcoders)))


def test_result_reprs_are_short_summaries():
    """A result's repr is a summary (sizes, closure, scores, the top few), not its tensors and labels."""
    m = tiny_model("llama")
    tcs = random_transcoders(m, 24, seed=1)
    g = F.attribution_graph(m, "w1 w2 w3 w4 w5 w6", tcs, target="w3")
    q = F.qk_attribution(m, "w1 w2 w3 w4 w5 w6", tcs, 1, 0, -1, 2)
    for r in (g, q):
        text = repr(r)
        print(text)
        assert len(text) < 600 and "closure_error=" in text and "tensor(" not in text
    assert f"{g.n_nodes} nodes" in repr(g) and "replacement" in repr(g) and "completeness" in repr(g)
    assert f"score {q.score:.4g}" in repr(q)
