"""Generation over a cross-layer transcoder, and prompts generated in batches (interp.features.generate), checked
against computations that do not use the code:

* a CLT feature clamped or scaled while generating writes its change Δf_k through its decoders at its layer k and
  every later layer: the first step's logits equal ``intervene`` over the same CLT and interventions (live and
  frozen attention, float64), and every step equals a hand-written reference — the Hugging Face model greedy-decoded
  step by step (a full forward per step, no cache) with forward hooks on each layer's MLP that encode its input with
  the CLT's encoder (ReLU written out), apply the clamp / scale, and add Σ_{k ≤ l} Δf_k W_dec[k → l] to its output:
  the same tokens and logits (float64); the same encoders as per-layer transcoders (no later writes) generate
  something else;
* a CLT whose decoders to later layers are zero generates exactly what the per-layer transcoders of its encoders do;
* prompts of one length run as one batch: tokens identical and logits within 1e-10 of each prompt generated alone
  (float64; live and frozen, feature interventions, steering vectors, a position-specific clamp, seeded sampling).
"""

from __future__ import annotations

import pytest
import torch

from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import CrossLayerTranscoder, Intervention, Steer, generate, intervene
from tiny_models import fp64_decode_tol, tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_clt

PROMPT = "w1 w2 w3 w4 w5 w6"
F64 = torch.float64
#: a clamp of a layer-0 feature at every position and a ×3 of a layer-1 feature at every position: both write on
#: at the later layers
IVS = [Intervention.clamp("L0.F1@*", 3.0), Intervention.scale("L1.F2@*", 3.0)]


@pytest.fixture(scope="module")
def models():
    return {}


def _pair(models, family):
    """The float64 HF model of 3 layers, interp's model of it and a random ReLU CLT."""
    if family not in models:
        hf = tiny_hf_model(family, n_layers=3, dtype=F64)
        m = model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}-3", dtype=F64)
        models[family] = hf, m, random_clt(m, 12, seed=6, dtype=F64)
    return models[family]


def _mlps(hf):
    body = (
        hf.transformer.h
        if hasattr(hf, "transformer")
        else (hf.gpt_neox if hasattr(hf, "gpt_neox") else hf.model).layers
    )
    return [layer.mlp for layer in body]


def _hand_reference(hf, c: CrossLayerTranscoder, ids: torch.Tensor, steps: int):
    """Greedy decoding of the HF model with hooks on every MLP: f_k = relu(x_k W_enc[k]ᵀ + b_enc[k]) of the MLP's
    input x_k, f̃_k = f_k with IVS applied, output_l += Σ_{k ≤ l} (f̃_k − f_k) W_dec[k → l]; a full forward over the
    whole sequence at each step. Returns (tokens [steps], logits [steps, V])."""
    deltas: dict[int, torch.Tensor] = {}

    def hook(l):
        def add(mod, args, out):
            x = args[0]
            f = torch.relu(x @ c.W_enc[l].T + c.b_enc[l])
            ft = f.clone()
            if l == 0:
                ft[..., 1] = 3.0
            if l == 1:
                ft[..., 2] = f[..., 2] * 3.0
            deltas[l] = ft - f
            for k in range(l + 1):
                if k in deltas:
                    out = out + deltas[k] @ c.W_dec[k][:, l - k]
            return out

        return add

    handles = [mlp.register_forward_hook(hook(l)) for l, mlp in enumerate(_mlps(hf))]
    seq, toks, zs = ids, [], []
    try:
        with torch.no_grad():
            for _ in range(steps):
                deltas.clear()
                z = hf(seq).logits[0, -1]
                t = int(z.argmax())
                toks.append(t)
                zs.append(z)
                seq = torch.cat([seq, torch.tensor([[t]])], dim=1)
    finally:
        for h in handles:
            h.remove()
    return toks, torch.stack(zs)


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox"])
def test_clt_generation_is_the_hooked_hf_model(models, family):
    hf, m, c = _pair(models, family)
    ids = m.to_tokens(PROMPT)
    S = 5
    r = generate(m, PROMPT, c, IVS, max_new_tokens=S)
    toks, z = _hand_reference(hf, c, ids, S)
    err = float((r.logits[0] - z).abs().max())
    print(
        f"{family}: CLT clamp while generating {r.tokens[0].tolist()} (baseline {r.baseline_tokens[0].tolist()}); "
        f"hand reference {toks}; max |Δ logits| {err:.1e} of max |logit| {float(z.abs().max()):.3g}"
    )
    assert r.tokens[0].tolist() == toks
    assert err <= fp64_decode_tol(family, 1e-12) * float(z.abs().max())
    assert float((r.logits - r.baseline_logits).abs().max()) > 1e-2  # the interventions do move the logits
    # the later decoders matter: per-layer transcoders of the same encoders (own-layer writes only) would drop them,
    # and the CLT has none to give, saying to pass the CLT
    with pytest.raises(ArgumentError, match=r"encoder\(0\): .*transcoders=clt"):
        generate(m, PROMPT, [c.encoder(l) for l in range(3)], IVS, max_new_tokens=S)


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox"])
@pytest.mark.parametrize("frozen", [True, False])
def test_clt_first_step_equals_intervene(models, family, frozen):
    _, m, c = _pair(models, family)
    ivs = [*IVS, Intervention.scale("L0.F4@2", -2.0), (1, -1, 5, 0.5)]
    g = generate(m, PROMPT, c, ivs, max_new_tokens=3, frozen_attention=frozen)
    one = intervene(m, PROMPT, c, ivs, frozen_attention=frozen)
    err = float((g.logits[0, 0] - one.logits_after).abs().max())
    change = float((one.logits_after - one.logits_before).abs().max())
    print(
        f"{family} frozen={frozen}: first step vs intervene's logits {err:.1e} (max |Δ| {change:.3g}); regime "
        f"{g.regime!r}, closure {g.closure_error:.1e}"
    )
    assert g.regime == one.regime
    assert err <= 1e-11 * max(1.0, float(one.logits_after.abs().max()))
    assert change > 1e-3


