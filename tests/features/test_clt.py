"""Cross-layer transcoders: the maths against a hand computation, circuit-tracer's format against its own code.

* ``CrossLayerTranscoder.reconstruct`` = the sum written out feature by feature (ŷ_l' = Σ_{l ≤ l'} f_l W_dec[l → l']
  + b_dec[l'] + x_l' W_skip[l']ᵀ, each activation by its definition) in float64, for every activation;
* a CLT whose decoders to later layers are zero is the per-layer transcoders of its own-layer decoders;
* the fixtures written by circuit-tracer 0.5.0's own ``CrossLayerTranscoder.to_safetensors`` (ReLU and JumpReLU;
  scripts/sidenv/make_dictionary_fixtures.py circuit_tracer_clt, in a side environment) load as one CLT whose
  activations and reconstruction equal those circuit-tracer's ``load_clt`` computed from the same files;
* interp's writer (circuit-tracer's layout, TopK's k in metadata) reads back bit-equal; bad files, configs that read
  another hook, a model of another shape and bad constructor arguments are typed errors.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from interp.errors import ArgumentError, ResultFormatError, ShapeError, UnsupportedOperationError
from interp.features import ACTIVATIONS, CrossLayerTranscoder, Transcoder, load_transcoders
from interp.dictionaries._formats import clt_files
from tiny_models import tiny_model
from tiny_transcoders import random_clt

FIX = Path(__file__).parent / "fixtures" / "dictionaries"


def _act_by_hand(pre: list[float], activation: str, thr, k) -> list[float]:
    if activation == "relu":
        return [max(p, 0.0) for p in pre]
    if activation == "jumprelu":
        return [p if p > float(thr[i]) else 0.0 for i, p in enumerate(pre)]
    if activation == "batchtopk":
        return [p if p > float(thr) and p > 0 else 0.0 for p in pre]
    keep = sorted(range(len(pre)), key=lambda i: -pre[i])[:k]  # topk: the k largest, then relu
    return [max(pre[i], 0.0) if i in keep else 0.0 for i in range(len(pre))]


def _reconstruct_by_hand(c: CrossLayerTranscoder, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Feature by feature and term by term, in Python floats: f_l and ŷ_l' at every layer and token."""
    L, N, d = xs.shape
    F = c.n_features
    acts = torch.zeros(L, N, F, dtype=torch.float64)
    out = torch.zeros(L, N, d, dtype=torch.float64)
    for n in range(N):
        for l in range(L):
            pre = [
                sum(float(xs[l, n, a]) * float(c.W_enc[l, f, a]) for a in range(d)) + float(c.b_enc[l, f])
                for f in range(F)
            ]
            thr = None if c.threshold is None else c.threshold[l]
            acts[l, n] = torch.tensor(_act_by_hand(pre, c.activation, thr, c.k), dtype=torch.float64)
        for j in range(L):
            for a in range(d):
                v = float(c.b_dec[j, a])
                for l in range(j + 1):
                    v += sum(float(acts[l, n, f]) * float(c.W_dec[l][f, j - l, a]) for f in range(F))
                if c.W_skip is not None:
                    v += sum(float(xs[j, n, b]) * float(c.W_skip[j, a, b]) for b in range(d))
                out[j, n, a] = v
    return acts, out


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("skip", [False, True])
def test_reconstruction_is_the_sum_over_earlier_layers(activation, skip):
    c = random_clt(
        n_features=6, n_layers=3, d_model=5, activation=activation, skip=skip, k=2, dtype=torch.float64, seed=3
    )
    xs = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    acts, out = _reconstruct_by_hand(c, xs)
    assert int((acts != 0).sum()) > 0 and int((acts == 0).sum()) > 0  # some features on, some off
    assert torch.allclose(c.encode(xs), acts, rtol=0, atol=1e-12)
    got = c.reconstruct(xs)
    print(f"{activation} skip={skip}: max |ŷ − hand| = {float((got - out).abs().max()):.2e}")
    assert torch.allclose(got, out, rtol=0, atol=1e-12)
    # the later layers do receive the earlier layers' features: dropping layer 0's decoders to layer 2 changes ŷ_2
    cut = CrossLayerTranscoder(
        c.W_enc,
        c.b_enc,
        (c.W_dec[0] * torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)[:, None], *c.W_dec[1:]),
        c.b_dec,
        c.W_skip,
        c.activation,
        c.threshold,
        c.k,
    )
    assert torch.equal(cut.reconstruct(xs)[:2], got[:2]) and not torch.allclose(cut.reconstruct(xs)[2], got[2])
    # decoder(l, l') is the column l' − l of W_dec[l]; one layer's encode is encode_layer
    assert torch.equal(c.decoder(1, 2), c.W_dec[1][:, 1]) and torch.equal(c.encode_layer(xs[2], 2), c.encode(xs)[2])


