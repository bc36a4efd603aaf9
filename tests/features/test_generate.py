"""Interventions during generation (interp.features.generate), checked against computations that do not use the code:

* without interventions the baseline is Hugging Face's own greedy ``generate`` (the same tokens, eight families,
  float64; its logits equal HF's float64 forward over the generated text), and the intervened run is the baseline
  (bit for bit live; to rounding with frozen attention);
* the first step with frozen attention (and live) changes the logits exactly as the single-step
  ``interp.features.intervene`` of that regime;
* live: a feature clamped at every position (or the prompt's only) and a steering vector at resid_pre / resid_post
  equal Hugging Face's forward with a hook adding (f̃ − f)·W_dec to the MLP's output (α·v to the layer's input /
  output), and HF's own ``generate`` with the same hooks picks the same tokens;
* frozen: a vector added to the last layer's resid_post at the prompt moves the first logits by the hand
  computation through the final norm with σ read off HF (γ ⊙ αv / σ · W_U), and the later steps are HF's plain
  forward over the intervened text (the prompt's keys and values are unchanged);
* clamping a feature whose decoder row is the unembedding of a token (through the final norm's gain) makes that
  token every generated token — the token the weights predict, not the baseline's;
* prompts of a list are generated as each alone; sampling is seeded; bad input raises ArgumentError naming it.
"""

from __future__ import annotations

import copy

import pytest
import torch

from interp.engine import model_from_hf
from interp.errors import ArgumentError, UnsupportedArchitectureError
from interp.features import GenerationResult, Intervention, Steer, Transcoder, generate, intervene
from tiny_models import fp64_decode_tol, tiny_hf_model, tiny_model, tiny_tokenizer
from tiny_transcoders import random_transcoders

PROMPT = "w1 w2 w3 w4 w5 w6"
F64 = torch.float64


def _pair(family, dtype=F64):
    """The HF model and interp's model of it (one object: in float64 the bridge makes HF's RMSNorms compute in
    float64, the reference every float64 test compares with), and random transcoders."""
    hf = tiny_hf_model(family, dtype=dtype)
    m = model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}", dtype=dtype)
    return hf, m, [t.to(dtype=dtype) for t in random_transcoders(m, 16, seed=2)]


def _hf_generate(hf, ids, n_new):
    """HF's own greedy decoding (its key/value cache), never stopping at <eos>: the generated ids [n_new]."""
    gc = copy.deepcopy(hf.generation_config)
    gc.eos_token_id, gc.pad_token_id = [], 0  # [] (not None, which falls back to the model's) never stops
    gc.do_sample, gc.max_new_tokens = False, n_new
    with torch.no_grad():
        out = hf.generate(ids, generation_config=gc)
    return out[0, ids.shape[1] :]


def _hf_logits(hf, ids, generated):
    """HF's logits that chose each generated token [S, V]: its forward over the prompt and each prefix of the generated
    tokens, read at the last position — the length HF's cached decoding reads at that step (a float32 softmax, as
    Llama's in a float64 model, rounds by its rows' length: a longer pass's earlier rows are not the step's)."""
    seq = torch.cat([ids, generated[None]], dim=1)
    with torch.no_grad():
        return torch.stack([hf(seq[:, :n]).logits[0, -1] for n in range(ids.shape[1], seq.shape[1])])


