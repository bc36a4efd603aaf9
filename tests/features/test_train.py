"""Training transcoders: checked against computations that do not use the training code.

* on a tiny Llama, the held-out FVU and L0 are recomputed from the Hugging Face module's own MLP input and
  output (forward hooks on ``mlp``, not the engine) and the trained weights: they equal the reported ones,
  FVU is well below the trivial baseline 1 (predicting the mean), and L0 == k;
* an interrupted run (stopped after 7 steps, checkpoint every 3) resumes and ends with the same weights
  as an uninterrupted run with the same seed;
* finished dictionaries are cached and reloaded; a failed final write leaves no file behind; a damaged
  cache is a typed error; bad arguments are typed errors naming the argument;
* the bundled corpus (the King James Bible) reads, with disjoint training and held-out chapters; on
  smollm2 two layers train from the default (modern English) corpus (real);
* the reported spliced-in loss recovered and KL are the Hugging Face model's own, with the trained transcoder's output
  hooked in place of its MLP's (tests/features/test_evaluate.py's reference); a skip transcoder's W_skip is trained
  and cached;
* training runs under a caller's torch.inference_mode(), no_grad() or set_grad_enabled(False), to the same weights;
  train=False reads the cache or names the nearest cached configuration; a budget that cannot use its width warns
  with the numbers; the quality warning says whether lr and passes were the defaults.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

import interp.dictionaries._train as T
from interp.errors import ArgumentError, InterpError, ResultFormatError
from interp.features import TrainedTranscoders, train_transcoders
from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer
from interp.engine import model_from_hf

SEQ, BATCH = 32, 4


def _docs(n: int = 120, length: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(3, 96)}" for _ in range(length)) for _ in range(n)]


@pytest.fixture(scope="module")
def llama():
    hf = tiny_hf_model("llama")
    return hf, model_from_hf(hf, tiny_tokenizer(), name="tiny-llama")


def _train(model, cache, **kw) -> TrainedTranscoders:
    args = dict(
        layers="all",
        width=64,
        k=4,
        tokens=SEQ * BATCH * 100,
        seq_len=SEQ,
        batch_size=BATCH,
        lr=1e-2,
        passes=1,
        corpus=_docs(),
        cache_dir=cache,
        progress=False,
        eval_tokens=SEQ * 16,
        checkpoint_every=3,
    )
    args.update(kw)
    return train_transcoders(model, **args)


def _hf_mlp_io(hf, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every layer's MLP input and output [tokens, d] read by forward hooks on the HF modules (position 0 dropped)."""
    xs, ys = {}, {}

    def keep(l):
        def hook(mod, inp, out):
            xs[l], ys[l] = inp[0], out[0] if isinstance(out, tuple) else out  # a MoE block may return its router logits

        return hook

    hooks = [layer.mlp.register_forward_hook(keep(l)) for l, layer in enumerate(hf.model.layers)]
    hooked_forward(hf, hooks, input_ids=ids)
    n = len(hf.model.layers)
    return [xs[l][:, 1:].reshape(-1, xs[l].shape[-1]) for l in range(n)], [
        ys[l][:, 1:].reshape(-1, ys[l].shape[-1]) for l in range(n)
    ]


@pytest.fixture(scope="module")
def mixtral():
    hf = tiny_hf_model("mixtral")
    return hf, model_from_hf(hf, tiny_tokenizer(), name="tiny-mixtral")