def test_clt_without_later_decoders_is_the_per_layer_transcoders(models):
    _, m, c = _pair(models, "llama")
    own = CrossLayerTranscoder(
        c.W_enc, c.b_enc, tuple(torch.cat([w[:, :1], torch.zeros_like(w[:, 1:])], 1) for w in c.W_dec), c.b_dec
    )
    for frozen in (False, True):
        a = generate(m, PROMPT, own, IVS, max_new_tokens=4, frozen_attention=frozen)
        b = generate(m, PROMPT, [own.encoder(l) for l in range(3)], IVS, max_new_tokens=4, frozen_attention=frozen)
        assert torch.equal(a.tokens, b.tokens)
        assert float((a.logits - b.logits).abs().max()) <= 1e-12 * float(b.logits.abs().max())
        assert float((a.logits[0, 0] - a.baseline_logits[0, 0]).abs().max()) > 1e-3  # the interventions act


@pytest.fixture()
def batch_sizes(monkeypatch):
    """The number of rows of every pass generate runs."""
    from interp.features import _generation_run

    seen: list[int] = []
    logits = _generation_run.Run.logits

    def spy(self, ids, t0):
        seen.append(int(ids.shape[0]))
        return logits(self, ids, t0)

    monkeypatch.setattr(_generation_run.Run, "logits", spy)
    return seen


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_batched_prompts_equal_each_alone(models, batch_sizes, frozen, temperature):
    _, m, c = _pair(models, "llama")
    prompts = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w1", "w2 w2 w3 w4", "w3 w4"]  # two lengths
    v = torch.randn(m.arch.d_model, dtype=F64, generator=torch.Generator().manual_seed(2))
    ivs = [*IVS, Intervention.ablate((1, 3, -1)), Steer(1, v, 0.5, "resid_mid")]  # pos −1: each prompt's last
    kw = dict(max_new_tokens=5, frozen_attention=frozen, temperature=temperature, seed=7)
    both = generate(m, prompts, c, ivs, **kw)
    groups: dict[int, int] = {}
    for p in prompts:
        n = m.to_tokens(p).shape[1]
        groups[n] = groups.get(n, 0) + 1
    assert sorted(groups.values()) == [2, 3]  # two lengths: a batch of 3 and one of 2
    # per batch: 5 steps of each run, and with frozen attention the closure's prompt pass and the live first step
    assert sorted(set(batch_sizes)) == [2, 3] and len(batch_sizes) == 2 * (2 * 5 + 2 * int(frozen))
    worst = 0.0
    for b, p in enumerate(prompts):
        one = generate(m, p, c, ivs, **kw)
        assert both.tokens[b].tolist() == one.tokens[0].tolist()
        assert both.baseline_tokens[b].tolist() == one.baseline_tokens[0].tolist()
        worst = max(
            worst,
            float((both.logits[b] - one.logits[0]).abs().max()),
            float((both.baseline_logits[b] - one.baseline_logits[0]).abs().max()),
        )
        assert both.texts[b] == one.texts[0] and both.prompts[b] == p
    print(f"frozen={frozen} T={temperature}: batched vs alone, max |Δ logit| {worst:.1e}; passes {batch_sizes[:4]}…")
    assert worst <= 1e-10
    assert float((both.logits[:, 0] - both.baseline_logits[:, 0]).abs().amax(-1).min()) > 1e-3  # they act on each
    # token ids [batch, pos] of one length: one batch, the same generation
    ids = torch.cat([m.to_tokens(prompts[i]) for i in (0, 2, 3)])
    again = generate(m, ids, c, ivs, **kw)
    assert torch.equal(again.tokens, both.tokens[[0, 2, 3]])


def test_clt_arguments(models):
    """A trained CLT's wrapper (``layers``, ``transcoders``) is its CLT; a CLT of another width, a feature past its
    n_features and a CLT of fewer layers than the intervention's are ArgumentErrors naming them."""
    from types import SimpleNamespace

    from interp.errors import ArgumentError
    from tiny_models import tiny_model

    _, m, c = _pair(models, "llama")
    a = generate(m, PROMPT, c, IVS, max_new_tokens=2)
    b = generate(m, PROMPT, SimpleNamespace(layers=(0, 1, 2), transcoders=c), IVS, max_new_tokens=2)
    assert torch.equal(a.logits, b.logits) and a.interventions == ["L0.F1@* = 3", "L1.F2@* × 3"]
    with pytest.raises(ArgumentError, match="d_model=32"):
        generate(m, PROMPT, random_clt(n_layers=3, d_model=8, n_features=4), IVS, max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"interventions\[0\]: feature 99 of layer 0 does not exist.*n_features=12"):
        generate(m, PROMPT, c, Intervention.clamp("L0.F99@*", 1.0), max_new_tokens=2)
    two = random_clt(tiny_model("llama", dtype=F64), 12, dtype=F64)  # encoders at layers 0 and 1 of 3
    with pytest.raises(ArgumentError, match=r"interventions\[0\]: layer=2 has no transcoder.*layers \[0, 1\]"):
        generate(m, PROMPT, two, Intervention.clamp("L2.F1@*", 1.0), max_new_tokens=2)
