"""attribution_patch: the first-order term of every patch, against forward-mode autograd on the bridge.

The reference for each node n is d/dε M(base run with a_n ← a_n + ε Δa_n) at ε = 0, computed by
forward-mode AD (dual numbers) through the bridge's own forward pass, its own unembedding and a metric
written here — one batched forward with a different tangent per row — while attribution_patch takes one
reverse-mode gradient at interp's hooks and reads the metric through interp's readout.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import interp
import interp.stream.internal
from interp.causal import Direction, KL, LogitDiff
from interp.causal._atp import attribution_patch, key_fix_each
from interp.engine.internal import Engine
from interp.errors import (
    ArgumentError,
    InterpError,
    LabelError,
    ShapeError,
    UnsupportedArchitectureError,
    UnsupportedOperationError,
)
from interp.models import model_from_hf_unchecked as model_from_hf
from interp.stream.internal import count_hooks
from rounding import assert_same_up_to_rounding
from tiny_models import FAMILIES, FP32_ATTENTION, MORE_FAMILIES, tiny_hf_model, tiny_model, tiny_tokenizer

# pairs of equal length; the second pair is shorter, so the batch has right padding
CLEAN = ["w1 w2 w3 w4 w5", "w6 w7 w8"]
CORRUPT = ["w1 w9 w3 w4 w5", "w6 w11 w8"]
A, W = "w12", "w13"


def _metric(model, family):
    if family == "bert":
        return Direction(torch.linspace(-1, 1, model.arch.d_model))
    return LogitDiff(A, W)


_HEAD = re.compile(r"L(\d+)\.H(\d+)$")
_MLP = re.compile(r"L(\d+)\.mlp$")
_IN = re.compile(r"L(\d+)\.attn\.([qkv])\[H(\d+)\]$")
_EMB = {"embed": "embed.hook_out", "pos_embed": "pos_embed.hook_out", "type_embed": "token_type_embed.hook_out"}


def _where(label, arch=None, patterns=False):
    """(hook, slot) where a node's activation lives — slot: a head index, "all" (every head: a whole
    attention layer, affine in its heads' z) or None (a stream tensor). Written independently of
    interp's node planner."""
    if label in _EMB:
        return _EMB[label], None
    if label.startswith("blocks."):
        if label.endswith("resid_mid") and arch is not None and arch.norm_placement == "post":
            return label.replace("hook_resid_mid", "ln1.hook_out"), None  # x_mid = N1(x + attn)
        return label, None
    if m := _HEAD.match(label):
        return f"blocks.{m[1]}.attn.hook_{'pattern' if patterns else 'z'}", int(m[2])
    if m := _MLP.match(label):
        return f"blocks.{m[1]}.hook_mlp_out", None
    if m := re.match(r"L(\d+)\.attn$", label):
        return f"blocks.{m[1]}.attn.hook_z", "all"
    m = _IN.match(label)
    return f"blocks.{m[1]}.attn.hook_{m[2]}", int(m[3])


def _plain(model, batch, hooks):
    store = {}

    def keep(n):
        def h(x, hook=None):
            store[n] = x.detach().clone()
            return x

        return h

    with torch.no_grad(), model.bridge.hooks(fwd_hooks=[(n, keep(n)) for n in hooks]):
        out = model.bridge(batch.tokens, attention_mask=batch.attention_mask)
    return store, out


def _reference_metric(model, family, out, final, mask, metric):
    """The metric from the bridge's own output (decoders: its logits at the last real token)."""
    rows = torch.arange(out.shape[0])
    if family == "bert":
        m = mask.to(final.dtype)
        pooled = (final * m[..., None]).sum(1) / m.sum(1, keepdim=True)
        return pooled @ metric.direction.to(final.dtype)
    last = mask.sum(1) - 1
    logits = out[rows, last]
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (A, W))
    return logits[:, a] - logits[:, w]


