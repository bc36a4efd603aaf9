"""Transcoders: the three activations, and load_transcoders on a directory in circuit-tracer's format
(written here with plain safetensors), with typed errors naming the file and the key."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from interp.errors import ArgumentError, ResultFormatError
from interp.features import Transcoder, load_transcoders

D, F = 8, 12


def _tensors(seed: int, *, jump: bool = False, skip: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = {
        "W_enc": torch.randn(F, D, generator=g),
        "W_dec": torch.randn(F, D, generator=g),
        "b_enc": torch.randn(F, generator=g),
        "b_dec": torch.randn(D, generator=g),
    }
    if jump:
        t["activation_function.threshold"] = torch.rand(F, generator=g)
    if skip:
        t["W_skip"] = torch.randn(D, D, generator=g)
    return t


def test_activations():
    t = _tensors(0)
    x = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    pre = x @ t["W_enc"].T + t["b_enc"]
    relu = Transcoder(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"])
    assert torch.equal(relu.encode(x), torch.relu(pre))
    thr = torch.full((F,), 0.5)
    jump = Transcoder(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], activation="jumprelu", threshold=thr)
    assert torch.equal(jump.encode(x), pre * (pre > 0.5))
    topk = Transcoder(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], activation="topk", k=2)
    f = topk.encode(x)
    assert ((f > 0).sum(-1) <= 2).all()
    assert torch.equal(f.max(-1).values, torch.relu(pre).max(-1).values)
    skip = Transcoder(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], W_skip=torch.eye(D))
    assert torch.allclose(skip.decode(skip.encode(x), x), relu.decode(relu.encode(x)) + x)
    with pytest.raises(ArgumentError, match="needs the MLP input"):
        skip.decode(skip.encode(x))


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"activation": "gelu"}, "activation="),
        ({"activation": "topk"}, "k in"),
        ({"activation": "jumprelu"}, "threshold"),
        ({"W_skip": torch.zeros(3, 3)}, "W_skip"),
    ],
)
def test_bad_transcoder(kw, match):
    t = _tensors(0)
    with pytest.raises(ArgumentError, match=match):
        Transcoder(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], **kw)


def test_load_circuit_tracer_format(tmp_path):
    written = [_tensors(0, jump=True, skip=True), _tensors(1, jump=True, skip=True)]
    for i, t in enumerate(written):
        save_file(t, str(tmp_path / f"layer_{i}.safetensors"))
    (tmp_path / "config.yaml").write_text(
        "model_kind: transcoder_set\nfeature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
        "scan: test\ntranscoders:\n  - layer_0.safetensors\n  - " + str(tmp_path / "layer_1.safetensors") + "\n"
    )
    tcs = load_transcoders(tmp_path)
    assert len(tcs) == 2
    for tc, t in zip(tcs, written):
        assert tc.activation == "jumprelu"
        assert torch.equal(tc.W_enc, t["W_enc"]) and torch.equal(tc.W_dec, t["W_dec"])
        assert torch.equal(tc.b_enc, t["b_enc"]) and torch.equal(tc.b_dec, t["b_dec"])
        assert torch.equal(tc.threshold, t["activation_function.threshold"]) and torch.equal(tc.W_skip, t["W_skip"])
    (tmp_path / "config.yaml").unlink()  # without a config: layer_0, layer_1, ... in order
    assert [torch.equal(a.W_enc, b.W_enc) for a, b in zip(load_transcoders(tmp_path), tcs)] == [True, True]


def test_plain_relu_file(tmp_path):
    save_file(_tensors(3), str(tmp_path / "layer_0.safetensors"))
    (tc,) = load_transcoders(tmp_path, dtype=torch.float64)
    assert tc.activation == "relu" and tc.W_skip is None and tc.W_enc.dtype == torch.float64


def test_bad_files(tmp_path):
    with pytest.raises(ResultFormatError, match="not a directory"):
        load_transcoders(tmp_path / "nope")
    with pytest.raises(ResultFormatError, match="layer_0"):
        load_transcoders(tmp_path)
    t = _tensors(0)
    del t["b_dec"]
    save_file(t, str(tmp_path / "layer_0.safetensors"))
    with pytest.raises(ResultFormatError, match=r"layer_0\.safetensors.*'b_dec'"):
        load_transcoders(tmp_path)
    (tmp_path / "layer_0.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ResultFormatError, match="layer_0.safetensors"):
        load_transcoders(tmp_path)
    t = _tensors(0)
    t["W_dec"] = torch.zeros(F, D + 1)
    save_file(t, str(tmp_path / "layer_0.safetensors"))
    with pytest.raises(ResultFormatError, match="W_dec"):
        load_transcoders(tmp_path)
    (tmp_path / "config.yaml").write_text("transcoders: 3\n")
    with pytest.raises(ResultFormatError, match="config.yaml.*transcoders"):
        load_transcoders(tmp_path)


def test_to_reads_its_arguments_as_torch_does():
    """.to(dtype) positional was read as a device (torch's raw TypeError); every dictionary class reads .to's
    arguments as torch.nn.Module.to does, and bad ones are ArgumentErrors."""
    from interp.features import SAE
    from tiny_transcoders import random_clt

    t = _tensors(0, jump=True, skip=True)
    tc = Transcoder(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], t["W_skip"], "jumprelu", torch.rand(F), layer=2)
    sae = SAE(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], layer=1, site="resid_post")
    clt = random_clt(n_layers=2, d_model=D, n_features=F)
    for d in (tc, sae, clt):
        for moved in (d.to(torch.float64), d.to("cpu", torch.float64), d.to(device="cpu", dtype=torch.float64)):
            assert type(moved) is type(d)
            assert moved.W_enc.dtype == torch.float64 and torch.equal(moved.W_enc, d.W_enc.double())
            assert all(w.dtype == torch.float64 for w in (moved.W_dec if isinstance(d.W_dec, tuple) else [moved.W_dec]))
        assert d.to("cpu").W_enc.dtype == torch.float32
        assert d.to(torch.zeros(1, dtype=torch.float64)).b_dec.dtype == torch.float64  # .to(tensor)
        assert d.to(torch.device("cpu"), dtype=torch.bfloat16).b_enc.dtype == torch.bfloat16
        with pytest.raises(ArgumentError, match="dtype=torch.int64"):
            d.to(torch.int64)
        with pytest.raises(ArgumentError, match="device='gpu'"):
            d.to("gpu")
        with pytest.raises(ArgumentError, match="dtype twice"):
            d.to(torch.float64, dtype=torch.float32)
        with pytest.raises(ArgumentError, match="must be a torch.dtype"):
            d.to("cpu", "cpu")
        with pytest.raises(ArgumentError, match="non_blocking"):
            d.to("cpu", non_blocking=True)
    assert tc.to(torch.float64).layer == 2 and sae.to(torch.float64).site == "resid_post"
