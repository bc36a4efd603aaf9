"""The edge ROC figure: its curve's area is the Mann–Whitney AUC (ties count one half), counted pair by pair."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from interp.errors import ArgumentError
from interp.plots import edge_roc_figure


def _pairwise_auc(s: np.ndarray, t: np.ndarray) -> float:
    pos, neg = s[t], s[~t]
    return float(np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_area_under_the_curve_is_the_pairwise_auc_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 6, (40,), generator=g).double()  # many ties
    truth = torch.rand(40, generator=g) < 0.3
    r = SimpleNamespace(
        scores=scores, truth=truth, edges=[f"e{i}" for i in range(40)], auc=0.5, task="t", method="eap", ablation="zero"
    )
    fig = edge_roc_figure(r)
    x, y = np.asarray(fig.data[1].x), np.asarray(fig.data[1].y)
    assert (x[0], y[0], x[-1], y[-1]) == (0, 0, 1, 1) and np.all(np.diff(x) >= 0) and np.all(np.diff(y) >= 0)
    assert np.trapezoid(y, x) == pytest.approx(_pairwise_auc(scores.numpy(), truth.numpy()), abs=1e-12)


def test_refuses_what_is_not_a_ranking():
    with pytest.raises(ArgumentError, match="ranking"):
        edge_roc_figure(SimpleNamespace(scores=torch.zeros(3)))