def _layers(hf):
    return hf.transformer.h if hasattr(hf, "transformer") else hf.model.layers


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox", "qwen3", "mistral", "gemma2", "olmo2", "gptj"])
def test_baseline_is_hf_generate(family):
    hf, m, tcs = _pair(family)
    ids = m.to_tokens(PROMPT)
    S = 6
    live = generate(m, PROMPT, tcs, [], max_new_tokens=S)
    want = _hf_generate(hf, ids, S)
    z = _hf_logits(hf, ids, want)
    err = float((live.baseline_logits[0] - z).abs().max() / z.abs().max())
    print(
        f"{family}: HF generate {want.tolist()}, interp {live.baseline_tokens[0].tolist()}; logits vs HF forward "
        f"relative {err:.1e}"
    )
    assert live.baseline_tokens[0].tolist() == want.tolist()
    assert err <= fp64_decode_tol(family, 1e-12)
    # no intervention: the live run is the baseline's own operations, bit for bit
    assert torch.equal(live.tokens, live.baseline_tokens) and torch.equal(live.logits, live.baseline_logits)
    assert live.texts == live.baseline_texts and live.first_difference == [None]
    frozen = generate(m, PROMPT, tcs, [], max_new_tokens=S, frozen_attention=True)
    print(f"  frozen, no intervention: closure {frozen.closure_error:.1e} (relative {frozen.relative_error:.1e})")
    assert torch.equal(frozen.baseline_logits, live.baseline_logits)
    assert torch.equal(frozen.tokens, frozen.baseline_tokens)
    assert float((frozen.logits - frozen.baseline_logits).abs().max()) <= 1e-12 * float(z.abs().max())
    assert frozen.relative_error <= 1e-13


def test_baseline_is_hf_generate_float32():
    hf, m, _ = _pair("llama", torch.float32)
    ids = m.to_tokens(PROMPT)
    r = generate(m, PROMPT, None, [], max_new_tokens=8)
    want = _hf_generate(hf, ids, 8)
    z = _hf_logits(hf, ids, want)
    err = float((r.baseline_logits[0] - z).abs().max() / z.abs().max())
    print(f"float32: logits vs HF forward relative {err:.1e}")
    assert r.baseline_tokens[0].tolist() == want.tolist() and err <= 1e-6


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox", "gemma2", "olmo2", "qwen3"])
@pytest.mark.parametrize("frozen", [True, False])
def test_first_step_equals_intervene(family, frozen):
    _, m, tcs = _pair(family)
    ivs = [Intervention.clamp("L0.F1@*", 3.0), Intervention.scale("L1.F2@2", 2.0), (1, -1, 5, 0.5)]
    g = generate(m, PROMPT, tcs, ivs, max_new_tokens=3, frozen_attention=frozen)
    one = intervene(m, PROMPT, tcs, ivs, frozen_attention=frozen)
    got = g.logits[0, 0] - g.baseline_logits[0, 0]
    want = one.logits_after - one.logits_before
    err = float((got - want).abs().max())
    print(
        f"{family} frozen={frozen}: first-step Δ logits vs intervene's: max |diff| {err:.1e}, max |Δ| "
        f"{float(want.abs().max()):.3g}; regime {g.regime!r} = {one.regime!r}"
    )
    assert g.regime == one.regime
    assert err <= 1e-11 * max(1.0, float(want.abs().max()))
    assert float(want.abs().max()) > 1e-3  # the interventions do move the logits


@pytest.fixture(scope="module")
def llama():
    return _pair("llama")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("positions", ["all", "prompt"])
def test_live_feature_clamp_equals_hooked_hf(family, positions):
    hf, m, tcs = _pair(family)
    ids = m.to_tokens(PROMPT)
    n, S, tc = ids.shape[1], 6, tcs[0]

    def hook(mod, args, out):  # layer 0's MLP write plus (f̃ − f)·W_dec, f̃ = f with feature 1 set to 3
        f = tc.encode(args[0])
        ft = f.clone()
        ft[..., 1] = 3.0
        d = (ft - f) @ tc.W_dec
        if positions == "prompt":
            if out.shape[1] == 1:  # HF's cached decoding: a generated position
                return out
            d[:, n:] = 0
        return out + d

    r = generate(m, PROMPT, tcs, [Intervention.clamp("L0.F1@*", 3.0)], max_new_tokens=S, positions=positions)
    h = _layers(hf)[0].mlp.register_forward_hook(hook)
    try:
        z = _hf_logits(hf, ids, r.tokens[0])
        want = _hf_generate(hf, ids, S)
    finally:
        h.remove()
    err = float((r.logits[0] - z).abs().max())
    print(f"{family} positions={positions}: {r.texts[0]!r} (baseline {r.baseline_texts[0]!r}); vs hooked HF {err:.1e}")
    assert err <= fp64_decode_tol(family, 1e-12) * float(z.abs().max())
    assert r.tokens[0].tolist() == want.tolist()
    assert r.first_difference[0] is not None  # the clamp changes the text