@pytest.mark.slow
@pytest.mark.parametrize("which", ["llama", "mixtral"])
def test_training_beats_the_mean_and_metrics_match_hf(which, request, tmp_path):
    """FVU and L0 as reported = recomputed from the Hugging Face model's own MLP input and output (forward hooks;
    Mixtral: the routed experts' block, which a transcoder replaces as a whole)."""
    hf, model = request.getfixturevalue(which)
    r = _train(model, tmp_path)
    docs = _docs()
    held = [d for i, d in enumerate(docs) if i % 10 == 9]
    tok = tiny_tokenizer()
    ids: list[int] = []
    for d in held:
        ids += tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    n = (SEQ * 16) // SEQ
    ids_t = torch.tensor(ids[: n * SEQ]).view(n, SEQ)
    xs, ys = _hf_mlp_io(hf, ids_t)
    for i, l in enumerate(r.layers):
        t = r.transcoders[i]
        pre = torch.relu(xs[l] @ t.W_enc.T + t.b_enc)
        v, idx = pre.topk(4, dim=-1)
        f = torch.zeros_like(pre).scatter_(-1, idx, v)
        yhat = f @ t.W_dec + t.b_dec
        y = ys[l]
        fvu = float((y - yhat).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
        l0 = float((f != 0).sum(-1).float().mean())
        print(f"layer {l}: FVU {fvu:.4f} (reported {r.fvu[i]:.4f}), L0 {l0:.2f}")
        assert abs(fvu - r.fvu[i]) <= 1e-4 * max(1.0, fvu)
        assert abs(l0 - r.l0[i]) <= 1e-6
        assert fvu < 0.5  # the trivial baseline (predict the mean) is 1
        assert int((f != 0).sum(-1).max()) <= 4 and l0 == pytest.approx(4.0)
    assert r.eval_tokens == n * (SEQ - 1)
    df = r.to_dataframe()
    assert list(df["layer"]) == [0, 1] and (df["k"] == 4).all()


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_weights(llama, tmp_path, monkeypatch):
    _, model = llama
    full = _train(model, tmp_path / "a", tokens=SEQ * BATCH * 10)
    calls = {"n": 0}
    step = T._step

    def stop_after_7(*a, **k):
        if calls["n"] == 7:
            raise KeyboardInterrupt
        calls["n"] += 1
        return step(*a, **k)

    monkeypatch.setattr(T, "_step", stop_after_7)
    with pytest.raises(KeyboardInterrupt):
        _train(model, tmp_path / "b", tokens=SEQ * BATCH * 10)
    run = next((tmp_path / "b").glob("transcoders/*/*"))
    assert (run / "checkpoint.pt").is_file() and not (run / "metrics.json").exists()
    assert int(torch.load(run / "checkpoint.pt", weights_only=True)["step"]) == 6
    monkeypatch.setattr(T, "_step", step)
    resumed = _train(model, tmp_path / "b", tokens=SEQ * BATCH * 10)
    assert resumed.tokens_per_second is None and not resumed.from_cache
    assert not (run / "checkpoint.pt").exists()
    for a, b in zip(full.transcoders, resumed.transcoders):
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert resumed.fvu == full.fvu


def test_a_damaged_checkpoint_is_a_typed_error(llama, tmp_path, monkeypatch):
    """A checkpoint whose tensors do not fit the run, or that cannot be read, is a ResultFormatError (training on
    garbage is worse than starting again)."""
    _, model = llama
    calls = {"n": 0}
    step = T._step

    def stop_after_7(*a, **k):
        if calls["n"] == 7:
            raise KeyboardInterrupt
        calls["n"] += 1
        return step(*a, **k)

    monkeypatch.setattr(T, "_step", stop_after_7)
    with pytest.raises(KeyboardInterrupt):
        _train(model, tmp_path / "c", tokens=SEQ * BATCH * 10)
    monkeypatch.setattr(T, "_step", step)
    ckpt = next((tmp_path / "c").glob("transcoders/*/*")) / "checkpoint.pt"
    st = torch.load(ckpt, weights_only=True)
    st["params"][2] = st["params"][2][:, :, :16]  # a decoder of another width: not this run's
    torch.save(st, ckpt)
    with pytest.raises(ResultFormatError, match="damaged.*shapes"):
        _train(model, tmp_path / "c", tokens=SEQ * BATCH * 10)
    ckpt.write_bytes(b"garbage")
    with pytest.raises(ResultFormatError, match="damaged"):
        _train(model, tmp_path / "c", tokens=SEQ * BATCH * 10)


@pytest.mark.slow
def test_cached_reload_and_atomic_writes(llama, tmp_path, monkeypatch):
    _, model = llama
    kw = dict(tokens=SEQ * BATCH * 3)
    calls = {"n": 0}
    step = T._step

    def count(*a, **k):
        calls["n"] += 1
        return step(*a, **k)

    monkeypatch.setattr(T, "_step", count)
    # a failure while the final files are written leaves no metrics.json and no temporary file
    import interp._io as io

    real = io.save_file

    def half_write(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(io, "save_file", half_write)
    with pytest.raises(OSError):
        _train(model, tmp_path, **kw)
    run = next(tmp_path.glob("transcoders/*/*"))
    assert sorted(p.name for p in run.iterdir()) == []
    monkeypatch.setattr(io, "save_file", real)
    first = _train(model, tmp_path, **kw)
    assert not first.from_cache and calls["n"] == 6
    again = _train(model, tmp_path, **kw)
    assert again.from_cache and calls["n"] == 6  # nothing trained
    assert again.fvu == first.fvu and again.l0 == first.l0
    for a, b in zip(first.transcoders, again.transcoders):
        assert torch.equal(a.W_enc, b.W_enc) and torch.equal(a.W_dec, b.W_dec) and b.activation == "topk" and b.k == 4
    assert again[1] is again.transcoders[1]
    with pytest.raises(ArgumentError, match="layer=5"):
        again[5]
    other = _train(model, tmp_path, seed=1, **kw)  # another configuration: another directory
    assert other.path != first.path and not other.from_cache
    (first.path / "layer_1.safetensors").write_bytes(b"garbage")
    with pytest.raises(ResultFormatError, match="damaged"):
        _train(model, tmp_path, **kw)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(layers=[2]), "layers contains 2"),
        (dict(layers=[]), "layers="),
        (dict(layers=[0, 0]), "repeats"),
        (dict(width=0), "width=0"),
        (dict(k=65), "k=65"),
        (dict(k=0), "k=0"),
        (dict(tokens=10), "tokens=10"),
        (dict(tokens=10**7), "more than the corpus"),
        (dict(seq_len=1000), "seq_len=1000"),
        (dict(corpus="one string"), "corpus"),
        (dict(lr=-1.0), "lr="),
        (dict(progress="yes"), "progress="),
        (dict(passes=0), "passes=0"),
    ],
)
def test_bad_input(llama, tmp_path, kw, match):
    _, model = llama
    with pytest.raises(InterpError, match=match):
        _train(model, tmp_path, **kw)


