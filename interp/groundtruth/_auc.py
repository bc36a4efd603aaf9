"""Edge ROC AUC: how well a score ranks the true edges of a known circuit above the false ones.

With n₊ true edges and n₋ false ones, the area under the ROC curve of the ranking by score equals the
Mann–Whitney statistic — the probability that a random true edge outscores a random false one, a tie
counting one half:

    AUC = (1 / n₊n₋) Σ_{i true} Σ_{j false} ( [s_i > s_j] + ½ [s_i = s_j] )
        = (R₊ − n₊(n₊ + 1)/2) / (n₊ n₋)

where R₊ is the sum of the true edges' ranks among all edges (ascending, tied scores sharing their mean
rank). The second form costs one sort. Circuit-discovery methods are ranked by |score| (the sign of an
edge's effect says which way it pushes the metric, not whether it matters; ACDC and EAP rank so too):
``roc_auc(scores.abs(), truth)``. An edge without a score (NaN) ranks below every scored edge — a method
that cannot score an edge has not found it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from interp.errors import ArgumentError, ShapeError

__all__ = ["roc_auc", "midranks"]


def midranks(values: Tensor) -> Tensor:
    """Ranks 1…n of ``values`` [n] (ascending), tied values sharing the mean of their ranks (float64)."""
    v = values.double()
    order = torch.argsort(v, stable=True)
    sorted_v = v[order]
    n = v.numel()
    # runs of equal values: a new run starts where the sorted value changes
    starts = torch.ones(n, dtype=torch.bool, device=v.device)
    if n > 1:
        starts[1:] = sorted_v[1:] != sorted_v[:-1]
    run = torch.cumsum(starts.long(), 0) - 1  # run id of each sorted position
    first = torch.nonzero(starts).flatten()  # first sorted position of each run
    last = torch.cat([first[1:], torch.tensor([n], device=v.device)]) - 1
    mean_rank = (first + last).double() / 2 + 1  # ranks are 1-based
    ranks = torch.empty(n, dtype=torch.float64, device=v.device)
    ranks[order] = mean_rank[run]
    return ranks


def roc_auc(scores: Any, truth: Any) -> float:
    """The ROC AUC of ``scores`` [n] for the bool labels ``truth`` [n] (module docstring; NaN ranks lowest).

    Raises :class:`ArgumentError` unless both classes are present.
    """
    s = torch.as_tensor(scores).detach().flatten().cpu()
    t = torch.as_tensor(truth).detach().flatten().cpu()
    if s.shape != t.shape:
        raise ShapeError(f"scores has {s.numel()} entries and truth {t.numel()}; give one score per labelled edge")
    if t.dtype != torch.bool:
        raise ShapeError(f"truth must be a bool tensor (True = a true edge), got dtype {t.dtype}")
    if s.is_complex() or not (s.is_floating_point() or s.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)):
        raise ShapeError(f"scores must be real numbers, got dtype {s.dtype}")
    n_pos, n_neg = int(t.sum()), int((~t).sum())
    if n_pos == 0 or n_neg == 0:
        raise ArgumentError(f"truth has {n_pos} true and {n_neg} false edges; the AUC needs both")
    s = s.double()
    if bool(torch.isinf(s).any()):
        raise ArgumentError("scores contains ±inf; pass finite scores (NaN marks an unscored edge)")
    nan = torch.isnan(s)
    if bool(nan.any()):  # below every finite score, all tied with each other
        finite = s[~nan]
        low = (finite.min() - 1.0) if finite.numel() else torch.tensor(0.0, dtype=torch.float64)
        s = torch.where(nan, low, s)
    r = midranks(s)
    return float((r[t].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