@pytest.mark.parametrize("site", ["resid_pre", "resid_post"])
def test_live_steering_equals_hooked_hf(llama, site):
    hf, m, _ = llama
    ids = m.to_tokens(PROMPT)
    v = torch.randn(m.arch.d_model, dtype=F64, generator=torch.Generator().manual_seed(0))
    r = generate(m, PROMPT, None, Steer(1, v, 2.0, site), max_new_tokens=6)
    layer = _layers(hf)[1]
    if site == "resid_pre":

        def pre(mod, args, kwargs):
            if args:
                return (args[0] + 2.0 * v, *args[1:]), kwargs
            kwargs["hidden_states"] = kwargs["hidden_states"] + 2.0 * v
            return args, kwargs

        h = layer.register_forward_pre_hook(pre, with_kwargs=True)
    else:
        h = layer.register_forward_hook(
            lambda mod, args, out: (out[0] + 2.0 * v, *out[1:]) if isinstance(out, tuple) else out + 2.0 * v
        )
    try:
        z = _hf_logits(hf, ids, r.tokens[0])
        want = _hf_generate(hf, ids, 6)
    finally:
        h.remove()
    err = float((r.logits[0] - z).abs().max())
    print(f"steer at L1.{site}: {r.texts[0]!r} (baseline {r.baseline_texts[0]!r}); vs hooked HF {err:.1e}")
    assert err <= fp64_decode_tol("llama", 1e-12) * float(z.abs().max()) and r.tokens[0].tolist() == want.tolist()
    assert r.interventions == [f"blocks.1.hook_{site} += 2·v"] and r.first_difference[0] is not None


def test_frozen_final_norm_by_hand(llama):
    """A vector added to the last layer's resid_post at the prompt, frozen: the first logits move by
    (γ ⊙ αv / σ) W_U with σ the final norm's scale at the last position read off HF; the prompt's keys and values are
    unchanged, so every later step is HF's plain forward over the intervened text."""
    hf, m, _ = llama
    ids = m.to_tokens(PROMPT)
    v = torch.randn(m.arch.d_model, dtype=F64, generator=torch.Generator().manual_seed(1))
    L = m.arch.n_layers
    r = generate(
        m, PROMPT, None, Steer(L - 1, v, 3.0, "resid_post"), max_new_tokens=5, frozen_attention=True, positions="prompt"
    )
    seen = {}  # the final norm's input at the last prompt position, in HF's own (unsteered) forward

    def keep(mod, args, out):
        seen["x"] = args[0][0, -1].detach()

    h = hf.model.norm.register_forward_hook(keep)
    try:
        with torch.no_grad():
            hf(ids)
    finally:
        h.remove()
    z = _hf_logits(hf, ids, r.tokens[0])
    with torch.no_grad():
        sigma = (seen["x"].pow(2).mean() + hf.config.rms_norm_eps).sqrt()
        want = (hf.model.norm.weight * 3.0 * v / sigma) @ hf.lm_head.weight.T
    got = r.logits[0, 0] - r.baseline_logits[0, 0]
    err = float((got - want).abs().max())
    later = float((r.logits[0, 1:] - z[1:]).abs().max())
    print(
        f"frozen final norm: Δ vs hand computation {err:.1e} (max |Δ| {float(want.abs().max()):.3g}); later steps vs "
        f"HF forward {later:.1e}; {r.texts[0]!r} (baseline {r.baseline_texts[0]!r})"
    )
    assert err <= 1e-12 * float(want.abs().max()) and float(want.abs().max()) > 1e-2
    assert later <= fp64_decode_tol("llama", 1e-12) * float(z.abs().max())