def test_bundled_corpus():
    train, held = T.english_corpus()
    assert len(train) == 1071 and len(held) == 118
    assert train[0].startswith("In the beginning God created")
    assert not set(train) & set(held)
    assert not any(ch[:4].strip()[0].isdigit() for ch in train[:50])  # verse numbers removed


@pytest.mark.real
def test_smollm2_two_layers_from_the_bundled_corpus(smollm2, tmp_path):
    r = train_transcoders(
        smollm2,
        layers=[0, 1],
        width=256,
        k=8,
        tokens=512,
        seq_len=64,
        batch_size=4,
        eval_tokens=256,
        cache_dir=tmp_path,
        progress=False,
    )
    print(r.to_dataframe())
    # TopK keeps k pre-activations and ReLU zeroes the non-positive ones among them: 0 < L0 ≤ k (with the defaults
    # scaled to this tiny budget some kept ones are ≤ 0: L0 6.3 and 7.5 here)
    assert all(0 < l <= 8 for l in r.l0) and all(0 < f < 2 for f in r.fvu)
    assert r.corpus.startswith("English Wikipedia") and r.details["licence"]  # the default: modern English
    assert r.config["corpus"].startswith("modern-") and r.transfer is not None
    assert len(r.loss_recovered) == 2 and all(-1 < v <= 1 for v in r.loss_recovered)


def _hf_layers(hf):
    """The decoder layers of a Hugging Face causal LM (Llama-like, GPT-2/GPT-J or GPT-NeoX naming)."""
    for path in ("model.layers", "transformer.h", "gpt_neox.layers"):
        obj = hf
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return list(obj)
    raise AssertionError(f"no decoder layers found in {type(hf).__name__}")


