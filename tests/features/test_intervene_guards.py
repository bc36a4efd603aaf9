"""Interventions and graphs that never mislead (issue 36 §2 items 1–4 and 9, §3's messages), each checked against a
computation that does not use the code:

* a logit difference of a token with itself is refused — by id, so ``"w3"`` and ``" w3"`` (one id in the tiny
  vocabulary) and the id 7 are caught too — in ``attribution_graph``, ``intervene`` and ``LogitDiff`` alike;
* a feature's position is always said: ``(layer, feature)`` is refused as ``"L0.F1"`` is, ``(layer, feature, None)``
  is every position (= ``"L0.F1@*"``); a label with a negative position says to pass it as an argument;
* two interventions on one feature at one position (or one of them at every position) are refused, naming both, in
  ``intervene`` and ``generate``;
* ablating or scaling a feature whose activation is 0 where it acts (the activation computed by hand from the HF
  model's MLP input) warns ``InactiveFeatureWarning`` and changes nothing; an active one or a clamp does not warn;
* every result carries the live model's effect beside its regime's: ``live_logits_after`` equals a float64 Hugging Face
  forward whose layer-0 MLP output gets the ablated write by a hook, to 1e-10, in every regime; the regimes warn
  (``RegimeWarning``) exactly when their change is off the live one by more than ``LIVE_AGREEMENT`` of it;
* messages: a steering vector given to ``intervene`` is described by its shape and norm, never its values; a 0-d tensor
  value is a number.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import interp.features._intervene as iv
from interp import LogitDiff
from interp.engine import model_from_hf
from interp.errors import ArgumentError
from interp.features import (
    LIVE_AGREEMENT,
    InactiveFeatureWarning,
    Intervention,
    RegimeWarning,
    Steer,
    Transcoder,
    attribution_graph,
    generate,
    intervene,
)
from tiny_models import hooked_forward, tiny_hf_model, tiny_tokenizer
from tiny_transcoders import random_transcoders

PROMPT = "w1 w2 w3 w4 w5 w6"
F64 = torch.float64
W3 = 7  # "w3" in the tiny vocabulary (<pad> <bos> <eos> <unk> w0 …)


@pytest.fixture(scope="module")
def llama():
    """A float64 two-layer Llama (the HF module the bridge wraps: its forward with hooks is the reference), interp's
    model of it, and random transcoders whose layer-0 feature 0 can never fire (b_enc = −1e3)."""
    hf = tiny_hf_model("llama", dtype=F64)
    m = model_from_hf(hf, tiny_tokenizer(), name="tiny-llama", dtype=F64)
    tcs = [t.to(dtype=F64) for t in random_transcoders(m, 24, seed=1)]
    b = tcs[0].b_enc.clone()
    b[0] = -1e3
    tcs[0] = Transcoder(tcs[0].W_enc, b, tcs[0].W_dec, tcs[0].b_dec)
    return hf, m, tcs


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimeWarning)
        return fn(*args, **kw)


def _mlp_input(hf, ids, layer):
    """The HF model's MLP input at ``layer`` [n, d] (its post-attention norm's output), read by a hook."""
    seen = {}
    mod = hf.model.layers[layer].post_attention_layernorm
    h = mod.register_forward_hook(lambda mod, a, o: seen.__setitem__("h", o[0].detach()))
    hooked_forward(hf, [h], ids)
    return seen["h"]


# -- 1. target == wrong ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("wrong", ["w3", " w3", W3])
def test_target_equal_to_wrong_is_refused(llama, wrong):
    """The graph had metric 0, replacement NaN, completeness 1.000 and no word; intervene returned 0.0."""
    _, m, tcs = llama
    with pytest.raises(ArgumentError, match=r"attribution_graph\(target='w3'.*same token \('w3'\).*wrong=None"):
        attribution_graph(m, PROMPT, tcs, target="w3", wrong=wrong)
    with pytest.raises(ArgumentError, match=r"intervene\(target='w3'.*same token \('w3'\)"):
        intervene(m, PROMPT, tcs, "L0.F1@2", target="w3", wrong=wrong)
    if wrong != "w3":  # the same text is refused as the metric is made, before any model
        with pytest.raises(ArgumentError, match=r"LogitDiff\(answer='w3'.*same token \('w3'\).*interp.Logit"):
            LogitDiff("w3", wrong).describe(m)


# -- 2. a feature's position always said ----------------------------------------------------------------------------


def test_a_feature_without_position_is_refused(llama):
    """``(layer, feature)`` silently meant every position while ``"L0.F1"`` was refused."""
    _, m, tcs = llama
    n = m.to_tokens(PROMPT).shape[1]
    for make in (Intervention.ablate, lambda f: Intervention.scale(f, 2.0), lambda f: Intervention.clamp(f, 1.0)):
        with pytest.raises(ArgumentError, match=r"\(0, 1\) has no position.*\(0, 1, None\).*'L0.F1@\*'"):
            make((0, 1))
    assert Intervention.ablate((0, 1, None)) == Intervention.ablate("L0.F1@*") == Intervention(0, 1, None)
    every = _quiet(intervene, m, PROMPT, tcs, Intervention.ablate((0, 1, None)), target="w3")
    assert every.interventions == ["L0.F1@* = 0"]
    with pytest.raises(ArgumentError, match=r"negative position.*pass|negative position.*argument"):
        intervene(m, PROMPT, tcs, "L0.F1@-1", target="w3")
    with pytest.raises(ArgumentError, match=r"Intervention.ablate\(\(0, 1, -1\)\)"):
        Intervention.ablate("L0.F1@-1")
    last = _quiet(intervene, m, PROMPT, tcs, Intervention.ablate((0, 1, -1)), target="w3")
    assert last.interventions == [f"L0.F1@{n - 1} = 0"]


# -- 3. two interventions on one feature at one position ------------------------------------------------------------


def test_overlapping_interventions_are_refused(llama):
    """The last one won silently."""
    _, m, tcs = llama
    n = m.to_tokens(PROMPT).shape[1]
    for a, b in (
        ("L0.F1@2", Intervention.clamp("L0.F1@2", 3.0)),
        ("L0.F1@*", Intervention.scale("L0.F1@3", 2.0)),
        ((0, n - 1, 1, 1.0), Intervention.ablate((0, 1, -1))),  # −1 is the last position
    ):
        with pytest.raises(ArgumentError, match=r"interventions\[0\] \(L0.F1@.*\) and interventions\[1\] \(L0.F1@"):
            intervene(m, PROMPT, tcs, [a, b], target="w3")
        with pytest.raises(ArgumentError, match=r"interventions\[0\] .* and interventions\[1\] .*feature 1 of layer 0"):
            generate(m, PROMPT, tcs, [a, b], max_new_tokens=1)
    # other features, other layers or other positions are not an overlap
    r = _quiet(intervene, m, PROMPT, tcs, ["L0.F1@2", "L0.F1@3", "L1.F1@2", "L0.F2@2"], target="w3")
    assert len(r.interventions) == 4


# -- 4. a feature that is not active where it acts ------------------------------------------------------------------


def test_inactive_feature_warns(llama):
    """An ablation or scaling of a feature whose activation is 0 there returned a 0.0 change without a word."""
    hf, m, tcs = llama
    ids = m.to_tokens(PROMPT)
    t = tcs[0]
    f = torch.relu(_mlp_input(hf, ids, 0) @ t.W_enc.T + t.b_enc)  # layer 0's activations by hand [n, F]
    assert bool((f[:, 0] == 0).all())  # feature 0 is dead (b_enc −1e3)
    p, off = next((p, i) for p in range(1, f.shape[0]) for i in range(1, f.shape[1]) if f[p, i] == 0)
    on = int(f[p].argmax())
    for item, where in (
        ("L0.F0@*", "at any position"),
        (f"L0.F{off}@{p}", f"at position {p}"),
        (Intervention.scale(f"L0.F{off}@{p}", 5.0), f"at position {p}"),
    ):
        for ff in (False, True):
            with pytest.warns(InactiveFeatureWarning, match=rf"not active {where} \(its activation there is 0\)"):
                r = _quiet(intervene, m, PROMPT, tcs, item, target="w3", freeze_features=ff)
            assert r.metric_change == 0.0 and torch.equal(r.logits_after, r.logits_before)
    for item in (f"L0.F{on}@{p}", Intervention.clamp(f"L0.F{off}@{p}", 2.0)):  # active, or turned on: no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error", InactiveFeatureWarning)
            r = _quiet(intervene, m, PROMPT, tcs, item, target="w3")
        assert r.metric_change != 0.0


# -- 9. the live effect beside the regime's -------------------------------------------------------------------------


def test_live_effect_equals_hooked_hf_forward(llama, monkeypatch):
    """Every regime's result carries the live model's logits after the intervention: the HF model's own forward with
    a hook adding the ablated feature's write −a·W_dec[f] to layer 0's MLP output at its position (float64). The
    regimes warn exactly when their change is off the live one by more than LIVE_AGREEMENT of it."""
    hf, m, tcs = llama
    ids = m.to_tokens(PROMPT)
    t = tcs[0]
    f = torch.relu(_mlp_input(hf, ids, 0) @ t.W_enc.T + t.b_enc)
    p = 3
    feat = int(f[p].argmax())
    a = float(f[p, feat])

    def hook(mod, args, out):
        out = out.clone()
        out[0, p] -= a * t.W_dec[feat]
        return out

    with torch.no_grad():
        z0 = hf(ids).logits[0, -1]
    h = hf.model.layers[0].mlp.register_forward_hook(hook)
    z1 = hooked_forward(hf, [h], ids).logits[0, -1]
    want = float((z1[W3] - z1[W3 + 1]) - (z0[W3] - z0[W3 + 1]))
    assert abs(want) > 1e-4  # not vacuous
    seen = {}
    for (ff, fa), (name, _) in iv.REGIMES.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = intervene(
                m, PROMPT, tcs, f"L0.F{feat}@{p}", target="w3", wrong="w4", freeze_features=ff, frozen_attention=fa
            )
        err = float((r.live_logits_after - z1).abs().max())
        print(
            f"{name}: regime change {r.metric_change:+.6g}, live {r.live_metric_change:+.6g} (HF {want:+.6g}), "
            f"max |live logits − hooked HF| {err:.1e}"
        )
        assert err <= 1e-10
        assert r.live_metric_change == pytest.approx(want, abs=1e-10)
        gap = abs(r.metric_change - want)
        warned = [w for w in caught if issubclass(w.category, RegimeWarning)]
        assert bool(warned) == (name != "live" and gap > LIVE_AGREEMENT * abs(want)), (name, gap, want)
        if warned:
            assert f"{r.metric_change:+.4g} in the {name!r} regime but by {want:+.4g} in the live model" in str(
                warned[0].message
            )
        seen[name] = r
        df = r.to_dataframe()
        assert df.loc[df["id"] == W3, "live_change"].item() == pytest.approx(float(z1[W3] - z0[W3]), abs=1e-10)
    assert torch.equal(seen["live"].live_logits_after, seen["live"].logits_after)
    assert any(abs(r.metric_change - want) > LIVE_AGREEMENT * abs(want) for r in seen.values())  # one did warn
    assert "live" in repr(seen["frozen attention"])
    fig = seen["frozen attention"].plot()  # the live change beside the regime's, token by token
    assert [t.name for t in fig.data] == ["frozen attention", "live"] and len(seen["live"].plot().data) == 1
    df = seen["frozen attention"].to_dataframe().sort_values("change", key=abs, ascending=False)
    assert torch.allclose(torch.tensor(list(fig.data[1].y), dtype=F64), (z1 - z0)[df["id"].tolist()], atol=1e-10)
    # with the agreement made loose enough, the same runs do not warn
    monkeypatch.setattr(iv, "LIVE_AGREEMENT", 1e9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegimeWarning)
        for ff, fa in iv.REGIMES:
            intervene(
                m, PROMPT, tcs, f"L0.F{feat}@{p}", target="w3", wrong="w4", freeze_features=ff, frozen_attention=fa
            )


def test_frozen_generation_carries_the_live_first_step(llama):
    """generate(..., frozen_attention=True): its first step is the frozen prompt pass; the result carries the live
    model's first logits beside it (= the hooked HF forward, float64), and warns by the same rule on the change of
    the baseline's first token's logit."""
    hf, m, tcs = llama
    ids = m.to_tokens(PROMPT)
    t = tcs[0]
    f = torch.relu(_mlp_input(hf, ids, 0) @ t.W_enc.T + t.b_enc)
    p = 3
    feat = int(f[p].argmax())

    def hook(mod, args, out):
        out = out.clone()
        out[0, p] -= float(f[p, feat]) * t.W_dec[feat]
        return out

    h = hf.model.layers[0].mlp.register_forward_hook(hook)
    z1 = hooked_forward(hf, [h], ids).logits[0, -1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = generate(m, PROMPT, tcs, f"L0.F{feat}@{p}", max_new_tokens=2, frozen_attention=True)
    assert float((r.live_first_logits[0] - z1).abs().max()) <= 1e-10
    b = int(r.baseline_tokens[0, 0])
    base = float(r.baseline_logits[0, 0, b])
    change, live = float(r.logits[0, 0, b]) - base, float(z1[b]) - base
    warned = [w for w in caught if issubclass(w.category, RegimeWarning)]
    assert bool(warned) == (abs(change - live) > LIVE_AGREEMENT * abs(live)), (change, live)
    assert generate(m, PROMPT, tcs, f"L0.F{feat}@{p}", max_new_tokens=1).live_first_logits is None  # live already


def test_saved_result_keeps_the_live_effect(llama, tmp_path):
    _, m, tcs = llama
    r = _quiet(intervene, m, PROMPT, tcs, Intervention.clamp("L0.F2@3", 2.0), target="w3")
    back = type(r).load(r.save(tmp_path / "r.safetensors"))
    assert torch.equal(back.live_logits_after, r.live_logits_after)
    assert back.live_metric_change == r.live_metric_change


# -- §3 messages ----------------------------------------------------------------------------------------------------


def test_messages(llama):
    """A Steer given to intervene dumped its whole vector into the message; clamp(label, torch.tensor(3.)) said
    "must be a finite number"."""
    _, m, tcs = llama
    d = m.arch.d_model
    v = torch.arange(d, dtype=F64) * 1.2345
    for bad in (Steer(0, v), [Steer(0, v)]):
        with pytest.raises(ArgumentError) as e:
            intervene(m, PROMPT, tcs, bad, target="w3")
        msg = str(e.value)
        print(msg)
        assert f"shape [{d}]" in msg and "norm" in msg and "1.2345" not in msg and "2.469" not in msg
        assert len(msg) < 400 and "steering vectors (Steer) act in interp.features.generate" in msg
    by_tensor = _quiet(intervene, m, PROMPT, tcs, Intervention.clamp("L0.F2@3", torch.tensor(3.0)), target="w3")
    by_float = _quiet(intervene, m, PROMPT, tcs, Intervention.clamp("L0.F2@3", 3.0), target="w3")
    assert by_tensor.metric_change == by_float.metric_change and by_tensor.interventions == ["L0.F2@3 = 3"]
    with pytest.raises(ArgumentError, match=r"value=<tensor of shape \[2\].* one finite real number"):
        intervene(m, PROMPT, tcs, Intervention.clamp("L0.F2@3", torch.tensor([1.0, 2.0])), target="w3")
    with pytest.raises(ArgumentError, match=r"value=nan must be a finite number"):
        intervene(m, PROMPT, tcs, Intervention.clamp("L0.F2@3", torch.tensor(float("nan"))), target="w3")


def test_an_overflowed_regime_run_warns_with_the_live_effect():
    """A regime run whose change is not finite (a large clamp at every position overflowed through the later layers,
    as on smollm2's cross-layer transcoder at layer 0: NaN where the live model moved by −0.13) warns, naming the live
    effect, instead of passing the NaN on without a word (NaN fails every comparison the agreement check makes)."""
    with pytest.warns(RegimeWarning, match="overflowed.*live_metric_change"):
        assert iv.check_live("intervene", "frozen attention", "the metric moved", float("nan"), -0.13, 1e-6)
    with pytest.warns(RegimeWarning, match="overflowed.*live_first_logits"):
        assert iv.check_live("generate", "frozen attention", "the first step moved", float("inf"), 2.0, 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not iv.check_live("intervene", "frozen attention", "the metric moved", -0.14, -0.13, 1e-6)