def test_without_later_decoders_it_is_the_per_layer_transcoders():
    c = random_clt(n_features=8, n_layers=3, d_model=6, activation="jumprelu", skip=True, dtype=torch.float64)
    own = CrossLayerTranscoder(
        c.W_enc,
        c.b_enc,
        tuple(torch.cat([w[:, :1], torch.zeros_like(w[:, 1:])], 1) for w in c.W_dec),
        c.b_dec,
        c.W_skip,
        "jumprelu",
        c.threshold,
    )
    xs = torch.randn(3, 7, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for l in range(3):
        t = Transcoder(c.W_enc[l], c.b_enc[l], c.W_dec[l][:, 0], c.b_dec[l], c.W_skip[l], "jumprelu", c.threshold[l])
        assert torch.allclose(own.reconstruct(xs)[l], t.decode(t.encode(xs[l]), xs[l]), rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")  # d_model 32, 2 layers: the fixtures' shape


@pytest.mark.parametrize(
    "name, activation", [("circuit_tracer_clt", "relu"), ("circuit_tracer_clt_jumprelu", "jumprelu")]
)
def test_circuit_tracer_written_clt(name, activation, llama):
    """circuit-tracer's own to_safetensors wrote the files; its load_clt's encode and forward gave the numbers."""
    c = load_transcoders(FIX / name, llama)
    assert isinstance(c, CrossLayerTranscoder) and c.activation == activation and c.layers == (0, 1)
    assert (c.n_layers, c.n_features, c.d_model) == (2, 8, 32) and c.W_skip is None
    exp = load_file(str(FIX / name / "expected.safetensors"))
    acts = c.encode(exp["x"])
    assert int((acts != 0).sum()) > 0 and int((acts == 0).sum()) > 0
    assert torch.allclose(acts, exp["acts"], rtol=1e-5, atol=1e-6)
    out = c.reconstruct(exp["x"])
    print(
        f"{name}: max |ŷ − circuit-tracer| = {float((out - exp['out']).abs().max()):.2e} "
        f"(|ŷ| ≤ {float(out.abs().max()):.2f})"
    )
    assert torch.allclose(out, exp["out"], rtol=1e-5, atol=1e-5)
    assert load_transcoders(str(FIX / name)).layers == (0, 1)  # without the model: the encoder files' order


def _write(c: CrossLayerTranscoder, root: Path) -> None:
    files, config = clt_files(c)
    root.mkdir(parents=True, exist_ok=True)
    for name, (ts, meta) in files.items():
        save_file(ts, str(root / name), metadata=meta)
    (root / "config.yaml").write_text(config)


@pytest.mark.parametrize("activation", ["relu", "jumprelu", "topk"])
def test_written_clt_reads_back(activation, tmp_path, llama):
    c = random_clt(llama, activation=activation, k=4)
    _write(c, tmp_path / "clt")
    back = load_transcoders(tmp_path / "clt", llama)
    assert isinstance(back, CrossLayerTranscoder) and (back.activation, back.k, back.layers) == (
        activation,
        c.k,
        (0, 1),
    )
    for name in ("W_enc", "b_enc", "b_dec", "threshold"):
        a, b = getattr(c, name), getattr(back, name)
        assert (a is None and b is None) or torch.equal(a, b), name
    assert all(torch.equal(a, b) for a, b in zip(c.W_dec, back.W_dec))


def _copy(tmp_path: Path, name: str = "circuit_tracer_clt") -> Path:
    dst = tmp_path / name
    shutil.copytree(FIX / name, dst)
    return dst


def test_bad_files_are_typed_errors(tmp_path, llama):
    d = _copy(tmp_path)
    (d / "config.yaml").write_text(
        "model_kind: cross_layer_transcoder\nfeature_input_hook: hook_resid_mid\nfeature_output_hook: hook_mlp_out\n"
    )
    with pytest.raises(UnsupportedOperationError, match="feature_input_hook='hook_resid_mid'"):
        load_transcoders(d)
    (d / "config.yaml").write_text("model_kind: cross_layer_transcoder\nfeature_output_hook: hook_resid_post\n")
    with pytest.raises(UnsupportedOperationError, match="feature_output_hook='hook_resid_post'"):
        load_transcoders(d)
    d = _copy(tmp_path / "a")
    (d / "W_dec_1.safetensors").unlink()
    with pytest.raises(ResultFormatError, match="W_dec_1"):
        load_transcoders(d)
    d = _copy(tmp_path / "b")
    (d / "W_enc_1.safetensors").rename(d / "W_enc_2.safetensors")
    with pytest.raises(ResultFormatError, match="W_enc_2"):
        load_transcoders(d)
    d = _copy(tmp_path / "c", "circuit_tracer_clt_jumprelu")
    t = load_file(str(d / "W_enc_1.safetensors"))
    del t["threshold_1"]
    save_file(t, str(d / "W_enc_1.safetensors"))
    with pytest.raises(ResultFormatError, match="threshold"):
        load_transcoders(d)
    d = _copy(tmp_path / "d")
    t = load_file(str(d / "W_dec_0.safetensors"))
    save_file({"W_dec_0": t["W_dec_0"][:, :1].contiguous()}, str(d / "W_dec_0.safetensors"))  # one output layer, not 2
    with pytest.raises(ResultFormatError, match=r"W_dec\[0\]"):
        load_transcoders(d)
    (d / "W_dec_0.safetensors").write_bytes(b"garbage")
    with pytest.raises(ResultFormatError, match="safetensors"):
        load_transcoders(d)


def test_clt_of_another_model_shape(tmp_path, llama):
    with pytest.raises(ShapeError, match="layers"):
        load_transcoders(FIX / "circuit_tracer_clt", tiny_model("llama", n_layers=3))
    _write(random_clt(n_layers=2, d_model=16, n_features=4), tmp_path / "narrow")
    with pytest.raises(ShapeError, match="d_model=16"):
        load_transcoders(tmp_path / "narrow", llama)
    with pytest.raises(UnsupportedOperationError, match="skip"):
        clt_files(random_clt(llama, skip=True))


def test_bad_construction_is_an_argument_error():
    c = random_clt(n_layers=3, d_model=4, n_features=5)
    args = (c.W_enc, c.b_enc, c.W_dec, c.b_dec)
    bad = [
        (dict(W_dec=c.W_dec[:2]), "W_dec must be a tuple of 3"),
        (dict(W_dec=(c.W_dec[0], c.W_dec[0], c.W_dec[2])), r"W_dec\[1\] \[5, 3, 4\] must be \[5, 2, 4\]"),
        (dict(W_enc=c.W_enc[0]), "W_enc"),
        (dict(b_dec=c.b_dec[:2]), "b_dec"),
        (dict(activation="gelu"), "activation='gelu'"),
        (dict(activation="jumprelu"), "threshold of shape"),
        (dict(activation="topk", k=0), "k=0"),
        (dict(activation="topk", k=6), "k=6"),
        (dict(W_skip=torch.zeros(3, 4, 3)), "W_skip"),
        (dict(layers=(0, 2, 1)), "ascending"),
        (dict(layers=(0, 1)), "layers="),
        (dict(context_length=0), "context_length=0"),
    ]
    for kw, match in bad:
        a = dict(zip(("W_enc", "b_enc", "W_dec", "b_dec"), args)) | kw
        with pytest.raises(ArgumentError, match=match):
            CrossLayerTranscoder(**a)
    xs = torch.zeros(3, 2, 4)
    with pytest.raises(ArgumentError, match=r"xs \[2, 2, 4\] must be \[n_layers=3"):
        c.encode(xs[:2])
    with pytest.raises(ArgumentError, match="target=0"):
        c.decoder(1, 0)
    with pytest.raises(ArgumentError, match="layer=3"):
        c.encode_layer(xs[0], 3)
    s = random_clt(n_layers=3, d_model=4, n_features=5, skip=True)
    with pytest.raises(ArgumentError, match="needs the MLP inputs xs"):
        s.decode(s.encode(xs))


def test_qk_attribution_takes_a_clt(llama):
    """attribution_graph, intervene and QK attribution take a CLT (tests/features/test_clt_graph.py,
    tests/features/test_qk_clt.py): circuit-tracer's CLT's terms sum to the model's score."""
    from interp.features import qk_attribution

    c = load_transcoders(FIX / "circuit_tracer_clt", llama)
    r = qk_attribution(llama, "w1 w2 w3", c, 1, 0, query_pos=-1, key_pos=0)
    assert r.relative_error <= 1e-4 and any(lab.startswith("L0.F") for lab in r.q_labels)


def test_clt_without_a_declared_read_point_is_refused(tmp_path, llama):
    """circuit-tracer's to_safetensors writes no config.yaml and its CLTs read hook_resid_mid by default: a folder that
    does not declare its read point was read as MLP-input encoders with no message; now it is refused, saying how to
    declare it (input_hook= or a config.yaml), and reads as before once declared."""
    d = _copy(tmp_path)
    (d / "config.yaml").unlink()
    with pytest.raises(ResultFormatError, match=r"no config.yaml.*hook_resid_mid.*input_hook='mlp.hook_in'"):
        load_transcoders(d, llama)
    (d / "config.yaml").write_text("model_kind: cross_layer_transcoder\n")
    with pytest.raises(ResultFormatError, match="names no feature_input_hook.*input_hook="):
        load_transcoders(d)
    ref = load_transcoders(FIX / "circuit_tracer_clt", llama)
    for hook in ("mlp.hook_in", "blocks.0.hook_mlp_in"):
        c = load_transcoders(d, llama, input_hook=hook)
        assert torch.equal(c.W_enc, ref.W_enc) and all(torch.equal(a, b) for a, b in zip(c.W_dec, ref.W_dec))
    with pytest.raises(UnsupportedOperationError, match="input_hook='hook_resid_mid'.*before the MLP's norm"):
        load_transcoders(d, input_hook="hook_resid_mid")
    with pytest.raises(UnsupportedOperationError, match="input_hook=3"):
        load_transcoders(d, input_hook=3)
    d2 = _copy(tmp_path / "declared")  # its config declares mlp.hook_in
    with pytest.raises(ArgumentError, match="input_hook='ln2.hook_normalized' but .*feature_input_hook='mlp.hook_in'"):
        load_transcoders(d2, input_hook="ln2.hook_normalized")
    assert isinstance(load_transcoders(d2, input_hook="mlp.hook_in"), CrossLayerTranscoder)


def test_clt_skip_weights_are_read_as_circuit_tracer_applies_them(tmp_path):
    """circuit-tracer's to_safetensors writes W_skip_{i} into the encoder files and adds x_i @ W_skip_i (its
    compute_reconstruction); they were dropped silently."""
    g = torch.Generator().manual_seed(3)
    L, F_, d = 2, 5, 4
    root = tmp_path / "skip"
    root.mkdir()
    W_skip = torch.randn(L, d, d, generator=g, dtype=torch.float64)
    enc = {}
    for i in range(L):
        enc[i] = {
            f"W_enc_{i}": torch.randn(F_, d, generator=g, dtype=torch.float64),
            f"b_enc_{i}": torch.randn(F_, generator=g, dtype=torch.float64),
            f"b_dec_{i}": torch.randn(d, generator=g, dtype=torch.float64),
            f"W_skip_{i}": W_skip[i].clone(),
        }
        save_file(enc[i], str(root / f"W_enc_{i}.safetensors"))
        save_file(
            {f"W_dec_{i}": torch.randn(F_, L - i, d, generator=g, dtype=torch.float64)},
            str(root / f"W_dec_{i}.safetensors"),
        )
    c = load_transcoders(root, input_hook="mlp.hook_in", dtype=torch.float64)
    x = torch.randn(L, 3, d, generator=g, dtype=torch.float64)
    no_skip = replace(c, W_skip=None)
    expect = no_skip.reconstruct(x) + torch.stack([x[i] @ W_skip[i] for i in range(L)])  # circuit-tracer's x @ W_skip
    assert torch.allclose(c.reconstruct(x), expect, atol=1e-12)
    save_file({k: v for k, v in enc[1].items() if k != "W_skip_1"}, str(root / "W_enc_1.safetensors"))
    with pytest.raises(ResultFormatError, match="W_skip_"):
        load_transcoders(root, input_hook="mlp.hook_in")