@pytest.mark.parametrize(
    "family",
    [
        f
        for f in (
            "gpt2",
            "llama",
            "neox",
            "qwen2",
            "mistral",
            "gemma",
            "phi3",
            "gptj",
            "qwen3",
            "gemma2",
            "gemma3_text",
            "olmo2",
            "mixtral",
            "olmoe",
        )
    ],
)
def test_training_input_is_the_hf_mlp_input(family):
    """The activations a transcoder is trained on are what the Hugging Face MLP module receives (a forward pre-hook on
    it, not the engine), position 0 dropped: OLMo 2 has no pre-norm (its MLP reads the stream itself; the norm after
    the MLP is no input norm), GPT-J one norm for both sublayers, NeoX a parallel block."""
    hf = tiny_hf_model(family)
    m = model_from_hf(tiny_hf_model(family), tiny_tokenizer(), name=f"tiny-{family}")
    ids = m.to_tokens("w1 w2 w3 w4 w5 w6 w7")
    seen: dict[int, torch.Tensor] = {}
    mlps = [layer.mlp for layer in _hf_layers(hf)]
    hooks = [
        mod.register_forward_pre_hook(lambda mod, a, l=l: seen.__setitem__(l, a[0].detach()))
        for l, mod in enumerate(mlps)
    ]
    hooked_forward(hf, hooks, ids)
    from interp.engine.internal import Engine

    x, _ = T._activations(Engine.of(m), ids, list(range(len(mlps))))
    for l in range(len(mlps)):
        want = seen[l][:, 1:].reshape(-1, seen[l].shape[-1])
        err = float((x[l] - want).abs().max() / want.abs().max())
        print(f"{family} layer {l}: training input vs HF MLP input, max relative {err:.1e}")
        assert err <= 1e-5


@pytest.mark.parametrize(
    "mode",
    [torch.inference_mode, torch.no_grad, lambda: torch.set_grad_enabled(False)],
    ids=["inference", "no_grad", "off"],
)
def test_training_under_a_callers_grad_mode(llama, tmp_path, mode):
    """Inside torch.inference_mode() training raised torch's 'element 0 of tensors does not require grad'; under
    inference_mode, no_grad and set_grad_enabled(False) it trains to the weights of a run without them."""
    _, model = llama
    plain = _train(model, tmp_path / "plain", tokens=SEQ * BATCH * 5)
    with mode():
        r = _train(model, tmp_path / "mode", tokens=SEQ * BATCH * 5)
    assert not r.from_cache
    for a, b in zip(plain.transcoders, r.transcoders):
        assert not b.W_enc.is_inference()
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.slow
def test_loss_recovered_is_the_hf_models_own(llama, tmp_path):
    """The reported per-layer FVU, spliced-in loss recovered and KL equal those of the Hugging Face model with the
    trained transcoder's output hooked in place of its MLP's (test_evaluate's reference, float64 there) on the
    held-out rows; a skip transcoder's trained W_skip is part of that output, and it is cached."""
    from features.test_evaluate import _reference

    hf, model = llama
    r = _train(model, tmp_path, tokens=SEQ * BATCH * 20, skip=True)
    tok = tiny_tokenizer()
    ids: list[int] = []
    for d in [d for i, d in enumerate(_docs()) if i % 10 == 9]:
        ids += tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    held = torch.tensor(ids[: 16 * SEQ]).view(16, SEQ)
    assert all(t.W_skip is not None and t.W_skip.abs().max() > 0 for t in r.transcoders)
    ref, ce_clean = _reference(hf.double(), "llama", held, {l: r[l] for l in r.layers})
    hf.float()
    ev = r.evaluation
    for i, l in enumerate(r.layers):
        want, row = ref[f"L{l}"], ev.row_labels.index(f"L{l}")
        print(f"layer {l}: CE spliced {float(ev.ce_spliced[row]):.5f} (HF {want['ce_spliced']:.5f}), KL {r.kl[i]:.2e}")
        # the tiny random model's CE gap (zero-ablated − clean) is small, so the ratio is compared through its terms
        assert float(ev.ce_spliced[row]) == pytest.approx(want["ce_spliced"], rel=1e-5)
        assert float(ev.ce_zero[row]) == pytest.approx(want["ce_zero"], rel=1e-5)
        assert ev.ce_clean == pytest.approx(ce_clean, rel=1e-5)
        gap = float(ev.ce_zero[row]) - ev.ce_clean
        assert r.loss_recovered[i] == pytest.approx(1 - (float(ev.ce_spliced[row]) - ev.ce_clean) / gap, rel=1e-9)
        assert r.kl[i] == pytest.approx(want["kl_spliced"], rel=1e-3, abs=1e-7)
        assert r.fvu[i] == pytest.approx(want["fvu"], rel=1e-4)
    again = _train(model, tmp_path, tokens=SEQ * BATCH * 20, skip=True)
    assert again.from_cache and again.loss_recovered == r.loss_recovered
    assert all(torch.equal(a.W_skip, b.W_skip) for a, b in zip(r.transcoders, again.transcoders))
    df = again.to_dataframe()
    assert {"loss_recovered", "kl", "fvu_transfer", "loss_recovered_transfer"} <= set(df.columns)
    with pytest.raises(ArgumentError, match="skip=True with cross_layer=True"):
        _train(model, tmp_path, skip=True, cross_layer=True)


