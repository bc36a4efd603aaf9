"""A pruned graph's faithfulness over a cross-layer transcoder (docs/math.md §32), against runs built by hand from the
Hugging Face modules (float64, a 3-layer tiny Llama, so a layer-0 feature writes two layers on):

* every node kept: M equals the Hugging Face model's logit, both attention regimes;
* no node kept and three thresholds' pruned graphs, zero and mean ablation, both regimes, with and without a held
  prefix: each run equals a forward written in the test — the CLT's features of every layer k ≤ l written into layer
  l's MLP output through W_dec[k → l] (the kept ones recomputed from the run's MLP inputs, relu(h W_enc[k]ᵀ +
  b_enc[k]); a dropped one at its ablated value in each of its writes), the error node the MLP's output minus that
  joint reconstruction at the real forward; a run that ablated a dropped feature at its own layer only differs (the
  later writes are ablated too);
* a CLT whose decoders to later layers are zero has the faithfulness curve of its encoders as per-layer transcoders
  (a skip JumpReLU CLT);
* a CLT of another shape, or another CLT than the graph's, is an ArgumentError.
"""

from __future__ import annotations

import types

import pytest
import torch

from features.test_faithfulness import PROMPT, T_ID, _frozen_by_hand, _kept, _live_by_hand, _Real, _rms_float64
from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import CrossLayerTranscoder, attribution_graph
from tiny_models import tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_clt


@pytest.fixture(scope="module")
def llama3():
    dt = torch.float64
    m = model_from_hf(tiny_hf_model("llama", n_layers=3, dtype=dt), tiny_tokenizer(), name="tiny-llama-3", dtype=dt)
    hf = tiny_hf_model("llama", n_layers=3, dtype=dt)  # the same seeded weights; RMSNorm in float64 (see _rms_float64)
    for mod in hf.modules():
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = types.MethodType(_rms_float64, mod)
    return hf, m, random_clt(m, 24, seed=1, dtype=dt)


class _RealCLT(_Real):
    """The Hugging Face forward read by hooks (:class:`_Real`), the CLT's activations and error vectors from it by
    hand: a_l = relu(h_l W_enc[l]ᵀ + b_enc[l]), e_l = MLP output − (Σ_{k ≤ l} a_k W_dec[k → l] + b_dec[l])."""

    def __init__(self, hf, ids, clt):
        super().__init__(hf, ids, [])
        self.clt = clt
        L = clt.n_layers
        self.acts = [torch.relu(self.h2[l] @ clt.W_enc[l].T + clt.b_enc[l]) for l in range(L)]
        self.errs = [self.m[l] - _decode(clt, self.acts, l) for l in range(L)]


def _decode(clt, acts, l):
    """Σ_{k ≤ l} a_k W_dec[k → l] + b_dec[l]: the CLT's write at layer l from the activations of layers 0..l."""
    return sum(acts[k] @ clt.W_dec[k][:, l - k] for k in range(l + 1)) + clt.b_dec[l]


def _clt_writes(real, keep_feat, keep_err, abl_a, abl_e, held, *, own_layer_only=False):
    """write(l, h) [n, d] for one run (called for layers 0, 1, … in order): each layer's activations v_l — the kept
    feature nodes recomputed from h, the other active features at their ablated value, inactive ones 0, every feature
    at a held position real — written at l and every later layer; the error nodes kept or ablated as for per-layer
    transcoders. ``own_layer_only``: a dropped feature's writes to later layers keep its real activation (the
    ablation the CLT's later decoders would miss)."""
    clt, vs, reals = real.clt, [], []

    def write(l, h):
        f = torch.relu(h @ clt.W_enc[l].T + clt.b_enc[l])
        v = torch.zeros_like(f)
        r = torch.zeros_like(f)  # v with every dropped feature at its real activation
        n, F = f.shape
        for p in range(n):
            for i in range(F):
                a = float(real.acts[l][p, i])
                if p < held:
                    v[p, i] = r[p, i] = a
                elif a != 0.0:
                    kept = (l, p, i) in keep_feat
                    v[p, i] = f[p, i] if kept else abl_a[l][i]
                    r[p, i] = f[p, i] if kept else a
        vs.append(v)
        reals.append(r)
        earlier = reals if own_layer_only else vs
        out = v @ clt.W_dec[l][:, 0] + sum(earlier[k] @ clt.W_dec[k][:, l - k] for k in range(l))
        e = torch.stack([real.errs[l][p] if (p < held or (l, p) in keep_err) else abl_e[l] for p in range(n)])
        return out + clt.b_dec[l] + e

    return write


def _by_hand(real, frozen, keep_feat, keep_err, abl_a, abl_e, held, **kw):
    write = _clt_writes(real, keep_feat, keep_err, abl_a, abl_e, held, **kw)
    return (_frozen_by_hand if frozen else _live_by_hand)(real, write, -1, T_ID)


def _ablated(real, ablation, held):
    L, d, F = real.clt.n_layers, real.clt.d_model, real.clt.n_features
    if ablation == "zero":
        return [torch.zeros(F, dtype=torch.float64)] * L, [torch.zeros(d, dtype=torch.float64)] * L
    count = real.acts[0].shape[0] - held
    return [a[held:].sum(0) / count for a in real.acts], [e[held:].sum(0) / count for e in real.errs]