def test_clamp_makes_the_aligned_token_the_argmax(llama):
    """Layer 1's transcoder (the only one given) has feature 0's decoder row u = W_U[:, t] / γ_f: clamped to 10⁶ at
    every position it dominates the final stream, whose norm then gives γ_f ⊙ u / rms(u) ∝ W_U[:, t]; the logits tend to
    (γ_f ⊙ u / rms(u)) W_U, whose argmax (computed here from HF's weights) is t — every generated token."""
    hf, m, _ = llama
    d, W_U, gamma = m.arch.d_model, hf.lm_head.weight.detach(), hf.model.norm.weight.detach()
    base = generate(m, PROMPT, None, [], max_new_tokens=1).baseline_tokens[0, 0]
    for t in range(4, W_U.shape[0]):
        u = W_U[t] / gamma
        limit = (gamma * u / u.pow(2).mean().sqrt()) @ W_U.T
        if int(limit.argmax()) == t and t != int(base):
            break
    g = torch.Generator().manual_seed(0)
    W_dec = torch.randn(4, d, generator=g, dtype=F64) / 2
    W_dec[0] = u
    tc = Transcoder(
        torch.randn(4, d, generator=g, dtype=F64), torch.zeros(4, dtype=F64), W_dec, torch.zeros(d, dtype=F64), layer=1
    )
    r = generate(m, PROMPT, {1: tc}, Intervention.clamp("L1.F0@*", 1e6), max_new_tokens=5)
    off = float((r.logits[0] - limit).abs().max() / limit.abs().max())
    print(
        f"clamp L1.F0 (decoder ∝ W_U[:, {t}]/γ): {r.texts[0]!r}; baseline {r.baseline_texts[0]!r}; logits vs "
        f"their limit (γ ⊙ u / rms(u)) W_U: relative {off:.1e}"
    )
    assert r.tokens[0].tolist() == [t] * 5
    assert int(r.baseline_tokens[0, 0]) != t
    assert off <= 1e-4  # the rest of the stream is ~1e-6 of the clamped write


def test_prompts_are_generated_one_by_one(llama):
    _, m, tcs = llama
    prompts = ["w1 w2 w3", "w4 w5 w6 w7 w8 w9"]
    ivs = [Intervention.clamp("L0.F1@*", 2.0), Intervention.ablate((1, 3, -1))]  # pos −1: each prompt's last
    both = generate(m, prompts, tcs, ivs, max_new_tokens=4, frozen_attention=True)
    for b, p in enumerate(prompts):
        one = generate(m, p, tcs, ivs, max_new_tokens=4, frozen_attention=True)
        assert torch.equal(both.tokens[b], one.tokens[0]) and torch.equal(both.logits[b], one.logits[0])
        assert torch.equal(both.baseline_logits[b], one.baseline_logits[0])
        assert both.texts[b] == one.texts[0] and both.prompts[b] == p
    assert both.tokens.shape == (2, 4) and both.logits.shape == (2, 4, m.arch.d_vocab)
    # token ids in, the same generation
    ids = generate(m, m.to_tokens(prompts[1]), tcs, ivs, max_new_tokens=4, frozen_attention=True)
    assert torch.equal(ids.tokens[0], both.tokens[1])


