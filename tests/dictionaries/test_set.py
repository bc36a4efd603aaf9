"""DictionarySet: one type and one method set for per-layer and cross-layer transcoders, checked against the maths
written out here by hand (encoder, decoders, biases, skip)."""

from __future__ import annotations

import pytest
import torch

from interp.dictionaries import CrossLayerTranscoder, DictionarySet, Transcoder
from interp.errors import ArgumentError, ShapeError
from tiny_models import tiny_model
from tiny_transcoders import random_clt, random_transcoders


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def _by_hand_per_layer(tcs, x):
    """ŷ_l = act(x_l W_encᵀ + b_enc) W_dec + b_dec + x_l W_skipᵀ, written out per layer."""
    out = []
    for t, xl in zip(tcs, x):
        pre = xl @ t.W_enc.T + t.b_enc
        f = torch.relu(pre) if t.activation == "relu" else pre * (pre > t.threshold)
        y = f @ t.W_dec + t.b_dec
        out.append(y if t.W_skip is None else y + xl @ t.W_skip.T)
    return out


@pytest.mark.parametrize("skip", [False, True])
def test_a_per_layer_set_is_its_transcoders(llama, skip):
    tcs = random_transcoders(llama, 16, skip=skip)
    s = DictionarySet.of(tcs)
    L, d = llama.arch.n_layers, llama.arch.d_model
    assert s.layers == tuple(range(L)) and s.d_model == d and all(s.targets(l) == (l,) for l in range(L))
    x = torch.randn(L, 5, d, generator=torch.Generator().manual_seed(1))
    fs = [s.encode(l, x[l]) for l in range(L)]
    for got, want in zip(s.decode(fs, list(x)), _by_hand_per_layer(tcs, x)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    ids = torch.tensor([3, 0, 7])
    [(layer, rows)] = s.writes(1, ids)
    assert layer == 1 and torch.equal(rows, tcs[1].W_dec[ids])
    assert s.check(llama, whole=True) is s


@pytest.mark.parametrize("skip", [False, True])
def test_a_cross_layer_set_sums_every_earlier_layers_writes(llama, skip):
    clt = random_clt(llama, 8, skip=skip)
    s = DictionarySet.of(clt)
    L, d = llama.arch.n_layers, llama.arch.d_model
    x = torch.randn(L, 4, d, generator=torch.Generator().manual_seed(2))
    fs = [s.encode(l, x[l]) for l in range(L)]
    for l in range(L):  # f_l by hand
        torch.testing.assert_close(fs[l], torch.relu(x[l] @ clt.W_enc[l].T + clt.b_enc[l]), rtol=0, atol=0)
    got = s.decode(fs, list(x))
    for j in range(L):  # ŷ_j = Σ_{i ≤ j} f_i W_dec[i][:, j − i] + b_dec[j] (+ skip)
        want = clt.b_dec[j] + sum(fs[i] @ clt.W_dec[i][:, j - i] for i in range(j + 1))
        if skip:
            want = want + x[j] @ clt.W_skip[j].T
        torch.testing.assert_close(got[j], want, rtol=0, atol=1e-6)
    assert s.targets(0) == tuple(range(L)) and s.targets(L - 1) == (L - 1,)
    ids = torch.tensor([1, 5])
    w = s.writes(0, ids)
    assert [j for j, _ in w] == list(range(L))
    assert all(torch.equal(rows, clt.W_dec[0][ids, j]) for j, rows in w)
    # the same values as the CLT's own decode
    torch.testing.assert_close(torch.stack(got), clt.decode(torch.stack(fs), x if skip else None), rtol=0, atol=0)


def test_of_reads_every_spelling_of_a_set(llama):
    tcs = random_transcoders(llama, 16)
    placed = [Transcoder(t.W_enc, t.b_enc, t.W_dec, t.b_dec, layer=l) for l, t in enumerate(tcs)]
    assert DictionarySet.of({1: tcs[1]}).layers == (1,)
    assert DictionarySet.of([placed[1]]).layers == (1,)
    assert DictionarySet.of(placed[0]).layers == (0,)
    s = DictionarySet.of(tcs)
    assert DictionarySet.of(s) is s
    with pytest.raises(ArgumentError, match=r"transcoders\[0\] is the transcoder of layer 1"):
        DictionarySet.of({0: placed[1]})
    with pytest.raises(ArgumentError, match="layer is unknown"):
        DictionarySet.of(tcs[0])
    with pytest.raises(ArgumentError, match="str"):
        DictionarySet.of("tcs")
    with pytest.raises(ArgumentError, match="missing"):
        DictionarySet.of({1: tcs[1]}).check(llama, whole=True)
    other = random_clt(n_layers=2, d_model=llama.arch.d_model + 1)
    with pytest.raises(ShapeError, match="d_model"):
        DictionarySet.of(other).check(llama)


def test_to_moves_every_tensor(llama):
    s = DictionarySet.of(random_clt(llama, 8, skip=True)).to(torch.float64)
    assert all(t.dtype == torch.float64 for t in (*s.W_enc, *s.b_enc, *s.W_dec, *s.b_dec, *s.W_skip))
    assert isinstance(random_clt(llama, 8), CrossLayerTranscoder)
