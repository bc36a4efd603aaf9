"""evaluate_dictionary against an independent computation: the Hugging Face model's own forward with hooks on its MLP
modules (or decoder layers, for an SAE) replacing their outputs, the dictionaries' maths written out here, and the
cross-entropy, KL, FVU, L0 and dead fraction computed by hand in float64 (every row's first position excluded)."""

from __future__ import annotations

import math

import pytest
import torch

from interp.engine import model_from_hf
from interp.errors import ArgumentError, ShapeError, UnsupportedArchitectureError
from interp.features import (
    SAE,
    DictionaryEvaluation,
    DictionaryQualityWarning,
    Transcoder,
    evaluate_dictionary,
)
from tiny_models import tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_clt, random_transcoders

L = 3
FAMILIES = ("llama", "gpt2", "neox")


def _mlps(hf, family):
    blocks = hf.transformer.h if family == "gpt2" else hf.gpt_neox.layers if family == "neox" else hf.model.layers
    return [b.mlp for b in blocks], list(blocks)


def _pair(family):
    hf = tiny_hf_model(family, n_layers=L, dtype=torch.float64)
    model = model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}-3", dtype=torch.float64, device="cpu")
    return hf, model


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request):
    return request.param, *_pair(request.param)


@pytest.fixture(scope="module")
def llama():
    return _pair("llama")


def _ids(n=5, T=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 100, (n, T), generator=g)


def _act(pre, tc):
    f = torch.relu(pre)
    if tc.activation == "topk":
        v, i = f.topk(tc.k, dim=-1)
        f = torch.zeros_like(f).scatter(-1, i, v)
    return f


def _tc_out(tc, x):
    """A per-layer transcoder's features and output, written out: act(x W_encᵀ + b_enc), f W_dec + b_dec
    (+ x W_skipᵀ)."""
    f = _act(x @ tc.W_enc.double().T + tc.b_enc.double(), tc)
    out = f @ tc.W_dec.double() + tc.b_dec.double()
    if tc.W_skip is not None:
        out = out + x @ tc.W_skip.double().T
    return f, out


def _run(hf, ids, hooks):
    """logits [n, T, V] of the HF model with forward hooks {module: fn(module, inputs, output) -> output}."""
    handles = [m.register_forward_hook(fn) for m, fn in hooks.items()]
    try:
        with torch.no_grad():
            return hf(ids).logits.double()
    finally:
        for h in handles:
            h.remove()


def _ce_kl(logits, clean, ids):
    """Mean CE and mean KL(clean ‖ ·) over the predictions of positions 1..T−2."""
    lp = torch.log_softmax(logits[:, 1:-1], -1)
    lc = torch.log_softmax(clean[:, 1:-1], -1)
    ce = -lp.gather(-1, ids[:, 2:, None]).mean()
    kl = (lc.exp() * (lc - lp)).sum(-1).mean()
    return float(ce), float(kl)


def _keep0(new, old):
    new = new.clone()
    new[:, 0] = old[:, 0]
    return new


def _reference(hf, family, ids, tcs):
    """Per layer with a transcoder: FVU, L0, dead fraction, CE spliced / zero, KL spliced; and CE clean."""
    mlps, _ = _mlps(hf, family)
    clean = _run(hf, ids, {})
    seen = {}

    def grab(l):
        def fn(mod, inp, out):
            seen[l] = (inp[0].double(), out.double())

        return fn

    _run(hf, ids, {mlps[l]: grab(l) for l in tcs})
    ce_clean, _ = _ce_kl(clean, clean, ids)
    rows = {}
    for l, tc in tcs.items():
        x, y = seen[l]
        f, yhat = _tc_out(tc, x)
        y1, yh1, f1 = y[:, 1:].reshape(-1, y.shape[-1]), yhat[:, 1:].reshape(-1, y.shape[-1]), f[:, 1:]
        fvu = float(((y1 - yh1) ** 2).sum() / ((y1 - y1.mean(0)) ** 2).sum())
        l0 = float((f1 != 0).sum(-1).double().mean())
        dead = float(((f1 != 0).sum((0, 1)) == 0).double().mean())
        spl = _run(hf, ids, {mlps[l]: lambda m, i, o, yhat=yhat: _keep0(yhat.to(o.dtype), o)})
        zero = _run(hf, ids, {mlps[l]: lambda m, i, o: _keep0(torch.zeros_like(o), o)})
        ce_s, kl_s = _ce_kl(spl, clean, ids)
        ce_z, kl_z = _ce_kl(zero, clean, ids)
        rows[f"L{l}"] = dict(
            fvu=fvu,
            l0=l0,
            dead_fraction=dead,
            ce_spliced=ce_s,
            ce_zero=ce_z,
            kl_spliced=kl_s,
            kl_zero=kl_z,
            loss_recovered=1 - (ce_s - ce_clean) / (ce_z - ce_clean),
        )
    return rows, ce_clean


