"""Where a result's tensors live (docs/api.md, "Where results live"): every tensor of a result on the device the
model computed on; ``to_dataframe()``, ``top()``, ``plot()`` and ``save()`` read a host copy themselves.

What each test can catch on the CPU (be honest about it):

- ``test_host_tensors_follow_the_device_tensor``: CAN fail on the CPU. Each documented result type is rebuilt with
  ONE tensor field on ``meta`` (standing in for the model's accelerator) and the rest on the CPU (standing in for
  host bookkeeping) — the shape of the 118 mixed-device results of the CUDA sweep; every tensor must end on
  ``meta``. A class whose ``__post_init__`` skips the rule fails here.
- ``test_host_methods_read_a_host_copy``: CAN fail on the CPU, structurally (every result class's table, figure
  and save methods go through ``Result.to("cpu")``), and ``.to("meta")`` must move every tensor.
- ``test_every_result_on_the_model_device``: can only fail under ``pytest --device cuda`` (on the CPU every tensor
  is on the CPU whatever the code does); it also calls the host methods on the device result and compares the
  values with a CPU twin.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

import interp
import tiny_models
from device.walk import tensors
from interp._result import HOST_METHODS, Result
from test_result_contract import FACTORIES, RESULT_CLASSES
from tiny_models import tiny_model

DEVICE = torch.device(tiny_models.DEVICE)


def _models(device):
    return {f: tiny_model(f, device=device) for f in ("gpt2", "llama", "neox", "bert")} | {
        "toy": interp.load_model("toy-attn-only-2l", device=device)
    }


def _extra(m):
    """The documented result types that are not :class:`Result` tables but hold tensors."""
    from interp.features import SAE, sae_reconstruction
    from tiny_transcoders import random_transcoders

    tc = random_transcoders(m["llama"], 8, seed=0)[0]
    sae = SAE(tc.W_enc, tc.b_enc, tc.W_dec, tc.b_dec, layer=0, site="resid_post").to(m["llama"].device)
    return {
        "ResidualTrace": interp.trace(m["gpt2"], ["w1 w2 w3", "w4 w5"], keep=("patterns",)),
        "SAEReconstruction": sae_reconstruction(m["llama"], ["w1 w2 w3", "w4 w5"], sae),
    }


@pytest.fixture(scope="module")
def models():
    return _models(DEVICE)


@pytest.fixture(scope="module")
def cpu_models():
    return _models("cpu")


@pytest.fixture(scope="module")
def results(models):
    return {}


def _result(name, models, results):
    if name not in results:
        results[name] = FACTORIES[name](models) if name in FACTORIES else _extra(models)[name]
    return results[name]


ALL = sorted(FACTORIES) + ["ResidualTrace", "SAEReconstruction"]


@pytest.mark.parametrize("name", ALL)
def test_host_tensors_follow_the_device_tensor(name, models, results):
    r = _result(name, models, results)
    fields = [f.name for f in dataclasses.fields(r) if f.init and isinstance(getattr(r, f.name), torch.Tensor)]
    if not fields:
        pytest.skip(f"{name} on these models has no top-level tensor field")
    first = fields[0]
    moved = dataclasses.replace(r, **{first: getattr(r, first).to("meta")})
    off = [(p, t.device.type) for p, t in tensors(moved) if t.device.type != "meta"]
    assert not off, f"{name} built with .{first} on meta kept tensors elsewhere: {off[:5]}"
    if isinstance(moved, Result):
        assert moved.device.type == "meta"


@pytest.mark.parametrize("name", RESULT_CLASSES)
def test_host_methods_read_a_host_copy(name, models, results):
    r = _result(name, models, results)
    for method in HOST_METHODS:
        assert getattr(getattr(type(r), method), "_on_host", False), f"{name}.{method} does not read a host copy"
    on_meta = r.to("meta")
    assert all(t.device.type == "meta" for _, t in tensors(on_meta)), name
    assert r.to(r.device) is r  # no copy when nothing moves


@pytest.mark.parametrize("name", ALL)
def test_every_result_on_the_model_device(name, models, results, tmp_path, request):
    r = _result(name, models, results)
    off = [(p, t.device) for p, t in tensors(r) if t.device.type != DEVICE.type]
    assert not off, f"{name}: tensors off the model's device {DEVICE}: {off[:5]}"
    if isinstance(r, Result):
        assert isinstance(r.to_dataframe(), pd.DataFrame)
        assert len(r.top(3)) <= 3
        assert isinstance(r.plot(), go.Figure)
        back = type(r).load(r.save(tmp_path / "r.safetensors"))
        assert all(t.device.type == "cpu" for _, t in tensors(back))  # a loaded result is on the host
        if DEVICE.type != "cpu":  # the same table as on a CPU twin
            ref = FACTORIES[name](request.getfixturevalue("cpu_models"))
            pd.testing.assert_frame_equal(r.to_dataframe(), ref.to_dataframe(), atol=1e-4, rtol=1e-4)