def _jvp_effects(model, family, base, src, labels, each, metric, patterns=False):
    """Forward-mode d/dε M along each node's Δa (at every position, or one position per variant)."""
    B, T = base.tokens.shape
    arch = model.arch
    hooks = sorted({_where(l, arch, patterns)[0] for l in labels})
    final = f"blocks.{arch.n_layers - 1}.hook_resid_post"
    a_base, _ = _plain(model, base, hooks)
    a_src, _ = _plain(model, src, hooks)
    variants = [(l, t) for l in labels for t in (range(T) if each else [None])]
    R = len(variants)
    # the bridge's hook_resid_mid is ln2's input only: shift the mid stream through the attention
    # output that is added to it (pre-norm), so the residual add sees the shift too
    inject = {h: h.replace("hook_resid_mid", "hook_attn_out") if h.endswith("hook_resid_mid") else h for h in hooks}
    # BERT's and GPT-J's pattern hooks only observe (the bridge fires them after the attention ran): a pattern shift
    # dA enters through z = A V instead, as dz = dA V (V of the base run, fixed)
    via_z = patterns and family in ("bert", "gptj")
    if via_z:
        v_base, _ = _plain(model, base, sorted({h.replace("hook_pattern", "hook_v") for h in hooks}))
        inject = {h: h.replace("hook_pattern", "hook_z") for h in hooks}
        a_z, _ = _plain(model, base, sorted(inject.values()))
    tangents = {
        inject[h]: torch.zeros(
            R * B, *(a_z[inject[h]] if via_z else a_base[h]).shape[1:], dtype=a_base[h].dtype, device=a_base[h].device
        )
        for h in hooks
    }
    for i, (lab, t) in enumerate(variants):
        h, slot = _where(lab, arch, patterns)
        d = a_src[h] - a_base[h]
        sel = torch.zeros_like(d)
        ts = slice(None) if t is None else slice(t, t + 1)
        if slot is None or slot == "all":
            sel[:, ts] = d[:, ts]
        elif h.endswith("hook_pattern"):  # [b, H, T(query), T(key)]
            sel[:, slot, ts] = d[:, slot, ts]
        else:
            sel[:, ts, slot] = d[:, ts, slot]
        if via_z:  # [b, H, T, T] @ [b, T, H, d] -> [b, T, H, d]
            sel = torch.einsum("bhts,bshd->bthd", sel, v_base[h.replace("hook_pattern", "hook_v")])
        tangents[inject[h]][i * B : (i + 1) * B] += sel
    store = {}

    def shift(h):
        def fn(x, hook=None):
            return x + fwAD.make_dual(torch.zeros_like(x), tangents[h])

        return fn

    def keep(x, hook=None):
        store["final"] = x
        return x

    tokens, mask = base.tokens.repeat(R, 1), base.attention_mask.repeat(R, 1)
    fwd = [(h, shift(h)) for h in tangents] + [(final, keep)]
    with torch.no_grad(), fwAD.dual_level(), model.bridge.hooks(fwd_hooks=fwd):
        out = model.bridge(tokens, attention_mask=mask)
        M = _reference_metric(model, family, out, store["final"], mask, metric)
        tangent = fwAD.unpack_dual(M).tangent
    tangent = tangent.reshape(len(labels), T if each else 1, B)
    return tangent if each else tangent[:, 0]