@pytest.mark.parametrize("frozen", [True, False])
def test_all_kept_endpoint_is_the_model(llama3, frozen):
    hf, m, clt = llama3
    real = _RealCLT(hf, m.to_tokens(PROMPT), clt)
    g = attribution_graph(m, PROMPT, clt, target="w3")
    assert {l for k, l in zip(g.node_kind, g.node_layer) if k == "feature"} == {0, 1, 2}
    c = g.faithfulness(m, clt, thresholds=(0.5, 1.0), frozen_attention=frozen)
    want = float(real.logits[-1, T_ID])
    print(f"frozen={frozen}: M(all nodes) {c.full:.12g}, HF logit {want:.12g}")
    assert c.full == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert c.relative_error <= 1e-9


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
@pytest.mark.parametrize("prefix", [0, 1])
def test_pruned_graphs_by_hand(llama3, frozen, ablation, prefix):
    hf, m, clt = llama3
    real = _RealCLT(hf, m.to_tokens(PROMPT), clt)
    g = attribution_graph(m, PROMPT, clt, target="w3", constant_prefix=prefix)
    ts = (0.6, 0.8, 0.95)
    c = g.faithfulness(m, clt, thresholds=ts, ablation=ablation, frozen_attention=frozen)
    abl_a, abl_e = _ablated(real, ablation, prefix)
    values = []
    for j, t in enumerate(ts):
        keep_feat, keep_err = _kept(g.prune(t))
        values.append(_by_hand(real, frozen, keep_feat, keep_err, abl_a, abl_e, prefix))
        assert int(c.n_features[j]) == len(keep_feat) and int(c.n_errors[j]) == len(keep_err)
    empty = _by_hand(real, frozen, set(), set(), abl_a, abl_e, prefix)
    print(f"{ablation}, frozen={frozen}, prefix={prefix}: M {c.values.tolist()} by hand {values}; M(none) {c.empty}")
    assert c.values.tolist() == pytest.approx(values, rel=1e-9, abs=1e-12)
    assert c.empty == pytest.approx(empty, rel=1e-9, abs=1e-12)
    assert len(set(values)) > 1 and abs(c.empty - c.full) > 1e-3  # the thresholds keep different graphs
    # a dropped layer-0 feature is ablated in its writes at layers 1 and 2 too: leaving those real moves M(none)
    own = _by_hand(real, frozen, set(), set(), abl_a, abl_e, prefix, own_layer_only=True)
    assert abs(own - empty) > 1e-3


def test_without_later_decoders_it_is_the_per_layer_curve(llama3):
    hf, m, clt = llama3
    c = random_clt(m, 12, seed=3, activation="jumprelu", skip=True, dtype=torch.float64)
    own = CrossLayerTranscoder(
        c.W_enc,
        c.b_enc,
        tuple(torch.cat([w[:, :1], torch.zeros_like(w[:, 1:])], 1) for w in c.W_dec),
        c.b_dec,
        c.W_skip,
        c.activation,
        c.threshold,
        layers=c.layers,
    )
    per_layer = [own.encoder(l) for l in range(own.n_layers)]
    g = attribution_graph(m, PROMPT, own, target="w3")
    h = attribution_graph(m, PROMPT, per_layer, target="w3")
    ts = (0.5, 0.7, 0.9)
    for t in ts:
        assert g.prune(t).node_labels == h.prune(t).node_labels
    for frozen in (True, False):
        a = g.faithfulness(m, own, thresholds=ts, ablation="mean", frozen_attention=frozen)
        b = h.faithfulness(m, per_layer, thresholds=ts, ablation="mean", frozen_attention=frozen)
        print(f"frozen={frozen}: CLT {a.values.tolist()}, per-layer {b.values.tolist()}")
        assert a.values.tolist() == pytest.approx(b.values.tolist(), rel=1e-9, abs=1e-12)
        assert (a.full, a.empty) == pytest.approx((b.full, b.empty), rel=1e-9, abs=1e-12)
        assert torch.equal(a.n_features, b.n_features) and torch.equal(a.n_errors, b.n_errors)


def test_refusals(llama3):
    """A CLT of another model's shape, or other dictionaries than the graph's, are ArgumentErrors naming the fix."""
    from interp.features import aggregate_graphs

    hf, m, clt = llama3
    g = attribution_graph(m, PROMPT, clt, target="w3")
    small = random_clt(n_layers=2, d_model=m.arch.d_model, n_features=8, dtype=torch.float64)
    with pytest.raises(ArgumentError, match="an encoder at each of its 3 layers"):
        g.faithfulness(m, small)
    with pytest.raises(ArgumentError, match="an encoder at each of its 3 layers"):
        aggregate_graphs(m, [PROMPT], small, progress=False)
    with pytest.raises(ArgumentError, match="the graph was built with"):
        g.faithfulness(m, random_clt(m, 24, seed=2, dtype=torch.float64))