def _close(ev, ref, ce_clean, tol=1e-9):
    assert ev.ce_clean == pytest.approx(ce_clean, rel=tol, abs=tol)
    for lab, want in ref.items():
        got = ev[lab]
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=tol, abs=tol), (lab, k, got[k], v)


def test_per_layer_transcoders_equal_the_hf_model_with_hooks(pair):
    family, hf, model = pair
    tcs = random_transcoders(model, 24, seed=1, activation="topk", k=4)
    tcs = [t.to(dtype=torch.float64) for t in tcs]
    ids = _ids()
    ev = evaluate_dictionary(model, tcs, tokens=ids, batch_size=2, spliced_all=False)
    ref, ce_clean = _reference(hf, family, ids, dict(enumerate(tcs)))
    _close(ev, ref, ce_clean)
    assert ev.labels == ["L0", "L1", "L2"]
    assert ev.n_tokens == 5 * 11 and ev.n_predictions == 5 * 10


def test_skip_transcoder_and_partial_set(llama):
    hf, model = llama
    tcs = [t.to(dtype=torch.float64) for t in random_transcoders(model, 16, seed=2, skip=True)]
    ids = _ids(3, 10, seed=1)
    ev = evaluate_dictionary(model, {1: tcs[1]}, tokens=ids)
    ref, ce_clean = _reference(hf, "llama", ids, {1: tcs[1]})
    _close(ev, ref, ce_clean)
    assert ev.labels == ["L1"]
    # a transcoder with its layer set, alone or in a list of some layers
    t2 = Transcoder(tcs[2].W_enc, tcs[2].b_enc, tcs[2].W_dec, tcs[2].b_dec, tcs[2].W_skip, layer=2)
    assert evaluate_dictionary(model, [t2], tokens=ids).labels == ["L2"]


def _all_reference(hf, family, ids, write, layers):
    """CE / KL with every layer in ``layers`` spliced at once (write(l, x) from the hooked run's own MLP input), and
    with each of them zero-ablated at once."""
    mlps, _ = _mlps(hf, family)
    clean = _run(hf, ids, {})
    spl = _run(
        hf, ids, {mlps[l]: (lambda m, i, o, l=l: _keep0(write(l, i[0].double()).to(o.dtype), o)) for l in layers}
    )
    zero = _run(hf, ids, {mlps[l]: (lambda m, i, o: _keep0(torch.zeros_like(o), o)) for l in layers})
    ce_clean, _ = _ce_kl(clean, clean, ids)
    ce_s, kl_s = _ce_kl(spl, clean, ids)
    ce_z, kl_z = _ce_kl(zero, clean, ids)
    return dict(
        ce_spliced=ce_s,
        ce_zero=ce_z,
        kl_spliced=kl_s,
        kl_zero=kl_z,
        loss_recovered=1 - (ce_s - ce_clean) / (ce_z - ce_clean),
    ), ce_clean


def test_every_transcoder_spliced_at_once(pair):
    family, hf, model = pair
    tcs = [t.to(dtype=torch.float64) for t in random_transcoders(model, 16, seed=3)]
    ids = _ids(4, 9, seed=2)
    ev = evaluate_dictionary(model, tcs, tokens=ids, batch_size=3)
    want, ce_clean = _all_reference(hf, family, ids, lambda l, x: _tc_out(tcs[l], x)[1], range(L))
    _close(ev, {"all": want}, ce_clean)
    assert math.isnan(ev["all"]["fvu"]) and ev.labels[-1] == "all"


def _clt_write(clt):
    """A CLT's writes in the hooked run, written out: layer l's output Σ_{k ≤ l} f_k W_dec[k → l] + b_dec[l]."""
    fs = {}

    def write(l, x):
        pre = x @ clt.W_enc[l].double().T + clt.b_enc[l].double()
        fs[l] = torch.relu(pre)
        out = clt.b_dec[l].double() + sum(fs[k] @ clt.W_dec[k][:, l - k].double() for k in range(l + 1))
        return out

    return write


