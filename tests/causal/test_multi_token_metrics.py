"""Metrics that read several positions: a multi-token continuation, teacher-forced, in every analysis.

``LogProb(" w12 w13 w14", multi_token=True)`` (also ``Logit``, ``LogitDiff``) appends the continuation's first
n − 1 tokens to every clean, corrupt and reference prompt and reads Σ_i of its tokens' log-probs (logits) at
positions T − 1 … T + n − 2. Checked against Hugging Face's own teacher-forced value (the HF model run on
prompt + continuation ids, log_softmax summed at those positions) on the clean and corrupt runs of
``patch``, ``effects``, ``path_patch``, ``attribution_patch``, ``edge_attribution``, ``evaluate_circuit`` and
``faithfulness_curve``; full patching endpoints hold. Without ``multi_token=True`` a multi-token answer is an
ArgumentError naming the fix before anything runs; a callable can ask for every position (``pos="all"``) and
one written for the other shape gets a ShapeError saying which shape it receives.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from interp.causal import CustomMetric, Logit, LogitDiff, LogProb, attribution_patch, effects, patch, path_patch
from interp.edges import edge_attribution, evaluate_circuit, faithfulness_curve
from interp.errors import ArgumentError, CompletenessWarning, ShapeError
from interp.stream.internal import as_batch
from tiny_models import tiny_hf_model, tiny_model

CLEAN = ["w1 w2 w3 w4 w5", "w6 w7 w8 w9 w10"]
CORRUPT = ["w1 w31 w3 w4 w5", "w6 w32 w8 w9 w10"]
ANS, WRONG = " w12 w13 w14", " w15 w16 w17"
REFERENCE = ["w40 w41 w42 w43 w44", "w50 w51 w52 w53 w54", "w60 w61 w62 w63 w64"]
TOL = 1e-6  # float64 tiny model; the engine agrees with HF to ~1e-8 here (a wrong position is O(1))


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", dtype=torch.float64)


@pytest.fixture(scope="module")
def hf():
    return tiny_hf_model("llama", dtype=torch.float64).eval()  # a separate, untouched copy (same seed)


def _ids(model, text: str) -> list[int]:
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


def hf_value(model, hf, prompts, kind: str = "logprob") -> torch.Tensor:
    """Hugging Face's teacher-forced value per prompt: Σ_i s(logits at T−1+i)[c_i] on prompt + continuation."""
    a, w = _ids(model, ANS), _ids(model, WRONG)
    out = []
    for prompt in prompts:
        p = as_batch(model, prompt).tokens[0].tolist()
        T = len(p)
        with torch.no_grad():
            logits = hf(torch.tensor([p + a[:-1]])).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        if kind == "logprob":
            v = sum(lp[T - 1 + i, t] for i, t in enumerate(a))
        elif kind == "logit":
            v = sum(logits[T - 1 + i, t] for i, t in enumerate(a))
        else:  # logit diff, teacher-forced on the answer
            v = sum(logits[T - 1 + i, a[i]] - logits[T - 1 + i, w[i]] for i in range(len(a)))
        out.append(float(v))
    return torch.tensor(out, dtype=torch.float64)


METRICS = {
    "logprob": LogProb(ANS, multi_token=True),
    "logit": Logit(ANS, multi_token=True),
    "logitdiff": LogitDiff(ANS, WRONG, multi_token=True),
}


def _close(a, b, tol=TOL):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), b, rtol=0, atol=tol)


# ---- the seven analyses -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", METRICS)
def test_patch_reads_the_teacher_forced_value_and_its_endpoints_hold(llama, hf, kind):
    met = METRICS[kind]
    c, k = hf_value(llama, hf, CLEAN, kind), hf_value(llama, hf, CORRUPT, kind)
    assert (c - k).abs().max() > 1e-3  # the corruption matters
    r = patch(llama, CLEAN, CORRUPT, metric=met, nodes="heads", progress=False)
    _close(r.clean_per_prompt, c)
    _close(r.corrupt_per_prompt, k)
    # full patching: the whole stream at the first layer's input is the other run
    resid = ["blocks.0.hook_resid_pre"]
    d = patch(llama, CLEAN, CORRUPT, metric=met, nodes=resid, progress=False)
    _close(d.per_prompt[0], c)
    n = patch(llama, CLEAN, CORRUPT, metric=met, nodes=resid, direction="noise", progress=False)
    _close(n.per_prompt[0], k)
    each = patch(llama, CLEAN, CORRUPT, metric=met, nodes=resid, positions="each", progress=False)
    assert each.values.shape[1] == as_batch(llama, CLEAN).tokens.shape[1] + 2  # the appended positions too
    # patching the appended positions changes nothing (the continuation is the same in both runs)
    _close(each.per_prompt[0, -2:], k.expand(2, -1))


def test_patch_with_a_reference_extends_it_too(llama, hf):
    met = METRICS["logprob"]
    # a node patched with its own value (the reference is the clean prompt itself) changes nothing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one distinct reference prompt: an AblationWarning, as it should
        own = patch(
            llama,
            CLEAN[:1],
            metric=met,
            nodes="components",
            direction="noise",
            ablation="resample",
            reference=CLEAN[:1],
            progress=False,
        )
    _close(own.per_prompt, torch.full_like(own.per_prompt, own.clean), 1e-10)
    m = patch(
        llama,
        CLEAN,
        metric=met,
        nodes=["blocks.0.hook_resid_pre"],
        direction="noise",
        ablation="resample",
        reference=REFERENCE,
        progress=False,
    )
    # the resampled stream is a reference prompt with the continuation appended: HF's value on that prompt
    ref_vals = hf_value(llama, hf, REFERENCE)
    for v in m.per_prompt[0]:
        assert float((ref_vals - v).abs().min()) < TOL