def test_train_false_reads_the_cache_or_names_the_nearest(llama, tmp_path):
    _, model = llama
    with pytest.raises(ArgumentError, match="none of model 'tiny-llama'"):
        _train(model, tmp_path, tokens=SEQ * BATCH * 3, train=False)
    first = _train(model, tmp_path, tokens=SEQ * BATCH * 3)
    again = _train(model, tmp_path, tokens=SEQ * BATCH * 3, train=False)
    assert again.from_cache and again.path == first.path
    with pytest.raises(ArgumentError, match=r"differs in .*width=64 \(asked 32\)") as e:
        _train(model, tmp_path, tokens=SEQ * BATCH * 3, width=32, train=False)
    assert first.path.name in str(e.value)
    assert sorted(p.name for p in first.path.parent.iterdir()) == [first.path.name]  # nothing started


@pytest.mark.slow
def test_quality_and_budget_warnings_say_what_was_used(llama, tmp_path):
    """With lr and passes left None the warning says the defaults were used (it said 'lr=0.01 and passes=4 were used
    (leave them None …)'); given, it names them. A width the tokens cannot fit, and held-out text too short for every
    feature to fire, warn before training with the numbers."""
    from interp.features import DictionaryQualityWarning

    _, model = llama
    with pytest.warns(DictionaryQualityWarning) as rec:
        _train(model, tmp_path, width=2048, k=1, tokens=SEQ * BATCH * 2, lr=None, passes=None)
    text = " | ".join(str(w.message) for w in rec)
    print(text)
    assert "tokens · k / width = 256 · 1 / 2048 = 0.1 firings per feature" in text
    assert "scores 496 tokens (eval_tokens=512) · k=1 = 496 activations for width=2048 features: at least 76%" in text
    assert "the defaults scaled to this budget were used (lr=" in text and "leave lr and passes None" not in text
    with pytest.warns(DictionaryQualityWarning, match=r"lr=0.05 and passes=1 were used \(leave lr and passes None"):
        _train(model, tmp_path, width=2048, k=1, tokens=SEQ * BATCH * 2, lr=0.05, passes=1)


def test_progress_shows_the_dead_fraction(llama, tmp_path, capsys):
    _, model = llama
    _train(model, tmp_path, tokens=SEQ * BATCH * 3, progress=True)
    err = capsys.readouterr().err
    assert "dead=" in err and "fvu=" in err


@pytest.mark.slow
def test_subnormal_adam_moments_are_flushed(llama, tmp_path, monkeypatch):
    """Adam's first moments of a feature that stopped firing decay into the subnormal range, where CPU arithmetic is
    tens of times slower (a run's tokens/s fell as it trained): flush_moments zeroes moments below 1e-20 and leaves
    the others, and training calls it every 32 updates."""
    from interp.dictionaries import _train_state as S

    _, model = llama
    p = torch.zeros(6, requires_grad=True)
    opt = torch.optim.Adam([p], lr=1e-3)
    p.grad = torch.ones(6)
    opt.step()
    m = opt.state[p]["exp_avg"]
    m.copy_(torch.tensor([1e-39, -1e-39, 1e-21, 1e-19, -1e-3, 0.0]))
    S.flush_moments(opt)
    assert m.tolist() == pytest.approx([0.0, 0.0, 0.0, 1e-19, -1e-3, 0.0], rel=1e-6, abs=0)
    calls = []
    monkeypatch.setattr(T, "flush_moments", lambda o: calls.append(o))
    _train(model, tmp_path, tokens=SEQ * BATCH * 20, passes=4)
    assert len(calls) == 20 * 4 // 32


