"""Degenerate metrics are said, not silently NaN: LogitDiff with answer == wrong is refused; clean ≈ corrupt (the
same prompt twice) gives an interp.MetricGapWarning with the two metric values wherever a result is normalised by
M(clean) − M(corrupt) (patch, path_patch, attribution_patch, edge_patch, edge_attribution) or by M(all) − M(∅)
(faithfulness). The gradient methods (attribution_patch) work after torch.set_grad_enabled(False)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import interp
from interp.causal import LogitDiff, attribution_patch, patch, path_patch
from interp.edges import edge_attribution, edge_patch, evaluate_circuit, faithfulness_curve
from interp.errors import ArgumentError
from tiny_models import tiny_model

CLEAN = ["w1 w2 w3 w4", "w5 w6 w7 w8"]
CORRUPT = ["w1 w9 w3 w4", "w5 w10 w7 w8"]
MET = LogitDiff("w12", "w13")


@pytest.fixture(scope="module")
def m():
    return tiny_model("llama")


def _logits(model, prompts):
    """The last-token logits of each prompt, from the plain HF model under the bridge (an independent forward)."""
    out = []
    for p in prompts:
        ids = model.to_tokens(p)
        with torch.no_grad():
            out.append(model.bridge(ids)[0, -1].double())
    return torch.stack(out)


def test_logit_diff_of_a_token_with_itself_is_refused(m):
    with pytest.raises(
        ArgumentError,
        match=r"LogitDiff\(answer='w12', wrong='w12'\): the answer and the wrong token "
        r"are the same",
    ):
        LogitDiff("w12", "w12")
    # the same token reached two ways (text and id), or one prompt's pair of a per-prompt list: refused when bound
    tid = m.tokenizer.convert_tokens_to_ids("w12")
    with pytest.raises(ArgumentError, match=r"the same token \('w12'\)"):
        patch(m, CLEAN, CORRUPT, metric=LogitDiff("w12", tid), nodes=["L0.H0"], progress=False)
    with pytest.raises(ArgumentError, match=r"the same token for prompt 1 \('w13'\)"):
        patch(m, CLEAN, CORRUPT, metric=LogitDiff(["w12", "w13"], ["w14", "w13"]), nodes=["L0.H0"], progress=False)


def _gap_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, interp.MetricGapWarning)]


@pytest.mark.parametrize("analysis", ["patch", "path_patch", "attribution_patch", "edge_patch"])
def test_clean_equal_to_corrupt_warns_with_the_two_values(m, analysis):
    """patch(g, P, P, ...) gave normalized all NaN without a word: now a MetricGapWarning with M(clean) and
    M(corrupt) (both the independent logit difference of P) saying normalized is undefined."""
    want = _logits(m, CLEAN)
    a, w = (m.tokenizer.convert_tokens_to_ids(t) for t in ("w12", "w13"))
    value = float((want[:, a] - want[:, w]).mean())
    run = {
        "patch": lambda: patch(m, CLEAN, CLEAN, metric=MET, nodes="heads", progress=False),
        "path_patch": lambda: path_patch(m, CLEAN, CLEAN, metric=MET, sender="L0.H0", receivers="heads", via="q"),
        "attribution_patch": lambda: attribution_patch(m, CLEAN, CLEAN, metric=MET, nodes="heads"),
        # built its PatchResult by hand, without the warning (now through causal's patch_result)
        "edge_patch": lambda: edge_patch(m, CLEAN, CLEAN, ["L0.H0→L1.attn.q[H0]"], metric=MET, progress=False),
    }[analysis]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run()
    msgs = _gap_warnings(caught)
    assert len(msgs) == 1, [str(c.message) for c in caught]
    assert msgs[0].startswith(f"{analysis}: M(clean) = ") and "normalized values" in msgs[0] and "undefined" in msgs[0]
    assert f"{res.clean:.6g}" in msgs[0] and f"{res.corrupt:.6g}" in msgs[0]
    assert res.clean == pytest.approx(value, abs=1e-4) and res.corrupt == pytest.approx(value, abs=1e-4)
    assert bool(res.normalized.isnan().all())
    # a real corruption: no warning, normalized finite
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = patch(m, CLEAN, CORRUPT, metric=MET, nodes="heads", progress=False)
    assert not _gap_warnings(caught) and bool(ok.normalized.isfinite().all())


def test_edges_clean_equal_to_corrupt_warn(m):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = edge_attribution(m, CLEAN, CLEAN, metric=MET, method="eap", progress=False)
    msgs = _gap_warnings(caught)
    assert len(msgs) == 1 and msgs[0].startswith("edge_attribution: M(clean) = ")
    assert not [c for c in caught if issubclass(c.category, interp.CompletenessWarning)]
    # nothing differs: every score is 0 up to float32 rounding (the clean and corrupt passes batch the same prompts
    # differently, so M(clean) − M(corrupt) is ~1e-8, not exactly 0, on some CPUs)
    assert float(s.scores.abs().max()) <= 1e-6
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = evaluate_circuit(m, CLEAN, CLEAN, [], metric=MET)
        curve = faithfulness_curve(
            m, CLEAN, CLEAN, s, metric=MET, ablations=("corrupt",), sizes=(0.5, 1.0), progress=False
        )
    msgs = _gap_warnings(caught)
    assert any(x.startswith("evaluate_circuit(ablation='corrupt'): M(all edges) = ") for x in msgs), msgs
    assert any(x.startswith("faithfulness_curve, ablation 'corrupt': M(all edges) = ") for x in msgs), msgs
    assert all("faithfulness values" in x and "undefined" in x for x in msgs)
    assert math.isnan(ev.faithfulness) and bool(curve.faithfulness.isnan().all())


@pytest.mark.parametrize("qk_fix", [False, True])
def test_attribution_patch_under_no_grad(m, qk_fix):
    """With gradients globally off (a notebook's torch.set_grad_enabled(False)) attribution_patch gives the same
    numbers as with them on, and leaves them off."""
    nodes = "head_inputs" if qk_fix else "components"
    was = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        got = attribution_patch(m, CLEAN, CORRUPT, metric=MET, nodes=nodes, qk_fix=qk_fix)
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(was)
    want = attribution_patch(m, CLEAN, CORRUPT, metric=MET, nodes=nodes, qk_fix=qk_fix)
    assert float((want.values - want.baseline).abs().max()) > 0
    torch.testing.assert_close(got.values, want.values, rtol=0, atol=0)