def _check(model, family, nodes, positions, direction="denoise", metric=None, rtol=1e-4, atol_scale=1e-4):
    metric = metric or _metric(model, family)
    r = attribution_patch(model, CLEAN, CORRUPT, metric=metric, nodes=nodes, positions=positions, direction=direction)
    base_in, src_in = (CORRUPT, CLEAN) if direction == "denoise" else (CLEAN, CORRUPT)
    base, src = interp.stream.internal.as_batch(model, base_in), interp.stream.internal.as_batch(model, src_in)
    ref = _jvp_effects(model, family, base, src, r.labels, positions == "each", metric, patterns=nodes == "patterns")
    base_m = r.corrupt_per_prompt if direction == "denoise" else r.clean_per_prompt
    est = r.per_prompt - base_m
    assert est.shape == ref.shape
    scale = float(ref.abs().max())
    assert scale > 0
    torch.testing.assert_close(est.double(), ref.double(), rtol=rtol, atol=atol_scale * scale)
    return r


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
@pytest.mark.parametrize(
    "nodes,positions",
    [
        ("components", "all"),
        ("components", "each"),
        ("resid", "all"),
        ("head_inputs", "all"),
        ("head_inputs", "each"),
        (["L1.attn", "L0.attn", "L1.H2", "embed", "blocks.1.hook_resid_pre"], "each"),
    ],
)
def test_atp_equals_forward_mode_first_order_term(family, nodes, positions):
    model = tiny_model(family)
    _check(model, family, nodes, positions)


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
def test_atp_patterns_in_float64(family):
    """Pattern nodes (per query position). The tiny models' patterns barely move between the two inputs
    (effects ~1e-5, sums of cancelling terms), so float64: float32 rounding would be a third of them."""
    model = tiny_model(family, dtype=torch.float64)
    # Phi-3's and GPT-J's own attention runs in float32 even in a float64 model (tiny_models.FP32_ATTENTION) and
    # attribution patching reads interp's float64 forward: the forward-mode reference, taken through the model's own
    # forward, agrees with it at the float32 checks' tolerance only
    tol = 1e-4 if family in FP32_ATTENTION else 1e-6
    _check(model, family, "patterns", "each", rtol=tol, atol_scale=tol)


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_atp_noising_takes_the_gradient_at_clean(family):
    model = tiny_model(family)
    r = _check(model, family, "components", "all", direction="noise")
    assert r.direction == "noise" and r.details["gradient_at"] == "clean"
    torch.testing.assert_close(r.values, r.per_prompt.mean(-1))


def test_atp_in_float64():
    model = tiny_model("llama", dtype=torch.float64)
    # the bridge takes its softmax in float32 even for a float64 model: ~1e-9 relative is its floor
    _check(model, "llama", "components", "each", rtol=1e-7, atol_scale=1e-8)


@pytest.mark.slow
def test_atp_kl_metric_denoising():
    """KL(clean ‖ patched) at the corrupt run: its gradient is not zero there (it is at clean)."""
    model = tiny_model("gpt2")
    r = attribution_patch(model, CLEAN, CORRUPT, metric=KL(), nodes="components")
    base, src = interp.stream.internal.as_batch(model, CORRUPT), interp.stream.internal.as_batch(model, CLEAN)
    _, clean_out = _plain(model, src, [])
    rows = torch.arange(2)
    last = src.attention_mask.sum(1) - 1
    lp_clean = torch.log_softmax(clean_out[rows, last], -1)
    hooks = sorted({_where(l)[0] for l in r.labels})
    a_base, _ = _plain(model, base, hooks)
    a_src, _ = _plain(model, src, hooks)
    for i, lab in enumerate(r.labels[:6]):
        h, slot = _where(lab)
        d = a_src[h] - a_base[h]
        if slot is not None:
            keep = torch.zeros_like(d)
            keep[:, :, slot] = d[:, :, slot]
            d = keep
        with (
            torch.no_grad(),
            fwAD.dual_level(),
            model.bridge.hooks(fwd_hooks=[(h, lambda x, hook=None, d=d: x + fwAD.make_dual(torch.zeros_like(x), d))]),
        ):
            out = model.bridge(base.tokens, attention_mask=base.attention_mask)
            lp = torch.log_softmax(out[rows, last], -1)
            kl = (lp_clean.exp() * (lp_clean - lp)).sum(-1)
            ref = fwAD.unpack_dual(kl).tangent
        torch.testing.assert_close(r.per_prompt[i] - r.corrupt_per_prompt, ref, rtol=1e-4, atol=1e-6)
    assert r.clean == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# the QK fix


def _patched_patterns(model, base, src, layer, kind, slot, t):
    """The layer's attention pattern with one q (query head) or k (KV head) replaced by the source's —
    at position t, or every position when t is None — by an actual forward pass."""
    name = f"blocks.{layer}.attn.hook_{kind}"
    a_src, _ = _plain(model, src, [name])
    store = {}

    def put(x, hook=None):
        x = x.clone()
        ts = slice(None) if t is None else slice(t, t + 1)
        x[:, ts, slot] = a_src[name][:, ts, slot]
        return x

    def keep(x, hook=None):
        store["A"] = x.detach().clone()
        return x

    with torch.no_grad(), model.bridge.hooks(fwd_hooks=[(name, put), (f"blocks.{layer}.attn.hook_pattern", keep)]):
        model.bridge(base.tokens, attention_mask=base.attention_mask)
    return store["A"]


