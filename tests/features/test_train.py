"""Training transcoders: checked against computations that do not use the training code.

* on a tiny Llama, the held-out FVU and L0 are recomputed from the Hugging Face module's own MLP input and
  output (forward hooks on ``mlp``, not the engine) and the trained weights: they equal the reported ones,
  FVU is well below the trivial baseline 1 (predicting the mean), and L0 == k;
* an interrupted run (stopped after 7 steps, checkpoint every 3) resumes and ends with the same weights
  as an uninterrupted run with the same seed;
* finished dictionaries are cached and reloaded; a failed final write leaves no file behind; a damaged
  cache is a typed error; bad arguments are typed errors naming the argument;
* the bundled corpus (the King James Bible) reads, with disjoint training and held-out chapters; on
  smollm2 two layers train from it (real).
"""

from __future__ import annotations

import random

import pytest
import torch

import interp.features._train as T
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


def _in_the_old_layout(path, n: int) -> None:
    """Rewrite the checkpoint at ``path`` as the per-layer training wrote it before cross-layer training existed: its
    parameters W_enc, b_enc, W_dec [n, F, d] (one tensor, rows unit-norm per layer), b_dec, and the state_dict of an
    Adam over those four tensors (W_dec's moments [n, F, d])."""
    st = torch.load(path, weights_only=True)
    W_enc, b_enc, *decs, b_dec = st["params"]
    assert len(decs) == n and all(tuple(w.shape[1:2]) == (1,) for w in decs)
    old = [W_enc, b_enc, torch.stack([w[:, 0] for w in decs]), b_dec]
    ps = [p.clone().requires_grad_() for p in old]
    opt = torch.optim.Adam(ps, lr=1.0)
    group = {k: v for k, v in st["opt"]["param_groups"][0].items() if k != "params"}
    opt.param_groups[0].update(group)
    for p, idx in zip(ps, ([0], [1], list(range(2, 2 + n)), [n + 2])):
        parts = [st["opt"]["state"][i] for i in idx]
        moments = {
            name: torch.stack([s[name][:, 0] for s in parts]) if p is ps[2] else parts[0][name]
            for name in ("exp_avg", "exp_avg_sq")
        }
        opt.state[p] = {"step": parts[0]["step"].clone(), **{k: v.clone() for k, v in moments.items()}}
    old_st = {"params": [p.detach() for p in ps], "since": st["since"], "sx": st["sx"], "sy": st["sy"]}
    torch.save(old_st | {"opt": opt.state_dict(), "step": st["step"]}, path)


def test_a_checkpoint_of_the_older_per_layer_layout_resumes(llama, tmp_path, monkeypatch):
    """A checkpoint written by the per-layer training before cross-layer training existed (one stacked W_dec [n, F,
    d] among four parameters, Adam's moments alike) resumes — it was read as damaged — and the run ends with the same
    weights as an uninterrupted one; a truly damaged checkpoint is still a ResultFormatError."""
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
    monkeypatch.setattr(T, "_step", step)
    run = next((tmp_path / "b").glob("transcoders/*/*"))
    _in_the_old_layout(run / "checkpoint.pt", 2)
    old = torch.load(run / "checkpoint.pt", weights_only=True)
    assert len(old["params"]) == 4 and tuple(old["params"][2].shape) == (2, 64, 32)
    assert sorted(old["opt"]["state"]) == [0, 1, 2, 3] and int(old["step"]) == 6
    resumed = _train(model, tmp_path / "b", tokens=SEQ * BATCH * 10)
    assert not resumed.from_cache and resumed.path == run
    for a, b in zip(full.transcoders, resumed.transcoders):
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert resumed.fvu == full.fvu

    monkeypatch.setattr(T, "_step", stop_after_7)
    calls["n"] = 0
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
    import safetensors.torch as st

    real = st.save_file

    def half_write(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(st, "save_file", half_write)
    with pytest.raises(OSError):
        _train(model, tmp_path, **kw)
    run = next(tmp_path.glob("transcoders/*/*"))
    assert sorted(p.name for p in run.iterdir()) == []
    monkeypatch.setattr(st, "save_file", real)
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
    assert r.corpus.startswith("King James Bible") and r.details["licence"]


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
    from interp.engine import Engine

    x, _ = T._activations(Engine.of(m), ids, list(range(len(mlps))))
    for l in range(len(mlps)):
        want = seen[l][:, 1:].reshape(-1, seen[l].shape[-1])
        err = float((x[l] - want).abs().max() / want.abs().max())
        print(f"{family} layer {l}: training input vs HF MLP input, max relative {err:.1e}")
        assert err <= 1e-5