def test_sampling_is_seeded(llama):
    _, m, tcs = llama
    kw = dict(max_new_tokens=8, temperature=2.0, seed=3)
    a = generate(m, PROMPT, tcs, [], **kw)
    assert torch.equal(a.tokens, a.baseline_tokens)  # one seed for both runs: the same draws
    assert torch.equal(generate(m, PROMPT, tcs, [], **kw).tokens, a.tokens)
    g = torch.Generator().manual_seed(3)  # the documented rule: a draw from softmax(z / T) per step
    replay = [int(torch.multinomial(torch.softmax(z.double() / 2.0, -1), 1, generator=g)) for z in a.baseline_logits[0]]
    assert replay == a.baseline_tokens[0].tolist()
    other = generate(m, PROMPT, tcs, [], max_new_tokens=8, temperature=2.0, seed=4)
    assert not torch.equal(other.tokens, a.tokens)
    greedy = generate(m, PROMPT, tcs, [], max_new_tokens=8)
    assert greedy.baseline_tokens[0].tolist() == greedy.baseline_logits[0].argmax(-1).tolist()


def test_result(llama, tmp_path):
    _, m, tcs = llama
    r = generate(
        m,
        ["w1 w2 w3", "w4 w5"],
        tcs,
        [Intervention.clamp("L0.F1@*", 3.0), Steer(0, torch.ones(m.arch.d_model, dtype=F64), 0.5, name="ones")],
        max_new_tokens=3,
        top_k=4,
    )
    assert isinstance(r, GenerationResult) and r.interventions == ["L0.F1@* = 3", "blocks.0.hook_resid_pre += 0.5·ones"]
    text = repr(r)
    assert len(text) < 400 and "live" in text and "w" in text
    assert r.to("cpu") is r and r.labels == ["p0.s0", "p0.s1", "p0.s2", "p1.s0", "p1.s1", "p1.s2"]
    df = r.to_dataframe()
    row = r["p1.s2"]
    assert row["token_id"] == int(r.tokens[1, 2]) and row["logit"] == pytest.approx(
        float(r.logits[1, 2, row["token_id"]])
    )
    lp, blp = torch.log_softmax(r.logits[1, 2], -1), torch.log_softmax(r.baseline_logits[1, 2], -1)
    assert row["kl"] == pytest.approx(float((lp.exp() * (lp - blp)).sum()), rel=1e-9)
    assert list(df["label"]) == r.labels and r.top(2)["kl"].tolist() == sorted(df["kl"], reverse=True)[:2]
    tt = r.top_tokens(1, baseline=True)
    assert tt[tt["rank"] == 1]["token_id"].tolist() == r.baseline_logits[1].argmax(-1).tolist()
    assert r.top_strs[0][0][0] == m.tokenizer.decode([int(r.top_ids[0, 0, 0])])
    assert r.texts[0] == m.tokenizer.decode(r.tokens[0].tolist())
    back = GenerationResult.load(r.save(tmp_path / "g.safetensors"))
    assert torch.equal(back.logits, r.logits) and back.texts == r.texts and back.top_strs == r.top_strs
    r.plot(prompt=1)