def test_cross_layer_transcoder(llama):
    hf, model = llama
    clt = random_clt(model, 12, seed=4, dtype=torch.float64)
    ids = _ids(3, 10, seed=3)
    ev = evaluate_dictionary(model, clt, tokens=ids)
    # per layer: each layer's reconstruction from the clean MLP inputs, spliced alone
    mlps, _ = _mlps(hf, "llama")
    xs = {}
    _run(hf, ids, {mlps[l]: (lambda m, i, o, l=l: xs.__setitem__(l, i[0].double()) or o) for l in range(L)})
    write = _clt_write(clt)
    clean = _run(hf, ids, {})
    ce_clean, _ = _ce_kl(clean, clean, ids)
    for l in range(L):
        yhat = write(l, xs[l])
        spl = _run(hf, ids, {mlps[l]: lambda m, i, o, yhat=yhat: _keep0(yhat.to(o.dtype), o)})
        ce_s, kl_s = _ce_kl(spl, clean, ids)
        assert ev[f"L{l}"]["ce_spliced"] == pytest.approx(ce_s, rel=1e-9)
        assert ev[f"L{l}"]["kl_spliced"] == pytest.approx(kl_s, rel=1e-9, abs=1e-12)
    want, _ = _all_reference(hf, "llama", ids, _clt_write(clt), range(L))
    _close(ev, {"all": want}, ce_clean)


def test_sae_at_resid_post(llama):
    hf, model = llama
    g = torch.Generator().manual_seed(5)
    d, F = model.arch.d_model, 20
    sae = SAE(
        torch.randn(F, d, generator=g, dtype=torch.float64) / d**0.5,
        torch.zeros(F, dtype=torch.float64),
        torch.randn(F, d, generator=g, dtype=torch.float64),
        torch.zeros(d, dtype=torch.float64),
        layer=1,
        site="resid_post",
    )
    ids = _ids(3, 8, seed=4)
    ev = evaluate_dictionary(model, sae, tokens=ids)
    layer = hf.model.layers[1]
    clean = _run(hf, ids, {})
    seen = {}

    def out_of(o):
        return o[0] if isinstance(o, tuple) else o

    def swap(o, v):
        return (v, *o[1:]) if isinstance(o, tuple) else v

    _run(hf, ids, {layer: lambda m, i, o: seen.__setitem__("x", out_of(o).double()) or o})
    x = seen["x"]
    f = torch.relu(x @ sae.W_enc.T + sae.b_enc)
    xh = f @ sae.W_dec + sae.b_dec
    spl = _run(hf, ids, {layer: lambda m, i, o: swap(o, _keep0(xh.to(out_of(o).dtype), out_of(o)))})
    zero = _run(hf, ids, {layer: lambda m, i, o: swap(o, _keep0(torch.zeros_like(out_of(o)), out_of(o)))})
    ce_clean, _ = _ce_kl(clean, clean, ids)
    ce_s, kl_s = _ce_kl(spl, clean, ids)
    ce_z, _ = _ce_kl(zero, clean, ids)
    x1, xh1 = x[:, 1:].reshape(-1, d), xh[:, 1:].reshape(-1, d)
    want = dict(
        fvu=float(((x1 - xh1) ** 2).sum() / ((x1 - x1.mean(0)) ** 2).sum()),
        ce_spliced=ce_s,
        kl_spliced=kl_s,
        ce_zero=ce_z,
        loss_recovered=1 - (ce_s - ce_clean) / (ce_z - ce_clean),
    )
    _close(ev, {"L1.resid_post": want}, ce_clean)


def test_dense_and_density(llama):
    _, model = llama
    tcs = [t.to(dtype=torch.float64) for t in random_transcoders(model, 16, seed=6)]
    ev = evaluate_dictionary(model, tcs, tokens=_ids(), spliced_all=False, dense_threshold=0.5)
    for lab in ev.labels:
        d = ev.densities(lab)
        assert d.shape == (16,)
        assert ev[lab]["dense_fraction"] == pytest.approx(float((d > 0.5).double().mean()))
        assert ev[lab]["dead_fraction"] == pytest.approx(float((d == 0).double().mean()))
        assert ev[lab]["l0"] == pytest.approx(float(d.sum()))


def test_save_load_top_and_plot(llama, tmp_path):
    _, model = llama
    tcs = random_transcoders(model, 16, seed=7)
    ev = evaluate_dictionary(model, tcs, tokens=_ids())
    p = ev.save(tmp_path / "ev.safetensors")
    back = DictionaryEvaluation.load(p)
    assert back.to_dataframe().equals(ev.to_dataframe())
    assert torch.equal(back.density, ev.density)
    assert list(ev.top(2)["dictionary"]) == list(
        ev.to_dataframe().sort_values("loss_recovered", ascending=False)["dictionary"][:2]
    )
    fig = ev.plot()
    assert len(fig.data) == 3