@pytest.mark.parametrize("kind", ["logprob", "logitdiff"])
def test_effects(llama, hf, kind):
    met = METRICS[kind]
    e = effects(llama, CLEAN, CORRUPT, metric=met, nodes="components", progress=False)
    _close(e.clean_per_prompt, hf_value(llama, hf, CLEAN, kind))
    noised = patch(llama, CLEAN, CORRUPT, metric=met, nodes="components", direction="noise", progress=False)
    _close(e.total, noised.values - noised.clean, 1e-9)
    # a head's direct effect on a logit difference is its frozen-scale readout: finite, and total = direct + indirect
    _close(e.total, e.direct + e.indirect, 1e-12)


def test_path_patch(llama, hf):
    met = METRICS["logprob"]
    r = path_patch(llama, CLEAN, CORRUPT, metric=met, sender="L0.H1", progress=False)
    _close(r.clean_per_prompt, hf_value(llama, hf, CLEAN))
    _close(r.corrupt_per_prompt, hf_value(llama, hf, CORRUPT))
    assert bool(torch.isfinite(r.values).all())


@pytest.mark.parametrize("kind", ["logprob", "logitdiff"])
def test_attribution_patch(llama, hf, kind):
    met = METRICS[kind]
    r = attribution_patch(llama, CLEAN, CORRUPT, metric=met, nodes=["blocks.0.hook_resid_pre", "L1.H0"])
    _close(r.clean_per_prompt, hf_value(llama, hf, CLEAN, kind))
    _close(r.corrupt_per_prompt, hf_value(llama, hf, CORRUPT, kind))
    # the estimate at the stream's first point is first order in the whole input change: the right sign
    exact = patch(llama, CLEAN, CORRUPT, metric=met, nodes=["blocks.0.hook_resid_pre", "L1.H0"], progress=False)
    assert bool(torch.isfinite(r.values).all()) and r.values.shape == exact.values.shape


def test_edge_attribution_evaluate_circuit_and_faithfulness_curve(llama, hf):
    met = METRICS["logprob"]
    c, k = hf_value(llama, hf, CLEAN), hf_value(llama, hf, CORRUPT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompletenessWarning)
        s = edge_attribution(llama, CLEAN, CORRUPT, metric=met, ig_steps=20, progress=False)
    _close(s.clean_per_prompt, c)
    _close(s.corrupt_per_prompt, k)
    assert abs(s.completeness_error) < 0.1 * abs(s.target)  # EAP-IG on the summed log-prob: near complete
    every = evaluate_circuit(llama, CLEAN, CORRUPT, list(s.edges), metric=met)
    _close(every.per_prompt[0], c)  # all edges: the clean run (HF rounds its softmax through float32: TOL)
    none = evaluate_circuit(llama, CLEAN, CORRUPT, [], metric=met)
    _close(none.per_prompt[0], k)  # no edges: the corrupt run
    curve = faithfulness_curve(
        llama, CLEAN, CORRUPT, s, metric=met, sizes=(0.1, 1.0), ablations=("corrupt",), progress=False
    )
    assert float(curve.empty[0]) == pytest.approx(float(k.mean()), abs=TOL)
    assert float(curve.faithfulness[0, -1]) == pytest.approx(1.0, abs=1e-6)


# ---- construction, binding and shapes -----------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: LogProb(ANS), lambda: Logit(ANS), lambda: LogitDiff(ANS, " w3")])
def test_a_multi_token_answer_without_opt_in_is_an_argument_error_before_any_run(llama, make, monkeypatch):
    from interp.engine import _forward as _engine

    monkeypatch.setattr(_engine.Engine, "run", lambda *a, **k: pytest.fail("ran the model"))
    with pytest.raises(ArgumentError, match=r"tokenises to 3 tokens.*multi_token=True"):
        patch(llama, CLEAN, CORRUPT, metric=make(), progress=False)


def test_bad_multi_token_arguments(llama):
    with pytest.raises(ArgumentError, match="same number of tokens"):
        patch(llama, CLEAN, CORRUPT, metric=LogitDiff(ANS, " w15 w16", multi_token=True), progress=False)
    with pytest.raises(ArgumentError, match="pos=-1"):
        patch(llama, CLEAN, CORRUPT, metric=LogProb(ANS, pos=-2, multi_token=True), progress=False)
    with pytest.raises(ArgumentError, match="multi_token"):
        LogProb(ANS, multi_token="yes")  # type: ignore[arg-type]


def test_a_callable_can_read_every_position(llama, hf):
    a = _ids(llama, ANS)[0]
    T = as_batch(llama, CLEAN).tokens.shape[1]
    every = CustomMetric(lambda out: torch.log_softmax(out, -1)[:, T - 1, a], pos="all")
    last = LogProb(_ids(llama, ANS)[0])
    r1 = patch(llama, CLEAN, CORRUPT, metric=every, nodes="mlps", progress=False)
    r2 = patch(llama, CLEAN, CORRUPT, metric=last, nodes="mlps", progress=False)
    _close(r1.per_prompt, r2.per_prompt.double(), 1e-12)


def test_a_callable_given_the_other_shape_says_which_it_receives(llama):
    with pytest.raises(ShapeError, match=r"\[batch, d_vocab\].*pos='all'"):
        patch(llama, CLEAN, CORRUPT, metric=lambda out: out[:, -1, 12], progress=False)
    with pytest.raises(ShapeError, match=r"every position.*\[batch, pos, d_vocab\]"):
        patch(llama, CLEAN, CORRUPT, metric=CustomMetric(lambda out: out[:, 12], pos="all"), progress=False)
