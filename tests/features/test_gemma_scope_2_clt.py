"""Gemma Scope 2's cross-layer transcoders (its ``JumpReLUMultiLayerSAE``: per layer i ``params_layer_{i}.safetensors``
with ``w_enc`` [d, F], ``b_enc``, ``threshold``, ``b_dec``, ``w_dec`` [F, L, d], ``affine_skip_connection`` [d, d], as
circuit-tracer's ``load_gemma_scope_2_clt`` reads them), written here in that layout for a tiny 3-layer Llama:

* load_transcoders reads one CrossLayerTranscoder; its reconstruction of every layer's MLP output from the Hugging Face
  MLP's own inputs (forward pre-hooks) equals JumpReLUMultiLayerSAE's maths written out term by term (float64,
  1e-12): f_i = (pre_i > θ_i)·relu(pre_i), pre_i = x_i w_enc_i + b_enc_i; ŷ_j = Σ_{i ≤ j} f_i w_dec_i[:, j] + b_dec_j +
  x_j affine_j — and, with the writes to earlier layers zero, its all-to-all decoder Σ_i f_i w_dec_i[:, j];
* a decoder's writes to the layers before its own are dropped (circuit-tracer's reading);
* the attribution graph over it closes (float64);
* a w_dec of another layer count, a missing key and skip weights in some files only are ResultFormatErrors.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from features.test_attribution_graph import _check_closure
from interp.engine import model_from_hf
from interp.errors import ResultFormatError
from interp.features import CrossLayerTranscoder, attribution_graph, load_transcoders
from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer

PROMPT = "w1 w2 w3 w4 w5 w6"
L, F = 3, 10


@pytest.fixture(scope="module")
def llama():
    hf = tiny_hf_model("llama", n_layers=L, dtype=torch.float64)
    return hf, model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-3", dtype=torch.float64)


def _params(d: int, seed: int, *, causal: bool, skip: bool = True) -> list[dict[str, torch.Tensor]]:
    """Random float64 layer files in Gemma Scope 2's CLT layout; ``causal``: w_dec zero to the earlier layers."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=g, dtype=torch.float64) * s  # noqa: E731
    out = []
    for i in range(L):
        w_dec = r(F, L, d, s=F**-0.5)
        if causal:
            w_dec[:, :i] = 0
        p = {
            "w_enc": r(d, F, s=d**-0.5),
            "b_enc": r(F, s=0.1),
            "threshold": r(F, s=0.05).abs(),
            "b_dec": r(d, s=0.1),
            "w_dec": w_dec,
        }
        if skip:
            p["affine_skip_connection"] = r(d, d, s=0.05)
        out.append(p)
    return out


def _write(folder, params, stem="params_layer_"):
    folder.mkdir()
    for i, p in enumerate(params):
        save_file({k: v.contiguous() for k, v in p.items()}, str(folder / f"{stem}{i}.safetensors"))
    return folder


def _mlp_io(hf, ids):
    xs, ys = {}, {}

    def keep(l):
        def hook(mod, inp, out):
            xs[l], ys[l] = inp[0][0], out[0]

        return hook

    hooks = [layer.mlp.register_forward_hook(keep(l)) for l, layer in enumerate(hf.model.layers)]
    hooked_forward(hf, hooks, input_ids=ids)
    return torch.stack([xs[l] for l in range(L)]), torch.stack([ys[l] for l in range(L)])


def _by_hand(params, xs, *, all_to_all: bool) -> torch.Tensor:
    """JumpReLUMultiLayerSAE's reconstruction of every layer's output [L, n, d], term by term."""
    fs = []
    for i, p in enumerate(params):
        pre = xs[i] @ p["w_enc"] + p["b_enc"]
        fs.append((pre > p["threshold"]) * torch.relu(pre))
    out = []
    for j in range(L):
        y = params[j]["b_dec"] + xs[j] @ params[j]["affine_skip_connection"]
        for i in range(L if all_to_all else j + 1):
            y = y + fs[i] @ params[i]["w_dec"][:, j]
        out.append(y)
    return torch.stack(out)


@pytest.mark.parametrize("stem", ["params_layer_", "layer_"])
def test_reconstruction_is_jumprelu_multilayer_saes(llama, tmp_path, stem):
    hf, m = llama
    params = _params(m.arch.d_model, seed=1, causal=True)
    c = load_transcoders(_write(tmp_path / "clt", params, stem), m, dtype=torch.float64)
    assert isinstance(c, CrossLayerTranscoder) and c.activation == "jumprelu" and c.W_skip is not None
    assert c.layers == (0, 1, 2) and c.n_features == F
    xs, _ = _mlp_io(hf, m.to_tokens(PROMPT))
    got = c.reconstruct(xs)
    for all_to_all in (False, True):  # equal: the writes to earlier layers are zero here
        want = _by_hand(params, xs, all_to_all=all_to_all)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), all_to_all
    f0 = c.encode_layer(xs[0], 0)
    assert int((f0 > 0).sum()) > 0 and int((f0 == 0).sum()) > 0  # some features fire, some do not


def test_writes_to_earlier_layers_are_dropped(llama, tmp_path):
    hf, m = llama
    params = _params(m.arch.d_model, seed=2, causal=False)
    c = load_transcoders(_write(tmp_path / "clt", params), m, dtype=torch.float64)
    for i in range(L):
        assert torch.equal(c.W_dec[i], params[i]["w_dec"][:, i:])
    xs, _ = _mlp_io(hf, m.to_tokens(PROMPT))
    assert torch.allclose(c.reconstruct(xs), _by_hand(params, xs, all_to_all=False), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(c.reconstruct(xs), _by_hand(params, xs, all_to_all=True), atol=1e-6)


def test_graph_over_it_closes(llama, tmp_path):
    _, m = llama
    c = load_transcoders(_write(tmp_path / "clt", _params(m.arch.d_model, seed=3, causal=True)), m, dtype=torch.float64)
    g = attribution_graph(m, PROMPT, c)
    assert {l for k, l in zip(g.node_kind, g.node_layer) if k == "feature"} == {0, 1, 2}
    _check_closure(g, 1e-10)


def test_bad_files(llama, tmp_path):
    _, m = llama
    d = m.arch.d_model
    p = _params(d, seed=4, causal=True)
    p[1]["w_dec"] = p[1]["w_dec"][:, :2]
    with pytest.raises(ResultFormatError, match=r"w_dec \[10, 2, 32\] must be \[F, 3, d\]"):
        load_transcoders(_write(tmp_path / "a", p), m)
    p = _params(d, seed=4, causal=True)
    del p[2]["threshold"]
    with pytest.raises(ResultFormatError, match="no key 'threshold'"):
        load_transcoders(_write(tmp_path / "b", p), m)
    p = _params(d, seed=4, causal=True)
    del p[0]["affine_skip_connection"]
    with pytest.raises(ResultFormatError, match=r"affine_skip_connection is in some layer files and not others"):
        load_transcoders(_write(tmp_path / "c", p), m)
