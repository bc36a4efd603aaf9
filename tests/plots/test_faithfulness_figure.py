"""The faithfulness figure's two axes: one range, evenly spaced ticks, each right-axis tick on a left-axis gridline
(the right axis used to get its own uneven ticks, 0.068 … 1.032)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from interp.plots import graph_faithfulness_figure


def _curve(f: list[float]) -> SimpleNamespace:
    n = len(f)
    return SimpleNamespace(
        thresholds=[0.1 * (i + 1) for i in range(n)],
        faithfulness=torch.tensor(f, dtype=torch.float64),
        values=torch.tensor(f, dtype=torch.float64) * 2,
        n_features=torch.arange(n) * 3,
        n_errors=torch.arange(n),
        n_features_total=3 * n,
        n_errors_total=n,
        full=2.0,
        empty=0.0,
        cpr=0.5,
        cmd=0.5,
        ablation="mean",
        target="' dogs'",
        model_name="synthetic",
    )


@pytest.mark.parametrize("f", [[0.1, 0.4, 0.8, 0.95, 1.0], [-0.35, 0.2, 1.4, 1.1, 1.0], [0.0, 3.7, -2.2, 1.0]])
def test_axes_share_even_ticks(f):
    lay = graph_faithfulness_figure(_curve(f)).layout
    left, right = list(lay.yaxis.tickvals), list(lay.yaxis2.tickvals)
    assert list(lay.yaxis.range) == list(lay.yaxis2.range)
    lo, hi = lay.yaxis.range
    assert lo <= min(f + [0.0]) and hi >= max(f + [1.0])
    steps = {round(b - a, 9) for a, b in zip(left, left[1:])}
    assert len(steps) == 1 and 3 <= len(left) <= 9, left
    assert set(right) <= set(left) and min(right) == 0.0 and max(right) == 1.0  # the fraction kept lies in [0, 1]
    assert all(lo <= t <= hi for t in left)
