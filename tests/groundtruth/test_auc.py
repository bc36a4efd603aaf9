"""Edge ROC AUC (Mann–Whitney form) against a brute-force count over every (true, false) pair."""

import itertools

import pytest
import torch
from scipy.stats import rankdata

from interp.errors import ArgumentError, ShapeError
from interp.groundtruth._auc import midranks, roc_auc


def brute_force(scores, truth) -> float:
    """(1/n₊n₋) Σ_{true i, false j} [s_i > s_j] + ½[s_i = s_j], NaN below everything."""
    s = [float("-inf") if v != v else float(v) for v in scores]
    pos = [s[i] for i in range(len(s)) if truth[i]]
    neg = [s[i] for i in range(len(s)) if not truth[i]]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_equals_the_pair_count_with_ties_and_nans():
    g = torch.Generator().manual_seed(0)
    checked = 0
    for trial in range(300):
        n = int(torch.randint(2, 40, (1,), generator=g))
        levels = int(torch.randint(1, 6, (1,), generator=g))  # few levels: many ties
        s = torch.randint(0, levels, (n,), generator=g).double() * 0.25
        if trial % 3 == 0:
            s[torch.rand(n, generator=g) < 0.2] = float("nan")
        t = torch.rand(n, generator=g) < 0.35
        if t.all() or (~t).all():
            continue
        assert roc_auc(s, t) == pytest.approx(brute_force(s.tolist(), t.tolist()), abs=1e-12)
        checked += 1
    assert checked > 200


def test_known_values():
    t = torch.tensor([True, True, False, False])
    assert roc_auc(torch.tensor([4.0, 3.0, 2.0, 1.0]), t) == 1.0
    assert roc_auc(torch.tensor([1.0, 2.0, 3.0, 4.0]), t) == 0.0
    assert roc_auc(torch.zeros(4), t) == 0.5  # all tied: chance
    assert roc_auc(torch.tensor([3.0, 1.0, 2.0, 0.0]), t) == 0.75  # one of four pairs inverted
    assert roc_auc(torch.tensor([float("nan"), 1.0, 0.0, 0.0]), t) == 0.5  # unscored true edge ranks last


def test_midranks_equal_scipy():
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        v = torch.randint(0, 7, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g).double()
        assert torch.equal(midranks(v), torch.tensor(rankdata(v.numpy(), method="average"), dtype=torch.float64))


def test_bad_input():
    with pytest.raises(ArgumentError, match="both"):
        roc_auc(torch.ones(3), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ShapeError, match="one score per"):
        roc_auc(torch.ones(3), torch.tensor([True, False]))
    with pytest.raises(ShapeError, match="bool"):
        roc_auc(torch.ones(2), torch.tensor([1, 0]))
    with pytest.raises(ArgumentError, match="inf"):
        roc_auc(torch.tensor([float("inf"), 0.0]), torch.tensor([True, False]))