def test_the_default_corpus_is_modern_english(llama):
    from interp.dictionaries._corpus import modern_corpus_name

    _, model = llama
    plan = T._plan(
        model,
        **dict(
            layers="all",
            width=64,
            k=4,
            tokens=SEQ * BATCH,
            seq_len=SEQ,
            batch_size=BATCH,
            lr=None,
            aux_k=None,
            aux_alpha=0.0,
            dead_after=None,
            eval_tokens=SEQ,
            seed=0,
            corpus=None,
            cache_dir="/nonexistent",
            checkpoint_every=1,
            progress=False,
            passes=None,
            cross_layer=False,
            skip=False,
            train=True,
        ),
    )
    assert plan.config["corpus"] == modern_corpus_name() and plan.corpus.source.startswith("English Wikipedia")
    kjv = T._Corpus("kjv")
    assert kjv.id == "kjv" and kjv.train[0].startswith("In the beginning God created")
    with pytest.raises(ArgumentError, match="corpus='bible'"):
        T._Corpus("bible")


def test_a_cached_single_layer_run_reads_back(llama, tmp_path):
    """A run over one layer reads back by path and by name from the cache_dir it was trained in (by path it said
    'has transcoders for layers [1], not 0..0: pass model='; with model= 'no transcoder for layers [0]'; the name
    form looked in the default cache only)."""
    from interp.features import load_transcoders

    _, model = llama
    r = _train(model, tmp_path, layers=[1], tokens=SEQ * BATCH * 3)
    for loaded in (
        load_transcoders(r.path),
        load_transcoders(r.path, model),
        load_transcoders(r.path.name, model, cache_dir=tmp_path),
    ):
        (t,) = loaded
        assert t.layer == 1 and torch.equal(t.W_enc, r[1].W_enc) and torch.equal(t.W_dec, r[1].W_dec) and t.k == 4
    with pytest.raises(ResultFormatError, match="nor a name in"):
        load_transcoders(r.path.name, model)  # not in the default cache


@pytest.mark.parametrize("aux_k", [5, 2, 20])
def test_auxk_loss_takes_each_layers_own_dead_features(aux_k):
    """The AuxK loss of each layer reconstructs its residual from the min(aux_k, n_dead) largest ReLU'd
    pre-activations of its own dead features, however many the other layers have (here 0, 3 and 12 dead of 16; aux_k
    5, 2 and 20 take the dense and the gather-sum ways): checked against a dense [N, F] coefficient matrix per layer
    in float64, its gradient to the decoders too, and its gradient reaches dead features only."""
    from interp.dictionaries._train_state import TrainState, _aux_loss

    g = torch.Generator().manual_seed(0)
    s = TrainState(3, 8, 16, g)
    with torch.no_grad():
        for w in s.W_dec:
            w.normal_(generator=g)
    pre = torch.randn(3, 10, 16, generator=g, dtype=torch.float32).requires_grad_()
    resid = torch.randn(3, 10, 8, generator=g)
    dead = torch.zeros(3, 16, dtype=torch.bool)
    dead[1, [2, 7, 11]] = True
    dead[2, 4:] = True
    got = _aux_loss(s, pre, resid, dead, aux_k=aux_k)
    want = torch.zeros((), dtype=torch.float64)
    decs = [w.detach().double().requires_grad_() for w in s.W_dec]
    for i in (1, 2):
        p = pre[i].detach().double().masked_fill(~dead[i], float("-inf"))
        ka = min(aux_k, int(dead[i].sum()))
        keep = torch.zeros_like(p, dtype=torch.bool).scatter(1, p.topk(ka, dim=-1).indices, True)
        coef = torch.where(keep & dead[i], p.clamp_min(0), torch.zeros_like(p))  # [N, F]
        rec = coef @ decs[i][:, 0]
        r = resid[i].double()
        want = want + (r - rec).pow(2).sum() / (r - r.mean(0)).pow(2).sum()
    assert abs(float(got) - float(want)) <= 1e-5 * float(want)
    got.backward()
    want.backward()
    assert s.W_dec[0].grad is None and decs[0].grad is None  # layer 0 has no dead features
    for w, ref in zip(s.W_dec[1:], decs[1:]):
        assert torch.allclose(w.grad.double(), ref.grad, rtol=1e-4, atol=1e-6)
    assert pre.grad[0].abs().sum() == 0 and pre.grad[1][:, ~dead[1]].abs().sum() == 0
    assert pre.grad[2][:, :4].abs().sum() == 0 and pre.grad[2][:, 4:].abs().sum() > 0


