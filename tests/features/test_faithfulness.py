"""A pruned attribution graph's faithfulness (docs/math.md §32), checked against runs built by hand:

* the all-kept endpoint is the model: M(every node) equals the Hugging Face model's own logit (closure), in both
  attention regimes, for a chosen target and for a graph of the top logits (their probability-weighted mean logit);
* the nothing-kept endpoint equals a replacement run built by hand from the Hugging Face modules' weights, its
  captured attention patterns and norm inputs (frozen regime: every head as P_h · (h1 W_V) W_O, every RMSNorm as
  γ ⊙ x / σ with σ read off the real forward) or an HF forward whose MLP modules are replaced by hooks (live
  regime): every active feature and every error node at its ablated value (zero, or the mean over the prompt's
  positions / over reference prompts, computed by hand from the MLP inputs the HF forward captured);
* an intermediate threshold equals the same hand-built run with the nodes the pruned graph keeps recomputed from
  their inputs (the features' activations by hand: relu(h W_encᵀ + b_enc)); with ``constant_prefix=1`` the held
  position keeps its real writes and the means skip it;
* faithfulness, CPR and CMD from those values by hand; the figure; typed errors;
* the held prefix is the graph's ``constant_prefix`` field (kept by prune and save/load; 0 for a file saved without
  it), not read off its node table: a graph without a prefix whose position 0 looks held (no feature, exact-zero error
  vectors) is run holding nothing, against the hand-built runs holding nothing and holding position 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import warnings

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import interp
from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import AttributionGraph, ClosureWarning, GraphFaithfulness, attribution_graph
from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_transcoders

PROMPT = "w1 w2 w3 w4 w5 w6"
T_ID = 7  # "w3" in the tiny vocabulary (<pad> <bos> <eos> <unk> w0 …)
REF = ["w7 w8 w9 w10", "w11 w12 w13 w14 w15 w16 w17"]


def _rms_float64(self, x):
    """LlamaRMSNorm's formula, γ ⊙ x / sqrt(mean x² + ε), in the input's dtype (HF's own reduces in float32)."""
    return self.weight * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


@pytest.fixture(scope="module")
def llama():
    dt = torch.float64
    m = model_from_hf(tiny_hf_model("llama", dtype=dt), tiny_tokenizer(), name="tiny-llama", dtype=dt)
    # a second copy of the same seeded weights, untouched by the bridge, for the Hugging Face computations; HF's
    # LlamaRMSNorm rounds through float32 even in a float64 model (3e-8 on these logits), so its norms compute the
    # same formula in float64: the comparisons below are at float64 rounding
    hf = tiny_hf_model("llama", dtype=dt)
    for mod in hf.modules():
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = types.MethodType(_rms_float64, mod)
    return hf, m, [t.to(dtype=dt) for t in random_transcoders(m, 24, seed=1)]


class _Real:
    """The Hugging Face forward of one prompt, read by hooks: logits, attention patterns, the inputs of every norm,
    each MLP module's input and output; the transcoders' activations and error vectors computed from them by hand."""

    def __init__(self, hf, ids, tcs):
        self.hf, self.ids, self.tcs = hf, ids, tcs
        seen, mlp_in, mlp_out, handles = {}, {}, {}, []
        for name, mod in hf.named_modules():
            if name.endswith("layernorm") or name == "model.norm":
                handles.append(
                    mod.register_forward_hook(lambda mod, a, o, name=name: seen.__setitem__(name, a[0][0].detach()))
                )

        def keep(mod, a, o, l):  # returns None: the module's output is left as it is
            mlp_in[l], mlp_out[l] = a[0][0].detach(), o[0].detach()

        for l, layer in enumerate(hf.model.layers):
            handles.append(layer.mlp.register_forward_hook(lambda mod, a, o, l=l: keep(mod, a, o, l)))
        out = hooked_forward(hf, handles, ids, output_attentions=True)
        self.logits = out.logits[0]
        self.patterns = [a[0] for a in out.attentions]
        self.seen, self.h2, self.m = seen, mlp_in, mlp_out
        self.acts = [torch.relu(mlp_in[l] @ t.W_enc.T + t.b_enc) for l, t in enumerate(tcs)]  # ReLU transcoders
        self.errs = [mlp_out[l] - (self.acts[l] @ t.W_dec + t.b_dec) for l, t in enumerate(tcs)]

    def sigma(self, name):
        return (self.seen[name].pow(2).mean(-1, keepdim=True) + self.hf.config.rms_norm_eps).sqrt()


def _writes(real, keep_feat, keep_err, abl_a, abl_e, held):
    """write(l, h) [n, d]: layer l's replacement write on this run's MLP input h (module docstring): the kept feature
    nodes recomputed from h, the other active features at their ablated value, inactive ones 0; the kept error nodes
    (and every write at a held position) real, the others ablated."""

    def write(l, h):
        t = real.tcs[l]
        f = torch.relu(h @ t.W_enc.T + t.b_enc)
        v = torch.zeros_like(f)
        n, F = f.shape
        for p in range(n):
            for i in range(F):
                a = float(real.acts[l][p, i])
                if p < held:
                    v[p, i] = a
                elif a != 0.0:
                    v[p, i] = f[p, i] if (l, p, i) in keep_feat else abl_a[l][i]
        e = torch.stack([real.errs[l][p] if (p < held or (l, p) in keep_err) else abl_e[l] for p in range(n)])
        return v @ t.W_dec + t.b_dec + e

    return write


def _frozen_by_hand(real, write, pos, t_id):
    """The replacement run with attention patterns and RMSNorm scales frozen at the HF forward, from HF's weights."""
    hf = real.hf
    cfg = hf.config
    H, Hkv, dh = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    with torch.no_grad():
        x = hf.model.embed_tokens(real.ids)[0]
        n = x.shape[0]
        for l, layer in enumerate(hf.model.layers):
            ln1, ln2 = f"model.layers.{l}.input_layernorm", f"model.layers.{l}.post_attention_layernorm"
            h1 = layer.input_layernorm.weight * x / real.sigma(ln1)
            v = (h1 @ layer.self_attn.v_proj.weight.T).reshape(n, Hkv, dh).repeat_interleave(H // Hkv, dim=1)
            z = torch.einsum("hqk,khd->qhd", real.patterns[l], v).reshape(n, H * dh)
            mid = x + z @ layer.self_attn.o_proj.weight.T
            h2 = layer.post_attention_layernorm.weight * mid / real.sigma(ln2)
            x = mid + write(l, h2)
        y = hf.model.norm.weight * x[pos] / real.sigma("model.norm")[pos]
        return float(y @ hf.lm_head.weight[t_id])


def _live_by_hand(real, write, pos, t_id):
    """The replacement run with attention and norms live: the HF forward with each MLP module's output replaced."""
    handles = [
        layer.mlp.register_forward_hook(lambda mod, a, o, l=l: write(l, a[0][0])[None])
        for l, layer in enumerate(real.hf.model.layers)
    ]
    return float(hooked_forward(real.hf, handles, real.ids).logits[0, pos, t_id])


def _by_hand(real, frozen, *args):
    return _frozen_by_hand(real, *args) if frozen else _live_by_hand(real, *args)


def _means(reals, held):
    L = len(reals[0].tcs)
    count = sum(r.acts[0].shape[0] - held for r in reals)
    abl_a = [sum(r.acts[l][held:].sum(0) for r in reals) / count for l in range(L)]
    abl_e = [sum(r.errs[l][held:].sum(0) for r in reals) / count for l in range(L)]
    return abl_a, abl_e


def _kept(pruned):
    """The (layer, pos, feature) features and (layer, pos) error nodes a pruned graph keeps, parsed from its labels."""
    feats, errs = set(), set()
    for lab in pruned.node_labels:
        if m := re.fullmatch(r"L(\d+)\.F(\d+)@(\d+)", lab):
            feats.add((int(m[1]), int(m[3]), int(m[2])))
        elif m := re.fullmatch(r"L(\d+)\.mlp_error@(\d+)", lab):
            errs.add((int(m[1]), int(m[2])))
    return feats, errs


@pytest.mark.parametrize("frozen", [True, False])
def test_all_kept_endpoint_is_the_model(llama, frozen):
    hf, m, tcs = llama
    ids = m.to_tokens(PROMPT)
    real = _Real(hf, ids, tcs)
    g = attribution_graph(m, PROMPT, tcs, target="w3")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClosureWarning)
        c = g.faithfulness(m, tcs, thresholds=(0.5, 1.0), frozen_attention=frozen)
    want = float(real.logits[-1, T_ID])
    print(f"frozen={frozen}: M(all nodes) {c.full:.12g}, HF logit {want:.12g}, graph value {c.graph_value:.12g}")
    assert c.full == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert c.closure_error == pytest.approx(abs(c.full - float(g.value[-1])), abs=1e-15)
    assert c.relative_error <= 1e-9 < c.closure_tolerance
    # the weighted mean of the top logits, for a graph without a target
    top = attribution_graph(m, PROMPT, tcs)
    ct = top.faithfulness(m, tcs, thresholds=(0.5, 1.0), frozen_attention=frozen)
    w = torch.softmax(real.logits[-1], -1)[top.target_ids]
    want_top = float((real.logits[-1, top.target_ids] * w).sum() / w.sum())
    assert len(top.target_ids) > 1 and ct.full == pytest.approx(want_top, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_nothing_kept_endpoint_by_hand(llama, frozen, ablation):
    hf, m, tcs = llama
    real = _Real(hf, m.to_tokens(PROMPT), tcs)
    g = attribution_graph(m, PROMPT, tcs, target="w3")
    c = g.faithfulness(m, tcs, thresholds=(0.5, 1.0), ablation=ablation, frozen_attention=frozen)
    L, d = len(tcs), m.arch.d_model
    if ablation == "zero":
        abl_a, abl_e = (
            [torch.zeros(t.n_features, dtype=torch.float64) for t in tcs],
            [torch.zeros(d, dtype=torch.float64)] * L,
        )
    else:
        abl_a, abl_e = _means([real], 0)
    want = _by_hand(real, frozen, _writes(real, set(), set(), abl_a, abl_e, 0), -1, T_ID)
    print(f"{ablation}, frozen={frozen}: M(no nodes) {c.empty:.10g}, by hand {want:.10g} (M(all) {c.full:.6g})")
    assert c.empty == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert abs(c.empty - c.full) > 1e-3  # the ablation does something: the check is not vacuous


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("prefix", [0, 1])
def test_intermediate_threshold_by_hand(llama, frozen, prefix):
    hf, m, tcs = llama
    real = _Real(hf, m.to_tokens(PROMPT), tcs)
    g = attribution_graph(m, PROMPT, tcs, target="w3", constant_prefix=prefix)
    ts = (0.6, 0.8, 0.95)
    c = g.faithfulness(m, tcs, thresholds=ts, ablation="mean", frozen_attention=frozen)
    abl_a, abl_e = _means([real], prefix)
    values = []
    for j, t in enumerate(ts):
        keep_feat, keep_err = _kept(g.prune(t))
        values.append(_by_hand(real, frozen, _writes(real, keep_feat, keep_err, abl_a, abl_e, prefix), -1, T_ID))
        assert int(c.n_features[j]) == len(keep_feat) and int(c.n_errors[j]) == len(keep_err)
    empty = _by_hand(real, frozen, _writes(real, set(), set(), abl_a, abl_e, prefix), -1, T_ID)
    full = float(real.logits[-1, T_ID])
    print(f"prefix={prefix}, frozen={frozen}: M {c.values.tolist()} by hand {values}; f {c.faithfulness.tolist()}")
    assert c.values.tolist() == pytest.approx(values, rel=1e-9, abs=1e-12)
    assert c.empty == pytest.approx(empty, rel=1e-9, abs=1e-12)
    f = [(v - empty) / (full - empty) for v in values]
    assert c.faithfulness.tolist() == pytest.approx(f, rel=1e-8, abs=1e-10)
    assert c.cpr == pytest.approx(float(np.trapezoid(f, ts)), rel=1e-8, abs=1e-10)
    assert c.cmd == pytest.approx(float(np.trapezoid(np.abs(1 - np.array(f)), ts)), rel=1e-8, abs=1e-10)
    assert len(set(values)) > 1 and any(abs(v - full) > 1e-4 for v in values)  # the thresholds keep different graphs
    if prefix:  # the held position is no node: neither counted nor ablated
        assert c.n_errors_total == m.arch.n_layers * (len(g.tokens) - prefix)


def test_mean_over_reference_prompts_by_hand(llama):
    hf, m, tcs = llama
    real = _Real(hf, m.to_tokens(PROMPT), tcs)
    g = attribution_graph(m, PROMPT, tcs, target="w3")
    c = g.faithfulness(m, tcs, thresholds=(0.7, 0.9), ablation="mean", reference=REF)
    abl_a, abl_e = _means([_Real(hf, m.to_tokens(p), tcs) for p in REF], 0)
    keep_feat, keep_err = _kept(g.prune(0.9))
    want_empty = _frozen_by_hand(real, _writes(real, set(), set(), abl_a, abl_e, 0), -1, T_ID)
    want = _frozen_by_hand(real, _writes(real, keep_feat, keep_err, abl_a, abl_e, 0), -1, T_ID)
    assert c.empty == pytest.approx(want_empty, rel=1e-9, abs=1e-12)
    assert float(c.values[1]) == pytest.approx(want, rel=1e-9, abs=1e-12)
    own = g.faithfulness(m, tcs, thresholds=(0.7, 0.9), ablation="mean")
    assert abs(own.empty - c.empty) > 1e-6 and c.reference == "2 reference prompts"


def test_result_figure_and_float32_closure(tmp_path):
    hf = tiny_hf_model("llama")
    m = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama")
    tcs = random_transcoders(m, 24, seed=1)
    g = attribution_graph(m, PROMPT, tcs, target="w3", wrong="w4")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClosureWarning)
        c = g.faithfulness(m, tcs)
    with torch.no_grad():
        z = hf(m.to_tokens(PROMPT)).logits[0, -1]
    want = float(z[T_ID] - z[T_ID + 1])
    print(repr(c))
    scale = float(z.abs().max())  # float32: the logit difference to rounding relative to the logits' scale
    assert abs(c.full - want) <= 1e-4 * scale and c.relative_error <= c.closure_tolerance
    assert c.relative_error == pytest.approx(c.closure_error / scale, rel=1e-5)
    assert isinstance(c, GraphFaithfulness) and c.thresholds == list(interp.features.GRAPH_THRESHOLDS)
    df = c.to_dataframe()
    assert df["point"].tolist() == c.labels and c["t=0.8"]["faithfulness"] == pytest.approx(float(c.faithfulness[7]))
    assert (df["n_features"] <= c.n_features_total).all() and math.isfinite(c.cpr)
    fig = c.plot()
    assert isinstance(fig, go.Figure) and list(fig.data[0].y) == pytest.approx(c.faithfulness.tolist())
    assert interp.plots.graph_faithfulness_figure(c).layout.title.text == fig.layout.title.text
    out = interp.export(fig, tmp_path / "faithfulness.html")
    assert out.is_file() and out.stat().st_size > 1000
    back = GraphFaithfulness.load(c.save(tmp_path / "c.safetensors"))
    assert torch.equal(back.values, c.values) and back.thresholds == c.thresholds


def test_bad_input(llama):
    hf, m, tcs = llama
    g = attribution_graph(m, PROMPT, tcs, target="w3")
    with pytest.raises(ArgumentError, match="ablation"):
        g.faithfulness(m, tcs, ablation="resample")
    with pytest.raises(ArgumentError, match="increasing"):
        g.faithfulness(m, tcs, thresholds=(0.9, 0.5))
    with pytest.raises(ArgumentError, match=r"thresholds\[1\]=1.5"):
        g.faithfulness(m, tcs, thresholds=(0.5, 1.5))
    with pytest.raises(ArgumentError, match="non-empty"):
        g.faithfulness(m, tcs, thresholds=())
    with pytest.raises(ArgumentError, match="edge_threshold"):
        g.faithfulness(m, tcs, edge_threshold=0.0)
    with pytest.raises(ArgumentError, match="the graph was built with"):
        g.faithfulness(m, [t.to(dtype=torch.float64) for t in random_transcoders(m, 24, seed=2)])
    with pytest.raises(ArgumentError, match="layers"):
        g.faithfulness(m, tcs[:1])
    with pytest.raises(ArgumentError, match="reference"):
        g.faithfulness(m, tcs, ablation="zero", reference=REF)
    other = model_from_hf(
        tiny_hf_model("llama", dtype=torch.float64), tiny_tokenizer(), name="other", dtype=torch.float64
    )
    with pytest.raises(ArgumentError, match="not the graph's"):
        g.faithfulness(other, tcs)


def _without_field(path, name, out):
    """A copy of the saved result at ``path`` whose header lacks field ``name`` (a file written before it existed)."""
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    fields = json.loads(meta["fields"])
    del fields[name]
    save_file(tensors, str(out), metadata={**meta, "fields": json.dumps(fields)})
    return out


def test_constant_prefix_is_the_graphs_field(tmp_path):
    """attribution_graph records constant_prefix (prune and save/load keep it; a file saved without it reads 0) and
    faithfulness holds those positions. A case where the node table alone would suggest another prefix: the MLPs
    write nothing (their down projections zero) and no feature fires at position 0 with b_dec = 0, so position 0 has
    no feature node and exact-zero error nodes, as a held position has — a graph built without a prefix still holds
    none: its curve is the hand-built run holding no position, not the one holding position 0."""
    dt = torch.float64
    hfs = [tiny_hf_model("llama", dtype=dt) for _ in range(2)]
    with torch.no_grad():
        for layer in (layer for hf in hfs for layer in hf.model.layers):
            layer.mlp.down_proj.weight.zero_()
    m = model_from_hf(hfs[0], tiny_tokenizer(), name="tiny-llama-no-mlp", dtype=dt)
    hf = hfs[1]
    for mod in hf.modules():
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = types.MethodType(_rms_float64, mod)
    ids = m.to_tokens(PROMPT)
    base = [t.to(dtype=dt) for t in random_transcoders(m, 24, seed=1)]
    h = _Real(hf, ids, base).h2  # each layer's MLP input: every feature's pre-activation at position 0 set to −0.1
    tcs = [
        dataclasses.replace(t, b_enc=-(h[l][0] @ t.W_enc.T) - 0.1, b_dec=torch.zeros_like(t.b_dec))
        for l, t in enumerate(base)
    ]
    real = _Real(hf, ids, tcs)
    L, n = len(tcs), ids.shape[1]
    assert all(not real.acts[l][0].any() and real.acts[l][1:].any() for l in range(L))
    g = attribution_graph(m, PROMPT, tcs, target="w3")
    at0 = [i for i, p in enumerate(g.node_pos) if p == 0 and g.node_kind[i] in ("feature", "error")]
    assert g.constant_prefix == 0 and {g.node_kind[i] for i in at0} == {"error"} and not g.activation[at0].any()
    ts = (0.7, 0.9)
    c = g.faithfulness(m, tcs, thresholds=ts, ablation="mean")
    g1 = attribution_graph(m, PROMPT, tcs, target="w3", constant_prefix=1)
    c1 = g1.faithfulness(m, tcs, thresholds=ts, ablation="mean")
    for graph, curve, held in ((g, c, 0), (g1, c1, 1)):
        abl_a, abl_e = _means([real], held)
        want = [_frozen_by_hand(real, _writes(real, *_kept(graph.prune(t)), abl_a, abl_e, held), -1, T_ID) for t in ts]
        print(f"constant_prefix={held}: M {curve.values.tolist()}, by hand {want}")
        assert curve.values.tolist() == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert curve.n_errors_total == L * (n - held)
    assert float((c.values - c1.values).abs().max()) > 1e-6  # holding position 0 or not changes the curve
    # the field travels: prune, save / load; a file without it reads 0, which faithfulness refuses, naming the field
    g2 = attribution_graph(m, PROMPT, tcs, target="w3", constant_prefix=2)
    assert g2.constant_prefix == 2 and g2.prune(0.8).constant_prefix == 2
    path = g2.save(tmp_path / "g2.safetensors")
    assert AttributionGraph.load(path).constant_prefix == 2
    old = AttributionGraph.load(_without_field(path, "constant_prefix", tmp_path / "old.safetensors"))
    assert old.constant_prefix == 0 and torch.equal(old.adjacency, g2.adjacency)
    with pytest.raises(ArgumentError, match="constant_prefix"):
        old.faithfulness(m, tcs, thresholds=ts)
    again = dataclasses.replace(old, constant_prefix=2).faithfulness(m, tcs, thresholds=ts)
    assert torch.equal(again.values, g2.faithfulness(m, tcs, thresholds=ts).values)
