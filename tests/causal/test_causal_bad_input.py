"""Bad input to patch / effects / path_patch: typed errors naming the argument; no hook survives any call."""

from __future__ import annotations

import pytest
import torch

from interp.causal import KL, Direction, Logit, LogitDiff, LogProb, Prob, effects, patch, path_patch
from interp.errors import ArgumentError, InterpError, LabelError, ShapeError, UnsupportedOperationError
from interp.stream.internal import count_hooks
from tiny_models import tiny_model

CLEAN = ["w1 w2 w3 w4", "w5 w6 w7"]
CORRUPT = ["w1 w9 w3 w4", "w5 w10 w7"]
MET = LogitDiff("w12", "w13")


@pytest.fixture(scope="module")
def m():
    model = tiny_model("llama")
    model.bridge(model.to_tokens("w1 w2"))  # transformer-lens wires its own hooks on the first pass
    return model


@pytest.mark.parametrize(
    "kwargs,err,match",
    [
        (dict(corrupt=["w1 w9 w3", "w5 w10 w7"]), ShapeError, "corrupt prompt 0 has 4 tokens but clean prompt 0 has 5"),
        (dict(corrupt=["w1 w9 w3 w4"]), ShapeError, "corrupt has 1 prompts"),
        (dict(nodes=["L0.H9"]), LabelError, r"nodes\[0\]='L0.H9'"),
        (dict(nodes=["L7.mlp"]), LabelError, r"nodes\[0\]='L7.mlp'"),
        (dict(nodes=["bogus"]), LabelError, r"nodes\[0\]='bogus'"),
        (dict(nodes="neurons"), ArgumentError, "nodes='neurons'"),
        (dict(nodes=[]), ArgumentError, "nodes=\\[\\]"),
        (dict(nodes=["pos_embed"]), LabelError, "no such embedding"),
        (dict(positions="some"), ArgumentError, "positions='some'"),
        (dict(direction="up"), ArgumentError, "direction='up'"),
        (dict(direction="noise", ablation="mean"), ArgumentError, "reference"),
        (dict(direction="noise", ablation="zero", reference=["w1 w2"]), ArgumentError, "reference is only used"),
        (dict(ablation="zero"), ArgumentError, "applies to direction='noise'"),
        (dict(corrupt=None), ArgumentError, "corrupt=None"),
        (dict(batch_size=0), ArgumentError, "batch_size=0"),
        (dict(progress="yes"), ArgumentError, "progress='yes'"),
        (dict(metric=lambda logits: logits[:, :2]), ShapeError, "metric .* returned \\(2, 2\\)"),
        (dict(metric=lambda logits: logits[:, 0] * float("nan")), ArgumentError, "non-finite"),
        (dict(metric="logit diff"), ArgumentError, "metric='logit diff'"),
        (dict(metric=LogitDiff("w1 w2", "w3")), ArgumentError, "answer='w1 w2' must be a single token"),
        (dict(metric=LogitDiff(["w1", "w2", "w3"], "w4")), ArgumentError, "answer has 3 entries"),
        (dict(clean=torch.tensor([[1, 500]])), ArgumentError, "token id 500"),
    ],
)
def test_typed_errors_name_the_argument(m, kwargs, err, match):
    args = dict(clean=CLEAN, corrupt=CORRUPT, metric=MET, progress=False)
    args.update(kwargs)
    before = count_hooks(m.bridge)
    with pytest.raises(err, match=match) as info:
        patch(m, args.pop("clean"), args.pop("corrupt"), **args)
    assert isinstance(info.value, InterpError)
    assert count_hooks(m.bridge) == before


def test_encoder_with_a_logit_metric():
    b = tiny_model("bert")
    for met in (MET, Logit("w1"), LogProb("w1"), Prob("w1"), KL()):
        with pytest.raises(UnsupportedOperationError, match="metric=.*has no logits"):
            patch(b, CLEAN, CORRUPT, metric=met, progress=False)
    with pytest.raises(UnsupportedOperationError, match="metric="):
        effects(b, CLEAN, CORRUPT, metric=MET, progress=False)
    with pytest.raises(ShapeError, match="direction has shape"):
        patch(b, CLEAN, CORRUPT, metric=Direction(torch.ones(5)), progress=False)


def test_effects_and_path_patch_bad_nodes(m):
    with pytest.raises(ArgumentError, match="effects are defined for writes"):
        effects(m, CLEAN, CORRUPT, metric=MET, nodes="resid", progress=False)
    with pytest.raises(ArgumentError, match="effects are defined for writes"):
        effects(m, CLEAN, CORRUPT, metric=MET, nodes=["L0.attn.q[H1]"], progress=False)
    with pytest.raises(LabelError, match="sender="):
        path_patch(m, CLEAN, CORRUPT, metric=MET, sender="L0.attn.q[H1]", progress=False)
    with pytest.raises(ArgumentError, match="receivers='mlps' with via='q'"):
        path_patch(m, CLEAN, CORRUPT, metric=MET, sender="L0.H1", receivers="mlps", via="q", progress=False)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_no_hook_survives_an_exception_inside_the_sweep(m, exc):
    before = count_hooks(m.bridge)
    calls = []

    def metric(logits):
        calls.append(1)
        if len(calls) > 2:  # the baselines pass, the sweep raises
            raise exc("stop")
        return logits[:, 3]

    with pytest.raises(exc):
        patch(m, CLEAN, CORRUPT, metric=metric, progress=False)
    with pytest.raises(exc):
        calls.clear()
        effects(m, CLEAN, CORRUPT, metric=metric, progress=False)
    assert count_hooks(m.bridge) == before
    # and the model still runs as before
    r = patch(m, CLEAN, CORRUPT, metric=MET, nodes=["L0.H1"], progress=False)
    assert r.values.shape == (1,)
    assert count_hooks(m.bridge) == before
