"""Interventions on transcoder features (docs/math.md §28), checked against computations that do not use the code:

* with no intervention the replacement model's logits equal the Hugging Face model's (every family of the graph);
* frozen attention and norms, MLPs live (the default): ablating a layer-0 feature of a two-layer Llama changes the
  target logit by exactly the hand computation through materialised matrices (each layer's frozen attention as
  Σ_h A_h ⊗ (W_V^h W_O^h)ᵀ and each norm as diag(γ/σ), with σ and A read off the HF forward; the layer-1 HF MLP
  module rerun on its shifted input);
* frozen attention and norms, other features frozen: the change of the output is affine in the intervened activations,
  Δ = Σ_i (Δf_i / f_i) · edge(f_i → output), the edges read off the attribution graph (ablate, clamp, scale);
* live attention: equal to a Hugging Face forward whose layer-0 MLP output loses a·W_dec[f] at the position (every
  other module the model's own);
* with transcoders of large gain (whose replacement network amplifies rounding) the unintervened rerun of every
  regime is still the model; a rerun past the closure tolerance warns (ClosureWarning), and the result names its
  regime;
* typed errors for a feature that does not exist, a position out of range, a value that is not finite.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import (
    CLOSURE_TOLERANCE,
    REGIMES,
    ClosureWarning,
    Intervention,
    InterventionResult,
    Transcoder,
    attribution_graph,
    intervene,
)
from tiny_models import fp64_tol, hooked_forward, tiny_hf_model, tiny_model, tiny_tokenizer
from tiny_transcoders import random_transcoders

PROMPT = "w1 w2 w3 w4 w5 w6"


@pytest.fixture(scope="module")
def llama():
    m = model_from_hf(tiny_hf_model("llama"), tiny_tokenizer(), name="tiny-llama")
    # a second copy of the same seeded weights, untouched by the bridge (whose wrapping empties HF's
    # ``output_attentions``), for the Hugging Face computations
    return tiny_hf_model("llama"), m, random_transcoders(m, 24, seed=1)


def _hf_capture(hf, ids, hooks=None):
    """HF logits [n, V], attention patterns per layer [H, n, n], and the inputs of every norm (by module)."""
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for name, mod in hf.named_modules():
        if name.endswith("layernorm") or name == "model.norm":
            handles.append(
                mod.register_forward_hook(lambda mod, a, o, name=name: seen.__setitem__(name, a[0][0].detach()))
            )
    for l, fn in (hooks or {}).items():
        handles.append(hf.model.layers[l].mlp.register_forward_hook(fn))
    out = hooked_forward(hf, handles, ids, output_attentions=True)
    return out.logits[0], [a[0] for a in out.attentions], seen


def _feature(g, layer):
    i = next(i for i, (k, l) in enumerate(zip(g.node_kind, g.node_layer)) if k == "feature" and l == layer)
    return i, g.node_labels[i]


@pytest.mark.parametrize(
    "family", ["gpt2", "llama", "neox", "gptj", "qwen3", "gemma2", "gemma3_text", "olmo2", "mixtral", "olmoe"]
)
def test_no_intervention_is_the_real_model(family):
    """In float64 the replacement model's logits are the HF model's to rounding (GPT-J's HF attention rounds
    through float32); in float32 to float32 rounding amplified by the tiny models' small norm scales."""
    for dtype, tol in ((torch.float64, fp64_tol(family, 1e-9)), (torch.float32, 5e-4)):
        hf = tiny_hf_model(family, dtype=dtype)
        m = model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}", dtype=dtype)
        tcs = [t.to(dtype=dtype) for t in random_transcoders(m, 16, seed=2)]
        ids = m.to_tokens(PROMPT)
        with torch.no_grad():
            want = hf(ids).logits[0, -1]
        for frozen in (True, False):
            r = intervene(m, PROMPT, tcs, Intervention.scale("L0.F1@2", 1.0), target="w3", frozen_attention=frozen)
            hf_err = float((r.logits_before - want).abs().max() / want.abs().max())
            print(
                f"{family} {dtype} frozen={frozen}: replacement vs real logits {r.closure_error:.1e} "
                f"(relative {r.relative_error:.1e}); vs HF relative {hf_err:.1e}"
            )
            assert r.relative_error <= tol and hf_err <= tol
            assert torch.allclose(r.logits_after, r.logits_before, atol=1e-6)  # × 1 changes nothing