def test_texts_are_cut_into_rows(llama):
    _, model = llama
    tcs = random_transcoders(model, 16, seed=8)
    text = " ".join(f"w{i % 90}" for i in range(100))
    ev = evaluate_dictionary(model, tcs, tokens=[text], seq_len=16)
    assert ev.n_tokens == (101 // 16) * 15  # 100 words and the EOS, cut into rows of 16


# ---------------------------------------------------------------------------------------------- bad input


def test_a_dictionary_of_another_model_names_both(llama):
    _, model = llama
    tc = random_transcoders(model, 8)[0]
    wide = Transcoder(torch.zeros(8, 48), torch.zeros(8), torch.zeros(8, 48), torch.zeros(48), layer=0)
    with pytest.raises(ShapeError, match=r"d_model=48.*d_model=32"):
        evaluate_dictionary(model, [wide], tokens=_ids())
    with pytest.raises(ShapeError, match=r"layer 7.*3 layers"):
        evaluate_dictionary(model, {7: tc}, tokens=_ids())
    with pytest.raises(ArgumentError, match="layer 2, given for layer 1"):
        evaluate_dictionary(model, {1: Transcoder(tc.W_enc, tc.b_enc, tc.W_dec, tc.b_dec, layer=2)}, tokens=_ids())
    with pytest.raises(ShapeError, match="d_model"):
        evaluate_dictionary(model, random_clt(n_layers=3, d_model=16, n_features=4), tokens=_ids())
    sae = SAE(torch.zeros(4, 32), torch.zeros(4), torch.zeros(4, 32), torch.zeros(32), layer=5, site="resid_pre")
    with pytest.raises(ShapeError, match="layer 5"):
        evaluate_dictionary(model, sae, tokens=_ids())


def test_an_encoder_taken_out_of_a_clt_is_refused(llama):
    _, model = llama
    clt = random_clt(model, 8, seed=9)
    with pytest.raises(ArgumentError, match="pass the CrossLayerTranscoder itself"):
        evaluate_dictionary(model, [clt.encoder(l) for l in range(L)], tokens=_ids())  # encoder(0) refuses


def test_a_trained_set_is_read_through_its_transcoders(llama):
    _, model = llama
    tcs = random_transcoders(model, 8, seed=10)

    class Trained:  # what train_transcoders returns: the set in .transcoders
        transcoders = tcs

    a = evaluate_dictionary(model, Trained(), tokens=_ids())
    b = evaluate_dictionary(model, tcs, tokens=_ids())
    assert a.to_dataframe().equals(b.to_dataframe())


def test_unknown_layer_of_a_partial_list(llama):
    _, model = llama
    tcs = random_transcoders(model, 8)
    with pytest.raises(ArgumentError, match="layer is unknown"):
        evaluate_dictionary(model, tcs[:2], tokens=_ids())


def test_too_little_text_is_refused_with_the_numbers(llama):
    _, model = llama
    tcs = random_transcoders(model, 16, activation="topk", k=8)
    with pytest.raises(ArgumentError, match=r"1 rows of 2 tokens give 1 scored"):
        evaluate_dictionary(model, tcs, tokens=torch.tensor([[5, 6]]))
    with pytest.raises(ArgumentError, match=r"k=8"):
        evaluate_dictionary(model, tcs, tokens=torch.tensor([[5, 6, 7, 8]]))
    with pytest.warns(DictionaryQualityWarning, match="dead fraction cannot fall below"):
        evaluate_dictionary(model, random_transcoders(model, 64, activation="topk", k=2), tokens=_ids(1, 9))
    with pytest.raises(ArgumentError, match="less than one row"):
        evaluate_dictionary(model, tcs, tokens=["w1 w2"], seq_len=16)
    with pytest.raises(ArgumentError, match="must be token ids"):
        evaluate_dictionary(model, tcs, tokens=torch.randn(2, 5))


def test_an_encoder_model_is_refused():
    hf = tiny_hf_model("bert", n_layers=2)
    model = model_from_hf(hf, tiny_tokenizer(), name="tiny-bert", device="cpu")
    with pytest.raises(UnsupportedArchitectureError, match="next-token"):
        evaluate_dictionary(model, random_transcoders(model, 8), tokens=_ids())