def _pattern_grad(model, family, base, layer, metric):
    store = {}
    final = f"blocks.{model.arch.n_layers - 1}.hook_resid_post"

    def keep(n):
        def h(x, hook=None):
            store[n] = x
            return x

        return h

    pat = f"blocks.{layer}.attn.hook_pattern"
    with torch.enable_grad(), model.bridge.hooks(fwd_hooks=[(pat, keep(pat)), (final, keep(final))]):
        out = model.bridge(base.tokens, attention_mask=base.attention_mask)
        M = _reference_metric(model, family, out, store[final], base.attention_mask, metric)
        (g,) = torch.autograd.grad(M.sum(), store[pat])
    return store[pat].detach(), g


@pytest.mark.parametrize("family", ["gemma2", "olmo2", "olmoe"])
def test_qk_fix_refuses_soft_capped_scores(family):
    """The QK fix rebuilds scores as q·k from the bridge's hooks: with capped scores it cannot; with OLMo 2's
    projection-wide QK-norm one head's patched q or k moves the σ every head is normed by, which a per-head
    fix does not model (OLMoE's QK-norm is OLMo 2's)."""
    model = tiny_model(family)
    with pytest.raises(UnsupportedArchitectureError, match="qk_fix"):
        attribution_patch(model, CLEAN, CORRUPT, metric=_metric(model, family), nodes=["L1.attn.q[H0]"], qk_fix=True)


@pytest.mark.parametrize(
    "family", ["llama", "gpt2", "neox", "bert", "qwen2", "mistral", "gemma", "phi3", "gptj", "qwen3", "gemma3_text"]
)
@pytest.mark.slow
@pytest.mark.parametrize("positions", ["all", "each"])
def test_qk_fix_is_the_exact_pattern_change_times_the_pattern_gradient(family, positions):
    """AtP*: for q and k nodes, ĉ = Σ (A' − A)·∂M/∂A with A' from an actual patched forward pass."""
    model = tiny_model(family)
    metric = _metric(model, family)
    layer = 1
    labels = [f"L{layer}.attn.q[H{h}]" for h in range(model.arch.n_heads)] + [
        f"L{layer}.attn.k[H{g}]" for g in range(model.arch.n_kv_heads)
    ]
    r = attribution_patch(model, CLEAN, CORRUPT, metric=metric, nodes=labels, positions=positions, qk_fix=True)
    base, src = interp.stream.internal.as_batch(model, CORRUPT), interp.stream.internal.as_batch(model, CLEAN)
    A, g = _pattern_grad(model, family, base, layer, metric)
    T = base.tokens.shape[1]
    G = model.arch.group_size
    for i, lab in enumerate(labels):
        kind, slot = lab.split(".")[2][0], int(lab.split("[H")[1][:-1])
        heads = [slot] if kind == "q" else list(range(slot * G, (slot + 1) * G))
        for t in range(T) if positions == "each" else [None]:
            A1 = _patched_patterns(model, base, src, layer, kind, slot, t)
            ref = ((A1 - A)[:, heads] * g[:, heads]).sum((1, 2, 3))  # [batch]
            est = r.per_prompt[i] if t is None else r.per_prompt[i, t]
            torch.testing.assert_close(est - r.corrupt_per_prompt, ref, rtol=1e-3, atol=1e-6)