def test_frozen_ablation_by_materialised_matrices(llama):
    hf, m, tcs = llama
    g = attribution_graph(m, PROMPT, tcs, target="w3")
    i, lab = _feature(g, 0)
    p, f, a = g.node_pos[i], g.node_feature[i], float(g.activation[i])
    r = intervene(m, PROMPT, tcs, [lab], target="w3")
    ids = m.to_tokens(PROMPT)
    n, d = ids.shape[1], m.arch.d_model
    cfg = hf.config
    H, Hkv, dh, eps = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps
    _, pats, seen = _hf_capture(hf, ids)
    sig = lambda x: (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # noqa: E731
    with torch.no_grad():

        def D(name):  # the frozen RMSNorm as a matrix on the row-major flattened stream [n·d]
            mod = dict(hf.named_modules())[name]
            return torch.diag((mod.weight[None, :] / sig(seen[name])).reshape(-1))

        def M_attn(l):  # Σ_h A_h ⊗ (W_V^h W_O^h)ᵀ  (vec(A X W) = (A ⊗ Wᵀ) vec(X), row-major vec)
            at = hf.model.layers[l].self_attn
            Wv = at.v_proj.weight.T.reshape(d, Hkv, dh)
            Wo = at.o_proj.weight.T.reshape(H, dh, d)
            return sum(torch.kron(pats[l][h], (Wv[:, h // (H // Hkv)] @ Wo[h]).T.contiguous()) for h in range(H))

        delta = torch.zeros(n, d)
        delta[p] = -a * tcs[0].W_dec[f]  # the ablated write of layer 0
        x_mid1 = (torch.eye(n * d) + M_attn(1) @ D("model.layers.1.input_layernorm")) @ delta.reshape(-1)
        h2 = seen["model.layers.1.post_attention_layernorm"]  # N2's real input at layer 1
        gam2 = hf.model.layers[1].post_attention_layernorm.weight
        d_h2 = (D("model.layers.1.post_attention_layernorm") @ x_mid1).reshape(n, d)
        h2n = gam2 * h2 / sig(h2)  # N2's real output at layer 1
        mlp1 = hf.model.layers[1].mlp
        d_m1 = mlp1(h2n + d_h2) - mlp1(h2n)  # layer 1's real MLP on its shifted (frozen-norm) input
        dx = x_mid1.reshape(n, d) + d_m1
        fin = seen["model.norm"][-1]
        t = 7  # "w3" in the tiny vocabulary (<pad> <bos> <eos> <unk> w0 …)
        want = float((hf.model.norm.weight * dx[-1] / sig(fin)) @ hf.lm_head.weight[t])
    print(f"frozen ablation of {lab}: Δ logit {r.metric_change:.6g}, by materialised matrices {want:.6g}")
    assert r.metric_change == pytest.approx(want, rel=1e-4, abs=1e-6)
    assert abs(want) > 1e-4  # the check is not vacuous


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox", "gemma2"])
def test_frozen_features_follow_the_graph_edges(family):
    m = tiny_model(family)
    tcs = random_transcoders(m, 24, seed=3)
    g = attribution_graph(m, PROMPT, tcs, target="w3", wrong="w4")
    feats = [i for i, k in enumerate(g.node_kind) if k == "feature"][:3]
    c = m.arch.final_softcap
    for kind, make, delta in (
        ("ablate", lambda lab: Intervention.ablate(lab), lambda a: -a),
        ("clamp", lambda lab: Intervention.clamp(lab, 2.5), lambda a: 2.5 - a),
        ("scale", lambda lab: Intervention.scale(lab, 3.0), lambda a: 2 * a),
    ):
        r = intervene(
            m, PROMPT, tcs, [make(g.node_labels[i]) for i in feats], target="w3", wrong="w4", freeze_features=True
        )
        # an edge is the source's whole contribution a_i · (its unit effect): Δ = Σ_i (Δf_i / a_i) · edge_i
        want = sum(delta(float(g.activation[i])) / float(g.activation[i]) * float(g.adjacency[-1, i]) for i in feats)
        got = r.metric_change
        if c:  # Gemma 2 reports capped logits: compare the pre-cap logit difference
            pre = lambda z: c * torch.atanh(z / c)  # noqa: E731
            got = float(
                (pre(r.logits_after[7]) - pre(r.logits_after[8])) - (pre(r.logits_before[7]) - pre(r.logits_before[8]))
            )
        print(f"{family} {kind}: Δ {got:.6g}, Σ Δf·edge {want:.6g}")
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_live_attention_equals_hooked_hf_forward(llama):
    hf, m, tcs = llama
    g = attribution_graph(m, PROMPT, tcs, target="w3")
    i, lab = _feature(g, 0)
    p, f, a = g.node_pos[i], g.node_feature[i], float(g.activation[i])
    ids = m.to_tokens(PROMPT)

    def layer0(mod, args, out):
        out = out.clone()
        out[0, p] -= a * tcs[0].W_dec[f]
        return out

    logits, _, _ = _hf_capture(hf, ids, {0: layer0})  # layer 1's real MLP runs on its changed input
    r = intervene(m, PROMPT, tcs, lab, target="w3", frozen_attention=False)
    print(
        f"live ablation of {lab}: max |logits − hooked HF| {float((r.logits_after - logits[-1]).abs().max()):.1e}, "
        f"Δ metric {r.metric_change:.5g}"
    )
    assert torch.allclose(r.logits_after, logits[-1], atol=1e-5, rtol=1e-5)
    assert abs(r.metric_change) > 1e-4
    frozen = intervene(m, PROMPT, tcs, lab, target="w3", frozen_attention=True)
    assert frozen.metric_change != pytest.approx(r.metric_change, abs=1e-9)  # attention and norms do move


def test_result_contract_and_errors(llama, tmp_path):
    _, m, tcs = llama
    r = intervene(m, PROMPT, tcs, [(0, 2, 5, 3.0), (1, None, 0, 0.0)], top_k=3)
    assert isinstance(r, InterventionResult) and r.interventions == ["L0.F5@2 = 3", "L1.F0@* = 0"]
    df = r.to_dataframe()
    assert df["label"].tolist() == r.labels and r.labels[0] == f"logit[{r.target_ids[0]}]"
    assert math.isclose(r[r.labels[0]]["change"], r.metric_change, rel_tol=1e-6, abs_tol=1e-6)
    back = InterventionResult.load(r.save(tmp_path / "r.safetensors"))
    assert torch.equal(back.logits_after, r.logits_after) and back.interventions == r.interventions
    F_ = tcs[0].n_features
    with pytest.raises(ArgumentError, match=rf"feature 999 of layer 0 does not exist.*n_features={F_}"):
        intervene(m, PROMPT, tcs, (0, 1, 999, 0.0))
    with pytest.raises(ArgumentError, match=r"layer=5"):
        intervene(m, PROMPT, tcs, Intervention(5, 0, 1))
    with pytest.raises(ArgumentError, match=r"pos=17"):
        intervene(m, PROMPT, tcs, Intervention(0, 0, 17))
    with pytest.raises(ArgumentError, match=r"value=nan"):
        intervene(m, PROMPT, tcs, Intervention.clamp("L0.F1@2", float("nan")))
    with pytest.raises(ArgumentError, match=r"value=inf"):
        intervene(m, PROMPT, tcs, (0, 1, 1, float("inf")))
    with pytest.raises(ArgumentError, match="not a feature label"):
        intervene(m, PROMPT, tcs, "L0.H1")
    with pytest.raises(ArgumentError, match="frozen_attention"):
        intervene(m, PROMPT, tcs, "L0.F1@2", frozen_attention="yes")
    for bad in ((None, 3), (True, 2), (0, 1, "x")):  # (None, 3) was a TypeError from int(None)
        with pytest.raises(ArgumentError, match=r"must be a Feature label.*\(layer, feature, pos\)"):
            Intervention.ablate(bad)
    assert str(Intervention.clamp((1, 2, 3), 1.0)) == "L1.F2@3 = 1"


@pytest.mark.parametrize("frozen", [True, False])
def test_large_gain_transcoders_still_reproduce_the_model(frozen):
    """Transcoders 30× too large in W_enc and W_dec: a rerun that carried every perturbation through them (error nodes
    held) amplified the float rounding between the engine's forward and the rerun into whole logits. The default
    regime reruns the real MLPs, so without an intervention it is the model to rounding (and, live, an ablation moves
    the logit by a bounded amount)."""
    m = tiny_model("llama", n_layers=4)
    big = [Transcoder(t.W_enc * 30, t.b_enc, t.W_dec * 30, t.b_dec) for t in random_transcoders(m, 24, seed=5)]
    g = attribution_graph(m, PROMPT, big, target="w3")
    i, lab = _feature(g, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClosureWarning)
        r = intervene(m, PROMPT, big, [lab], target="w3", frozen_attention=frozen)
    print(
        f"frozen={frozen}: closure {r.closure_error:.2e} (relative {r.relative_error:.2e}), Δ {r.metric_change:.4g}, "
        f"max |logit after| {float(r.logits_after.abs().max()):.3g}"
    )
    assert r.relative_error <= 1e-5
    assert r.regime == ("frozen attention" if frozen else "live") and r.regime in repr(r)
    if not frozen:  # the real norms renormalise the (900× too large) ablated write
        assert float(r.logits_after.abs().max()) < 1e3


def test_closure_warning_names_the_numbers(llama, monkeypatch):
    _, m, tcs = llama
    monkeypatch.setitem(CLOSURE_TOLERANCE, torch.float32, 0.0)
    with pytest.warns(
        ClosureWarning,
        match=r"'frozen attention' regime.* logits off the model's own \(relative .*, tolerance 0 for torch.float32\)",
    ):
        r = intervene(m, PROMPT, tcs, "L0.F1@2", target="w3")
    assert r.closure_tolerance == 0.0


def test_regimes_and_repr(llama):
    _, m, tcs = llama
    for ff in (True, False):
        for fa in (True, False):
            r = intervene(m, PROMPT, tcs, "L0.F1@*", target="w3", freeze_features=ff, frozen_attention=fa)
            assert r.regime == REGIMES[(ff, fa)][0]
            text = repr(r)
            assert len(text) < 400 and r.regime in text and "closure_error" in text
    assert r.interventions == ["L0.F1@* = 0"]


def test_feature_labels(llama):
    """One label form: 'L3.F12@5' (one position) and 'L3.F12@*' (every position, as Intervention(pos=None)); a label
    without its position is an ArgumentError that says how to write it."""
    _, m, tcs = llama
    assert Intervention.ablate("L1.F3@*") == Intervention(1, 3, None, "set", 0.0)
    assert str(Intervention.ablate("L1.F3@*")) == "L1.F3@* = 0"
    every = intervene(m, PROMPT, tcs, "L0.F1@*", target="w3")
    by_tuple = intervene(m, PROMPT, tcs, (0, None, 1, 0.0), target="w3")
    assert every.metric_change == pytest.approx(by_tuple.metric_change, abs=1e-9)
    with pytest.raises(ArgumentError, match=r"without its position.*'L3.F998@5'.*'L3.F998@\*'"):
        intervene(m, PROMPT, tcs, ["L3.F998"])
