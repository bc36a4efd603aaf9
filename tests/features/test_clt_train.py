"""Training a cross-layer transcoder (``train_transcoders(..., cross_layer=True)``), checked without the training code.

* on a tiny Llama, the held-out FVU of each layer's joint reconstruction and each encoder's L0 are recomputed from
  the Hugging Face module's own MLP inputs and outputs (forward hooks, not the engine) and the trained weights,
  term by term (ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l'] + b_dec[l']): they equal the reported ones; FVU is below the
  trivial baseline 1, and the decoders to later layers were learnt (without them layer 1's FVU grows);
* an interrupted run resumes to the same weights as an uninterrupted one; the finished CLT is cached in
  circuit-tracer's layout (load_transcoders reads it back, equal) and returned without training next time;
* bad input is a typed error.
"""

from __future__ import annotations

import pytest
import torch

import interp.dictionaries._train as T
from features.test_train import BATCH, SEQ, _docs, _hf_mlp_io
from interp.errors import ArgumentError
from interp.features import CrossLayerTranscoder, TrainedCrossLayerTranscoder, load_transcoders, train_transcoders
from interp.engine import model_from_hf
from tiny_models import tiny_hf_model, tiny_tokenizer


@pytest.fixture(scope="module")
def llama():
    hf = tiny_hf_model("llama")
    return hf, model_from_hf(hf, tiny_tokenizer(), name="tiny-llama")


def _train(model, cache, **kw) -> TrainedCrossLayerTranscoder:
    args = dict(
        layers="all",
        width=64,
        k=4,
        tokens=SEQ * BATCH * 40,
        seq_len=SEQ,
        batch_size=BATCH,
        lr=1e-2,
        passes=2,
        corpus=_docs(),
        cache_dir=cache,
        progress=False,
        eval_tokens=SEQ * 16,
        checkpoint_every=3,
        cross_layer=True,
    )
    args.update(kw)
    r = train_transcoders(model, **args)
    assert isinstance(r, TrainedCrossLayerTranscoder)
    return r


