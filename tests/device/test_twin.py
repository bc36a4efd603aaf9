"""Each public analysis on each tiny family, on the suite's device (``pytest --device cuda``), against the same call
on a CPU copy of the model: equal values (compared on the CPU), and every tensor of the result on the model's device.
On the CPU the "device" model is a second CPU copy, so the suite stays green without a GPU."""

from __future__ import annotations

import pytest
import torch

import interp
import tiny_models
from device.walk import tensors
from tiny_models import FAMILIES, tiny_model

CLEAN, CORRUPT = ["w1 w2 w3 w4 w1 w2", "w5 w6 w7 w8 w5 w6"], ["w1 w2 w3 w4 w13 w14", "w5 w6 w7 w8 w15 w16"]
METRIC = interp.LogitDiff(["w3", "w7"], ["w4", "w8"])

CALLS = {
    "decompose": lambda m: interp.trace(m, CLEAN).decompose("unembed" if m.arch.has_logits else "final"),
    "attribute_logits": lambda m: interp.attribute_logits(m, CLEAN, answer=["w3", "w7"], wrong=["w4", "w8"]),
    "attribute_logits_neuron": lambda m: interp.attribute_logits(m, CLEAN, answer=["w3", "w7"], unit="neuron"),
    "patch": lambda m: interp.patch(m, CLEAN, CORRUPT, metric=METRIC),
    "edge_attribution": lambda m: interp.edge_attribution(m, CLEAN, CORRUPT, metric=METRIC, progress=False),
    "logit_lens": lambda m: interp.logit_lens(m, CLEAN, answer=["w3", "w7"]),
    "composition_scores": lambda m: interp.composition_scores(m, "K"),
}


@pytest.fixture(scope="module", params=[f for f in FAMILIES if f != "bert"])
def pair(request):
    return tiny_model(request.param), tiny_model(request.param, device="cpu")


@pytest.mark.parametrize("call", sorted(CALLS))
def test_device_equals_cpu_twin(pair, call):
    m, twin = pair
    got, ref = CALLS[call](m), CALLS[call](twin)
    dev = m.device
    off = [(p, t.device) for p, t in tensors(got) if t.device != dev]
    assert not off, f"{call}: result tensors off the model's device {dev}: {off[:5]}"
    a, b = dict(tensors(got)), dict(tensors(ref))
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k].detach().cpu(), b[k].detach().cpu()
        if x.is_floating_point():
            scale = float(y.abs().nan_to_num().max()) if y.numel() else 0.0
            torch.testing.assert_close(x, y, rtol=0, atol=1e-4 * max(scale, 1.0), equal_nan=True, msg=f"{call}: {k}")
        else:
            assert torch.equal(x, y), f"{call}: {k}"


def test_suite_device_is_the_option():
    assert str(tiny_model("gpt2").device).split(":")[0] == str(torch.device(tiny_models.DEVICE)).split(":")[0]