def test_key_fix_each_matches_a_softmax_per_key_on_saturated_rows():
    """The O(T²) identity (A'_t − A_t)·g_t = (p' − p)(g_ts − m_t,−s) against one softmax per key, in float64,
    with rows saturated up to 1 − 1e-30 and score changes up to −100."""
    torch.manual_seed(0)
    b, H, T = 2, 3, 7
    scores = torch.randn(b, H, T, T, dtype=torch.float64) * 3
    scores[0, 0, :, 2] += 80.0  # key 2 takes everything in these rows (where it is visible)
    scores[1, 2, 5, 1] += 40.0
    valid = torch.ones(T, T, dtype=torch.bool).tril().expand(b, H, T, T)
    grad = torch.randn(b, H, T, T, dtype=torch.float64)
    delta = torch.randn(b, H, T, T, dtype=torch.float64) * 20
    delta[0, 0, :, 2] = -100.0  # the saturated key is switched off
    got = key_fix_each(scores, valid, grad, delta)
    A = torch.softmax(scores.masked_fill(~valid, float("-inf")), -1)
    ref = torch.zeros(b, H, T, dtype=torch.float64)
    for s in range(T):
        e = torch.zeros(T, dtype=torch.float64)
        e[s] = 1.0
        A1 = torch.softmax((scores + delta[..., s : s + 1] * e).masked_fill(~valid, float("-inf")), -1)
        ref[..., s] = ((A1 - A) * grad).sum(-1).sum(-1)
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-12)
    assert float(ref[0, 0, 2].abs()) > 1.0  # the case the fix exists for is in the data


@pytest.mark.slow
def test_qk_fix_beats_plain_atp_when_attention_saturates():
    """With layer 1's queries scaled ×200 its heads attend almost one-hot (row maxima 0.84 on average):
    plain AtP then misses about a third of the effect of patching single queries; AtP* (exact softmax,
    linear after it) at least halves that error. Exact values: real patched runs, one per node."""
    hf = tiny_hf_model("llama")
    with torch.no_grad():
        hf.model.layers[1].self_attn.q_proj.weight.mul_(200.0)
    model = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama-saturated")
    metric = LogitDiff(A, W)
    labels = [f"L1.attn.q[H{h}]" for h in range(4)]
    plain = attribution_patch(model, CLEAN, CORRUPT, metric=metric, nodes=labels, positions="each")
    fixed = attribution_patch(model, CLEAN, CORRUPT, metric=metric, nodes=labels, positions="each", qk_fix=True)
    base, src = interp.stream.internal.as_batch(model, CORRUPT), interp.stream.internal.as_batch(model, CLEAN)
    hook = "blocks.1.attn.hook_q"
    a_src, _ = _plain(model, src, [hook])
    last = base.attention_mask.sum(1) - 1
    rows = torch.arange(2)
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (A, W))
    exact = torch.zeros_like(plain.per_prompt)
    for i in range(4):
        for t in range(base.tokens.shape[1]):

            def put(x, hook=None, i=i, t=t):
                x = x.clone()
                x[:, t, i] = a_src["blocks.1.attn.hook_q"][:, t, i]
                return x

            with torch.no_grad(), model.bridge.hooks(fwd_hooks=[(hook, put)]):
                out = model.bridge(base.tokens, attention_mask=base.attention_mask)
            exact[i, t] = out[rows, last, a] - out[rows, last, w]
    err_plain = (plain.per_prompt - exact).abs().sum()
    err_fixed = (fixed.per_prompt - exact).abs().sum()
    moved = (exact - plain.corrupt_per_prompt).abs().sum()
    assert err_plain > 0.25 * moved, (float(err_plain), float(moved))  # saturation does hurt plain AtP
    assert err_fixed < 0.5 * err_plain, (float(err_fixed), float(err_plain), float(moved))


def test_qk_fix_is_exact_for_the_last_layer_of_an_attention_only_model():
    """Without norms, the logits are linear in the last layer's patterns: linearising after the softmax
    is then no approximation, so AtP* of its q and k nodes equals exact activation patching (interp.patch,
    the engine's own forward) — while the trained toy's saturated attention leaves plain AtP far off."""
    toy = interp.load_model("toy-attn-only-2l")
    clean, corrupt = torch.tensor([[0, 5, 6, 7, 5, 6]]), torch.tensor([[0, 5, 9, 7, 5, 6]])
    metric = interp.Logit(7)
    labels = [f"L1.attn.q[H{h}]" for h in range(4)] + [f"L1.attn.k[H{h}]" for h in range(4)]
    exact = interp.patch(toy, clean, corrupt, metric=metric, nodes=labels, positions="each", progress=False)
    fixed = attribution_patch(toy, clean, corrupt, metric=metric, nodes=labels, positions="each", qk_fix=True)
    plain = attribution_patch(toy, clean, corrupt, metric=metric, nodes=labels, positions="each")
    mass = float(exact.effect.abs().sum())
    assert mass > 1.0
    torch.testing.assert_close(fixed.values, exact.values, rtol=1e-4, atol=1e-4)
    assert float((plain.effect - exact.effect).abs().sum()) > 0.5 * mass