@pytest.mark.slow
def test_clt_training_beats_the_mean_and_metrics_match_hf(llama, tmp_path):
    hf, model = llama
    r = _train(model, tmp_path)
    c = r.clt
    assert isinstance(c, CrossLayerTranscoder) and c.layers == (0, 1) and c.activation == "topk" and c.k == 4
    assert r.transcoders is c
    tok = tiny_tokenizer()
    ids: list[int] = []
    for d in [d for i, d in enumerate(_docs()) if i % 10 == 9]:
        ids += tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    n = 16
    xs, ys = _hf_mlp_io(hf, torch.tensor(ids[: n * SEQ]).view(n, SEQ))
    fs = []
    for l in range(2):
        pre = torch.relu(xs[l] @ c.W_enc[l].T + c.b_enc[l])
        v, idx = pre.topk(4, dim=-1)
        fs.append(torch.zeros_like(pre).scatter_(-1, idx, v))
    for j in range(2):
        yhat = c.b_dec[j] + sum(fs[l] @ c.W_dec[l][:, j - l] for l in range(j + 1))
        y = ys[j]
        fvu = float((y - yhat).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
        l0 = float((fs[j] != 0).sum(-1).float().mean())
        print(f"layer {j}: FVU {fvu:.4f} (reported {r.fvu[j]:.4f}), L0 {l0:.2f}")
        assert abs(fvu - r.fvu[j]) <= 1e-4 * max(1.0, fvu)
        assert abs(l0 - r.l0[j]) <= 1e-6 and l0 == pytest.approx(4.0)
        assert fvu < 1.0  # the trivial baseline (predict the mean)
    # the decoders from layer 0 to layer 1 (zero at the start) were learnt: without them layer 1's error grows
    y = ys[1]
    alone = c.b_dec[1] + fs[1] @ c.W_dec[1][:, 0]
    cut = float((y - alone).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
    print(f"layer 1 without the layer-0 features' decoders: FVU {cut:.4f} (with them {r.fvu[1]:.4f})")
    assert cut > r.fvu[1] + 0.05
    assert r.eval_tokens == n * (SEQ - 1)
    df = r.to_dataframe()
    assert list(df["layer"]) == [0, 1] and (df["k"] == 4).all() and (df["n_features"] == 64).all()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::interp.features.DictionaryQualityWarning")  # 10 steps: FVU ≈ 1.1
def test_interrupted_clt_run_resumes_to_the_same_weights(llama, tmp_path, monkeypatch):
    _, model = llama
    full = _train(model, tmp_path / "a", tokens=SEQ * BATCH * 10, passes=1)
    calls = {"n": 0}
    step = T._step

    def stop_after_7(*a, **k):
        if calls["n"] == 7:
            raise KeyboardInterrupt
        calls["n"] += 1
        return step(*a, **k)

    monkeypatch.setattr(T, "_step", stop_after_7)
    with pytest.raises(KeyboardInterrupt):
        _train(model, tmp_path / "b", tokens=SEQ * BATCH * 10, passes=1)
    run = next((tmp_path / "b").glob("transcoders/*/*"))
    assert int(torch.load(run / "checkpoint.pt", weights_only=True)["step"]) == 6
    monkeypatch.setattr(T, "_step", step)
    resumed = _train(model, tmp_path / "b", tokens=SEQ * BATCH * 10, passes=1)
    assert resumed.tokens_per_second is None and not resumed.from_cache
    a, b = full.clt, resumed.clt
    assert torch.equal(a.W_enc, b.W_enc) and torch.equal(a.b_enc, b.b_enc) and torch.equal(a.b_dec, b.b_dec)
    assert all(torch.equal(u, v) for u, v in zip(a.W_dec, b.W_dec))
    assert resumed.fvu == full.fvu
    # cached: returned without training, equal; the cache is circuit-tracer's layout, which load_transcoders reads
    monkeypatch.setattr(T, "_step", lambda *a, **k: pytest.fail("trained again"))
    again = _train(model, tmp_path / "a", tokens=SEQ * BATCH * 10, passes=1)
    assert again.from_cache and again.fvu == full.fvu and torch.equal(again.clt.W_dec[0], a.W_dec[0])
    assert sorted(p.name for p in full.path.iterdir()) == [
        "W_dec_0.safetensors",
        "W_dec_1.safetensors",
        "W_enc_0.safetensors",
        "W_enc_1.safetensors",
        "config.yaml",
        "evaluation.safetensors",
        "metrics.json",
        "transfer.safetensors",
    ]
    loaded = load_transcoders(full.path, model)
    assert isinstance(loaded, CrossLayerTranscoder) and loaded.k == 4 and loaded.layers == (0, 1)
    assert torch.equal(loaded.W_enc, a.W_enc) and all(torch.equal(u, v) for u, v in zip(loaded.W_dec, a.W_dec))
    # a per-layer run of the same configuration is another cache entry
    assert T.train_transcoders is train_transcoders


def test_cross_layer_bad_input(llama, tmp_path):
    _, model = llama
    with pytest.raises(ArgumentError, match="cross_layer='yes'"):
        _train(model, tmp_path, cross_layer="yes")
    with pytest.raises(ArgumentError, match="layers contains 2"):
        _train(model, tmp_path, layers=[0, 2])


def test_clt_auxk_revives_through_the_own_layer_decoder():
    """A cross-layer transcoder's AuxK term reconstructs layer l's residual from encoder l's dead features through
    their decoders to layer l only: decoding d_model / 2 dead features into every later layer cost more than the
    model's forward and grew as features died (a CLT run's tokens/s fell sixfold). The gradient reaches the dead
    features' encoders and own-layer decoders, never their decoders to later layers."""
    from interp.dictionaries._train_state import TrainState, _aux_loss

    g = torch.Generator().manual_seed(0)
    s = TrainState(3, 8, 16, g, cross=True)
    with torch.no_grad():
        for w in s.W_dec:
            w.normal_(generator=g)
    x = torch.randn(3, 10, 8, generator=g)
    pre = torch.baddbmm(s.b_enc[:, None], x, s.W_enc.transpose(1, 2))
    dead = torch.zeros(3, 16, dtype=torch.bool)
    dead[:, :6] = True
    resid = torch.randn(3, 10, 8, generator=g)
    _aux_loss(s, pre, resid, dead, aux_k=4).backward()
    for i, w in enumerate(s.W_dec):
        assert w.grad is not None and w.grad[:6, 0].abs().sum() > 0 and w.grad[6:].abs().sum() == 0, i
        assert w.grad[:, 1:].abs().sum() == 0, i  # the decoders to later layers take no AuxK gradient
    assert s.W_enc.grad[:, :6].abs().sum() > 0 and s.W_enc.grad[:, 6:].abs().sum() == 0