@pytest.mark.parametrize("cross", [False, True])
def test_decode_and_its_gradient_are_the_dense_products(cross):
    """The training's sparse decode ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l'] (a gather-sum of each token's k rows per
    encoder) and its gradients to the decoders and the kept values equal a dense [N, F] coefficient matrix times each
    decoder block, in float64."""
    from interp.dictionaries._train_state import decode

    g = torch.Generator().manual_seed(1)
    n, N, F_, d, k = 4, 12, 16, 6, 3
    W = [torch.randn(F_, (n - i) if cross else 1, d, generator=g).requires_grad_() for i in range(n)]
    pre = torch.randn(n, N, F_, generator=g)
    v, idx = pre.relu().topk(k, dim=-1)
    vals = v.clone().requires_grad_()
    got = decode(W, idx, vals)
    Wd = [w.detach().double().requires_grad_() for w in W]
    vd = vals.detach().double().requires_grad_()
    coef = [torch.zeros(N, F_, dtype=torch.float64).scatter(1, idx[i], vd[i]) for i in range(n)]
    want = torch.stack(
        [sum(coef[i] @ Wd[i][:, t - i] for i in range(t + 1) if t - i < Wd[i].shape[1]) for t in range(n)]
    )
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5)
    probe = torch.randn(n, N, d, generator=g)
    (got * probe).sum().backward()
    (want * probe.double()).sum().backward()
    for w, ref in zip(W, Wd):
        assert torch.allclose(w.grad.double(), ref.grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(vals.grad.double(), vd.grad, rtol=1e-5, atol=1e-5)


def test_the_call_reports_its_whole_time_beside_the_loops(llama, tmp_path, monkeypatch):
    """train_seconds is the loop's; score_seconds the scorings' (timed here around evaluate_dictionary);
    call_seconds the whole call's, which holds both; a cached read reports the run's own figures."""
    import time

    _, model = llama
    spent = []
    real = T.evaluate_dictionary

    def timed(*a, **k):
        t = time.perf_counter()
        time.sleep(0.2)  # a scoring that costs more than the loop
        out = real(*a, **k)
        spent.append(time.perf_counter() - t)
        return out

    monkeypatch.setattr(T, "evaluate_dictionary", timed)
    t0 = time.perf_counter()
    r = _train(model, tmp_path, tokens=SEQ * BATCH * 3)
    wall = time.perf_counter() - t0
    assert len(spent) == 2 and r.score_seconds >= sum(spent) >= 0.4
    assert r.call_seconds >= r.train_seconds + r.score_seconds and r.call_seconds <= wall
    assert r.tokens_per_second == pytest.approx(r.tokens / r.train_seconds)
    again = _train(model, tmp_path, tokens=SEQ * BATCH * 3)
    assert again.from_cache and again.call_seconds == r.call_seconds and again.score_seconds == r.score_seconds


def test_eval_tokens_zero_scores_nothing_and_trains_the_same_weights(llama, tmp_path, monkeypatch):
    _, model = llama
    scored = _train(model, tmp_path / "a", tokens=SEQ * BATCH * 3)
    monkeypatch.setattr(T, "evaluate_dictionary", lambda *a, **k: pytest.fail("scored with eval_tokens=0"))
    bare = _train(model, tmp_path / "b", tokens=SEQ * BATCH * 3, eval_tokens=0)
    assert bare.evaluation is None and bare.transfer is None and bare.eval_tokens == 0
    assert all(math.isnan(v) for v in bare.fvu + bare.l0 + bare.dead + bare.loss_recovered + bare.kl)
    for a, b in zip(scored.transcoders, bare.transcoders):
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    again = _train(model, tmp_path / "b", tokens=SEQ * BATCH * 3, eval_tokens=0)
    assert again.from_cache and again.evaluation is None
    for bad in (1, SEQ - 1, -SEQ):
        with pytest.raises(ArgumentError, match=f"eval_tokens={bad}"):
            _train(model, tmp_path / "c", eval_tokens=bad)