def test_errors(llama):
    _, m, tcs = llama
    d = m.arch.d_model
    with pytest.raises(ArgumentError, match="max_new_tokens=0 must be a positive int"):
        generate(m, PROMPT, tcs, [], max_new_tokens=0)
    with pytest.raises(ArgumentError, match="max_new_tokens=-2"):
        generate(m, PROMPT, tcs, [], max_new_tokens=-2)
    with pytest.raises(ArgumentError, match=r"interventions\[1\]: layer=0 has no transcoder.*layers \[1\]"):
        generate(m, PROMPT, {1: tcs[1]}, [Intervention.clamp("L1.F0@*", 1.0), "L0.F1@*"], max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"interventions\[0\]: layer=5 must be an int in \[0, 1\]"):
        generate(m, PROMPT, tcs, Intervention(5, 0, None, "set", 1.0), max_new_tokens=2)
    with pytest.raises(
        ArgumentError, match=r"interventions\[0\]: feature 999 of layer 0 does not exist.*n_features=16"
    ):
        generate(m, PROMPT, tcs, (0, None, 999, 1.0), max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"interventions\[0\]: vector has shape \(5,\).*\[d_model\] = \[32\]"):
        generate(m, PROMPT, None, Steer(0, torch.ones(5), 1.0), max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"site='mlp_out' must be one of"):
        generate(m, PROMPT, None, Steer(0, torch.ones(d), 1.0, "mlp_out"), max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"layer=2 must be an int in \[0, 1\]"):
        generate(m, PROMPT, None, Steer(2, torch.ones(d)), max_new_tokens=2)
    with pytest.raises(ArgumentError, match="alpha=nan"):
        generate(m, PROMPT, None, Steer(0, torch.ones(d), float("nan")), max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"pos=9 must be None"):
        generate(m, PROMPT, tcs, Intervention(0, 1, 9, "set", 1.0), max_new_tokens=2)
    with pytest.raises(ArgumentError, match="positions='generated'"):
        generate(m, PROMPT, tcs, [], max_new_tokens=2, positions="generated")
    with pytest.raises(ArgumentError, match="temperature=-1"):
        generate(m, PROMPT, tcs, [], max_new_tokens=2, temperature=-1)
    with pytest.raises(ArgumentError, match="frozen_attention='yes'"):
        generate(m, PROMPT, tcs, [], max_new_tokens=2, frozen_attention="yes")
    with pytest.raises(ArgumentError, match="transcoders has 1 entries"):
        generate(m, PROMPT, [Transcoder(tcs[0].W_enc, tcs[0].b_enc, tcs[0].W_dec, tcs[0].b_dec)], [], max_new_tokens=2)
    with pytest.raises(UnsupportedArchitectureError, match="not a decoder"):
        generate(tiny_model("bert"), "w1 w2", None, [], max_new_tokens=2)
    with pytest.raises(ArgumentError, match="past the model's learned positions of 64"):
        generate(tiny_model("gpt2"), PROMPT, None, [], max_new_tokens=60)


@pytest.mark.real
@pytest.mark.slow
def test_smollm2(smollm2):
    """smollm2-135m (float32): the baseline is HF's own greedy generate (the same tokens; logits within float32
    rounding of HF's forward over the text), the intervened run without interventions is the baseline bit for bit,
    and the first step's change equals intervene's in both regimes."""
    m, hf = smollm2, smollm2.bridge.original_model
    prompt = "The capital of France is"
    ids = m.to_tokens(prompt)
    r = generate(m, prompt, None, [], max_new_tokens=8)
    want = _hf_generate(hf, ids, 8)
    z = _hf_logits(hf, ids, want)
    err = float((r.baseline_logits[0] - z).abs().max() / z.abs().max())
    print(
        f"smollm2: {r.baseline_texts[0]!r}; HF generate the same: {r.baseline_tokens[0].tolist() == want.tolist()}; "
        f"logits vs HF forward relative {err:.1e}"
    )
    assert r.baseline_tokens[0].tolist() == want.tolist() and err <= 1e-5
    assert torch.equal(r.logits, r.baseline_logits)
    tcs = random_transcoders(m, 256, seed=0, activation="topk", k=3)
    ivs = [Intervention.clamp((15, 3, None), 10.0), Intervention.scale((20, 7, ids.shape[1] - 1), 3.0)]
    for frozen in (True, False):
        g = generate(m, prompt, tcs, ivs, max_new_tokens=2, frozen_attention=frozen)
        one = intervene(m, prompt, tcs, ivs, frozen_attention=frozen)
        got, want_d = g.logits[0, 0] - g.baseline_logits[0, 0], one.logits_after - one.logits_before
        diff = float((got - want_d).abs().max())
        scale = float(g.baseline_logits[0, 0].abs().max())
        print(
            f"  frozen={frozen}: first-step Δ vs intervene max |diff| {diff:.1e} (max |Δ| "
            f"{float(want_d.abs().max()):.3g}, max |logit| {scale:.3g}); closure {g.relative_error:.1e}"
        )
        assert diff <= 1e-5 * scale and float(want_d.abs().max()) > 0.1
        assert g.relative_error <= 1e-5
