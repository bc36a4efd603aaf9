"""patch_figure / effects_figure: built from a result's attributes only, with the values they were given."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from interp.causal import LogitDiff, effects, patch, path_patch
from interp.errors import ArgumentError
from interp.plots import effects_figure, patch_figure
from tiny_models import tiny_model


def _result(values, labels, **kw):
    base = dict(
        values=torch.as_tensor(values, dtype=torch.float64),
        labels=labels,
        clean=2.0,
        corrupt=0.0,
        direction="denoise",
        ablation="corrupt",
        metric="m",
        method="activation patching",
        n_layers=2,
        n_heads=2,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_head_heatmap_and_side_bars_hold_the_normalized_values():
    r = _result([0.5, 1.0, 1.5, 2.0, 3.0], ["L0.H0", "L0.H1", "L1.H0", "L1.H1", "L1.mlp"])
    fig = patch_figure(r)
    heat, bars = fig.data
    assert isinstance(heat, go.Heatmap) and isinstance(bars, go.Bar)
    np.testing.assert_allclose(np.asarray(heat.z), [[0.25, 0.5], [0.75, 1.0]])
    assert list(bars.y) == ["L1.mlp"] and list(bars.x) == [1.5]
    eff = patch_figure(r, what="effect")
    np.testing.assert_allclose(np.asarray(eff.data[0].z), [[0.5, 1.0], [1.5, 2.0]])  # minus corrupt (denoise base)
    with pytest.raises(ArgumentError, match="normalized"):
        patch_figure(_result([1.0], ["L0.H0"], corrupt=math.nan), what="normalized")


def test_node_by_position_heatmap():
    r = _result([[0.0, 1.0, 2.0], [2.0, 2.0, 0.0]], ["L0.mlp", "L1.mlp"], str_tokens=["<bos>", "a", "b"])
    fig = patch_figure(r, what="value")
    (heat,) = fig.data
    assert list(heat.y) == ["L0.mlp", "L1.mlp"] and list(heat.x) == ["0:<bos>", "1:a", "2:b"]
    np.testing.assert_allclose(np.asarray(heat.z), [[0.0, 1.0, 2.0], [2.0, 2.0, 0.0]])


def test_effects_panels_side_by_side():
    e = SimpleNamespace(
        total=torch.tensor([1.0, -3.0, 0.1]),
        direct=torch.tensor([1.0, -1.0, 0.0]),
        indirect=torch.tensor([0.0, -2.0, 0.1]),
        labels=["L0.H0", "L0.mlp", "L1.H1"],
        metric="m",
        ablation="corrupt",
        clean=1.0,
    )
    fig = effects_figure(e, k=2)
    assert [t.name for t in fig.data] == ["total", "direct", "indirect"]
    assert all(list(t.y) == ["L0.H0", "L0.mlp"] for t in fig.data)  # top 2 by |total|, stream order
    assert list(fig.data[2].x) == [0.0, -2.0]


@pytest.mark.slow
def test_real_results_plot():
    m = tiny_model("llama")
    met = LogitDiff("w12", "w13")
    c, k = ["w1 w2 w3 w4", "w5 w6 w7"], ["w1 w9 w3 w4", "w5 w10 w7"]
    for r in (
        patch(m, c, k, metric=met, nodes="components", progress=False),
        patch(m, c, k, metric=met, positions="each", progress=False),
        path_patch(m, c, k, metric=met, sender="L0.H1", progress=False),
    ):
        fig = r.plot()
        assert isinstance(fig, go.Figure) and r.metric in fig.layout.title.text.replace("&#x27;", "'")
        assert isinstance(r.plot(prompt=1, what="effect"), go.Figure)
    e = effects(m, c, k, metric=met, progress=False)
    assert isinstance(e.plot(), go.Figure)