def test_qk_fix_leaves_other_nodes_alone():
    model = tiny_model("llama")
    m = LogitDiff(A, W)
    for nodes in ("components", "resid"):
        a = attribution_patch(model, CLEAN, CORRUPT, metric=m, nodes=nodes, positions="each")
        b = attribution_patch(model, CLEAN, CORRUPT, metric=m, nodes=nodes, positions="each", qk_fix=True)
        assert_same_up_to_rounding(b.per_prompt, a.per_prompt, nodes)
    a = attribution_patch(model, CLEAN, CORRUPT, metric=m, nodes="head_inputs")
    b = attribution_patch(model, CLEAN, CORRUPT, metric=m, nodes="head_inputs", qk_fix=True)
    v = [i for i, l in enumerate(a.labels) if ".attn.v[" in l]
    assert_same_up_to_rounding(b.per_prompt[v], a.per_prompt[v])
    assert b.details["qk_fix"] is True


# ---------------------------------------------------------------------------------------------
# the model is left alone


def _state(model):
    return [
        (n, p.requires_grad, p.grad is None, len(p._backward_hooks or {}) if hasattr(p, "_backward_hooks") else 0)
        for n, p in model.bridge.named_parameters()
    ]


def test_no_hook_grad_or_flag_survives_a_call_or_an_interrupt(monkeypatch):
    model = tiny_model("llama", seed=3)
    interp.trace(model, "w1 w2")  # warm the bridge (transformer-lens wires its own hooks on the first pass)
    before_hooks, before = count_hooks(model.bridge), _state(model)
    r = attribution_patch(model, CLEAN, CORRUPT, metric=LogitDiff(A, W), nodes="head_inputs", qk_fix=True)
    assert count_hooks(model.bridge) == before_hooks and _state(model) == before
    assert all(p.grad is None for p in model.bridge.parameters())
    calls = []
    real_mlp = Engine.mlp

    def interrupt(self, l, h, **kw):  # a KeyboardInterrupt inside the gradient pass's last MLP
        calls.append(torch.is_grad_enabled())
        if torch.is_grad_enabled() and l == model.arch.n_layers - 1:
            raise KeyboardInterrupt
        return real_mlp(self, l, h, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(Engine, "mlp", interrupt)
        with pytest.raises(KeyboardInterrupt):
            attribution_patch(model, CLEAN, CORRUPT, metric=LogitDiff(A, W), nodes="components")
    assert calls == [False, False, True, True]  # the source pass's two MLPs, the gradient pass's
    assert count_hooks(model.bridge) == before_hooks and _state(model) == before
    again = attribution_patch(model, CLEAN, CORRUPT, metric=LogitDiff(A, W), nodes="head_inputs", qk_fix=True)
    assert torch.equal(again.per_prompt, r.per_prompt)


def test_frozen_parameters_stay_frozen_and_give_the_same_estimates():
    model = tiny_model("gpt2", seed=4)
    ref = attribution_patch(model, CLEAN, CORRUPT, metric=LogitDiff(A, W), nodes="components", positions="each")
    for p in model.bridge.parameters():
        p.requires_grad_(False)
    try:
        got = attribution_patch(model, CLEAN, CORRUPT, metric=LogitDiff(A, W), nodes="components", positions="each")
        assert not any(p.requires_grad for p in model.bridge.parameters())
        assert all(p.grad is None for p in model.bridge.parameters())
    finally:
        for p in model.bridge.parameters():
            p.requires_grad_(True)
    torch.testing.assert_close(got.per_prompt, ref.per_prompt, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# result and bad input


def test_result_contract_and_baselines():
    model = tiny_model("gpt2")
    r = attribution_patch(model, CLEAN, CORRUPT, metric=LogitDiff(A, W), nodes="heads")
    assert r.method == "attribution patching" and r.ablation == "corrupt" and r.positions == "all"
    assert r.labels == [f"L{l}.H{h}" for l in range(2) for h in range(4)]
    assert r.head_matrix().shape == (2, 4)
    # the baselines are the model's own metric on each run
    for inp, want in ((CLEAN, r.clean_per_prompt), (CORRUPT, r.corrupt_per_prompt)):
        b = interp.stream.internal.as_batch(model, inp)
        _, out = _plain(model, b, [])
        last = b.attention_mask.sum(1) - 1
        a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (A, W))
        torch.testing.assert_close(
            want, out[torch.arange(2), last, a] - out[torch.arange(2), last, w], rtol=1e-5, atol=1e-6
        )
    df = r.top(3)
    assert list(df["node"]) and df["effect"].abs().is_monotonic_decreasing
    assert float(r["L1.H2"]) == float(r.values[r.labels.index("L1.H2")])


@pytest.mark.parametrize(
    "kwargs,err,words",
    [
        (dict(nodes="neurons"), ArgumentError, "nodes='neurons'"),
        (dict(nodes=["L0.H9"]), LabelError, "head 9 does not exist"),
        (dict(nodes=["L5.mlp"]), LabelError, "layer 5 does not exist"),
        (dict(nodes=["L0.H1", "L0.H1"]), ArgumentError, "twice"),
        (dict(nodes=["unembed"]), LabelError, "nodes[0]"),
        (dict(nodes=["L0.attn.k[H3]"]), LabelError, "k head 3 does not exist"),
        (dict(positions="some"), ArgumentError, "positions"),
        (dict(direction="sideways"), ArgumentError, "direction"),
        (dict(qk_fix=1), ArgumentError, "qk_fix"),
        (dict(metric="logits"), ArgumentError, "metric"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_argument(kwargs, err, words):
    model = tiny_model("llama")
    args = dict(metric=LogitDiff(A, W))
    args.update(kwargs)
    with pytest.raises(err, match=re.escape(words)):
        attribution_patch(model, CLEAN, CORRUPT, **args)


def test_bad_pairs_encoders_and_inference_mode():
    model = tiny_model("llama")
    with pytest.raises(ShapeError, match="corrupt prompt 1 has 4 tokens but clean prompt 1 has 3"):
        attribution_patch(model, ["w1 w2 w3", "w4 w5"], ["w1 w2 w3", "w4 w5 w6"], metric=LogitDiff(A, W))
    with pytest.raises(ShapeError, match="corrupt prompt 0"):
        attribution_patch(model, "w1 w2 w3", "w1 w2", metric=LogitDiff(A, W))
    with pytest.raises(ShapeError, match="corrupt has 1 prompts but clean has 2"):
        attribution_patch(model, CLEAN, CORRUPT[:1], metric=LogitDiff(A, W))
    with pytest.raises(UnsupportedOperationError, match="metric"):
        attribution_patch(tiny_model("bert"), CLEAN, CORRUPT, metric=LogitDiff(A, W))
    with torch.inference_mode(), pytest.raises(UnsupportedOperationError, match="inference_mode"):
        attribution_patch(model, CLEAN, CORRUPT, metric=LogitDiff(A, W))
    assert issubclass(UnsupportedOperationError, InterpError)


def test_a_model_made_under_inference_mode_takes_gradients_afterwards(tmp_path):
    """A model loaded, or rotated, inside ``torch.inference_mode()`` outlives the block: attribution patching on it
    afterwards (which saves its weights for backward) gives the values of the same model made outside it."""
    from tiny_models import tiny_hf_dir

    folder = tiny_hf_dir("llama", tmp_path / "llama")
    with torch.inference_mode():
        loaded_inside = interp.load_model(str(folder))
    loaded_outside = interp.load_model(str(folder))
    R = interp.circuits.random_rotation(loaded_outside.arch.d_model)
    with torch.inference_mode():
        rotated_inside = interp.rotate_residual(loaded_outside, R)
    rotated_outside = interp.rotate_residual(loaded_outside, R)
    for inside, outside in ((loaded_inside, loaded_outside), (rotated_inside, rotated_outside)):
        got = attribution_patch(inside, CLEAN, CORRUPT, metric=LogitDiff(A, W)).values
        want = attribution_patch(outside, CLEAN, CORRUPT, metric=LogitDiff(A, W)).values
        assert torch.equal(got, want)
