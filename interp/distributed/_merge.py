"""Exact merges of shard results: per-prompt fields concatenated in prompt order, every mean recomputed.

A dataset-level result is a mean over prompts of per-prompt values. Shards s = 1..S cover contiguous
prompt ranges of sizes n_s (N = Σ n_s), so the merged result is the in-process one:

    per_prompt = [per_prompt_1 | per_prompt_2 | ... ]            (concatenated on the prompt axis)
    value      = mean(per_prompt)                                (recomputed from the concatenation)
    m          = Σ_s n_s m_s / N                                 (a scalar kept only as a mean: a weighted sum)

— never the unweighted mean of the shards' means.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from interp._result import faithfulness_curves
from interp.attribution import LogitAttribution
from interp.attribution.internal import resolve_targets
from interp.causal import Effects, PatchResult
from interp.edges import CircuitEvaluation, EdgeScores, FaithfulnessCurve
from interp.edges.internal import check_completeness
from interp.features import AggregateGraph
from interp.errors import ShapeError

__all__ = [
    "merge_aggregate",
    "merge_faithfulness",
    "merge_logit_attribution",
    "merge_patch",
    "merge_effects",
    "merge_edge_scores",
    "merge_evaluation",
    "MERGES",
]


def _weighted(values: Sequence[float], sizes: Sequence[int]) -> float:
    """Σ n_s v_s / N in float64."""
    v = torch.tensor(list(values), dtype=torch.float64)
    n = torch.tensor(list(sizes), dtype=torch.float64)
    return float((v * n).sum() / n.sum())


def merge_patch(
    parts: Sequence[PatchResult], details: dict[str, Any], model: Any = None, args: Any = None
) -> PatchResult:
    """One :class:`interp.PatchResult` from the shards' (the prompt axis is last)."""
    shapes = {tuple(p.per_prompt.shape[:-1]) for p in parts}
    if len(shapes) > 1:
        raise ShapeError(
            f"cluster=: the shards' patch results have different node × position shapes {sorted(shapes)} "
            "(positions='each' over prompts of different token lengths); give prompts of one token "
            "length, or run with cluster=None"
        )
    first = parts[0]
    per_prompt = torch.cat([p.per_prompt for p in parts], dim=-1)
    cpp = torch.cat([p.clean_per_prompt for p in parts], dim=-1)
    kpp = torch.cat([p.corrupt_per_prompt for p in parts], dim=-1)
    return dataclasses.replace(
        first,
        values=PatchResult.mean_over_prompts(per_prompt, first.positions),
        per_prompt=per_prompt,
        clean=float(cpp.mean()),
        corrupt=float(kpp.mean()),
        clean_per_prompt=cpp,
        corrupt_per_prompt=kpp,
        details={**first.details, "distributed": details},
    )


def merge_edge_scores(
    parts: Sequence[EdgeScores], details: dict[str, Any], model: Any = None, args: Any = None
) -> EdgeScores:
    """One :class:`interp.EdgeScores` from the shards' (``per_prompt`` [n_edges, n_prompts]); the merged
    completeness is the prompt-weighted mean of the shards' (each the mean of its prompts' sums)."""
    first = parts[0]
    sizes = [p.n_prompts for p in parts]
    per_prompt = torch.cat([p.per_prompt for p in parts], dim=1)
    scores = per_prompt.double().mean(1).to(first.scores.dtype)
    out = dataclasses.replace(
        first,
        scores=scores,
        per_prompt=per_prompt,
        clean=_weighted([p.clean for p in parts], sizes),
        corrupt=_weighted([p.corrupt for p in parts], sizes),
        clean_per_prompt=torch.cat([p.clean_per_prompt for p in parts]),
        corrupt_per_prompt=torch.cat([p.corrupt_per_prompt for p in parts]),
        completeness=_weighted([p.completeness for p in parts], sizes),
        exact=None,
        details={**first.details, "distributed": details},
    )
    check_completeness(out)
    return out


def merge_effects(parts: Sequence[Effects], details: dict[str, Any], model: Any = None, args: Any = None) -> Effects:
    """One :class:`interp.Effects` from the shards' (``per_prompt`` [3, n_nodes, n_prompts]); ``corrupt``,
    kept only as a mean, is the prompt-weighted mean of the shards' (NaN stays NaN)."""
    first = parts[0]
    per = torch.cat([p.per_prompt for p in parts], dim=-1)
    cpp = torch.cat([p.clean_per_prompt for p in parts], dim=-1)
    return dataclasses.replace(
        first,
        total=per[0].mean(-1),
        direct=per[1].mean(-1),
        indirect=per[2].mean(-1),
        per_prompt=per,
        clean=float(cpp.mean()),
        clean_per_prompt=cpp,
        corrupt=_weighted([p.corrupt for p in parts], [p.n_prompts for p in parts]),
        details={**first.details, "distributed": details},
    )


def merge_evaluation(
    parts: Sequence[CircuitEvaluation], details: dict[str, Any], model: Any = None, args: Any = None
) -> CircuitEvaluation:
    """One :class:`interp.CircuitEvaluation` from the shards' (``per_prompt`` [3, n_prompts]: circuit, all, none)."""
    first = parts[0]
    per = torch.cat([p.per_prompt for p in parts], dim=1)
    return dataclasses.replace(
        first, values=per.mean(1), per_prompt=per, details={**first.details, "distributed": details}
    )


def merge_logit_attribution(
    parts: Sequence[LogitAttribution], details: dict[str, Any], model: Any = None, args: Any = None
) -> LogitAttribution:
    """One :class:`interp.LogitAttribution` from the shards' (``values`` [n_terms, n_prompts]): per-prompt fields
    concatenated; ``closure_error`` (a max over prompts) the max of the shards'; ``relative_error`` recomputed from
    it and the merged totals; the target's text and the answer / wrong ids resolved for all prompts at once, as
    in process."""
    first = parts[0]
    labels = {tuple(p.labels) for p in parts}
    if len(labels) > 1:
        raise ShapeError(
            "cluster=: the shards' attributions have different terms (unit='head_source' over prompts "
            "of different token lengths); give prompts of one token length, or run with cluster=None"
        )
    values = torch.cat([p.values for p in parts], dim=1)
    total = torch.cat([p.total for p in parts])
    err = max(p.closure_error for p in parts)
    scale = float(total.abs().max())
    texts = [t for p in parts for t in (p.prompt_targets or [])]
    a = args or {}
    targets = resolve_targets(
        model,
        a.get("answer"),
        a.get("wrong"),
        int(values.shape[1]),
        multi_token=a.get("multi_token", False),
        target=a.get("target", "logit"),
        wrong_agg=a.get("wrong_agg", "mean"),
    )

    def cat(field: str) -> Any:
        vals = [getattr(p, field) for p in parts]
        return None if any(v is None for v in vals) else [x for v in vals for x in v]

    return dataclasses.replace(
        first,
        values=values,
        total=total,
        closure_error=err,
        relative_error=err / scale if scale > 0 else err,
        positions=torch.cat([p.positions for p in parts]),
        prompts=cat("prompts"),
        prompt_str_tokens=cat("prompt_str_tokens"),
        prompt_targets=texts or None,
        target=targets.overall_text(texts) if texts else first.target,
        answer_ids=targets.answer_ids(),
        wrong_ids=targets.wrong_ids(),
        wrong_agg=targets.agg if targets.wrongs is not None and any(len(w) > 1 for w in targets.wrongs) else None,
        details={**first.details, "distributed": details},
    )


def merge_faithfulness(
    parts: Sequence[FaithfulnessCurve], details: dict[str, Any], model: Any = None, args: Any = None
) -> FaithfulnessCurve:
    """One :class:`interp.FaithfulnessCurve` from the shards': the means M(C_k), M(all), M(∅) prompt-weighted
    (the shards' prompt counts are in ``details["bounds"]``), then faithfulness = (M(C) − M(∅)) / (M(all) − M(∅)),
    CPR and CMD recomputed from them by the in-process computation (:func:`interp._result.faithfulness_curves`) — never
    a mean of the shards' ratios."""
    first = parts[0]
    n = torch.tensor([b - a for a, b in details["bounds"]], dtype=torch.float64)
    w = n / n.sum()

    def mean(field: str) -> torch.Tensor:
        return sum((getattr(p, field).double() * w[i] for i, p in enumerate(parts)), torch.zeros(()))

    V, full, empty = mean("values"), mean("full"), mean("empty")
    F, cpr, cmd = faithfulness_curves(V, full, empty, torch.tensor(first.sizes, dtype=torch.float64))
    given = (args or {}).get("_reference_given", True)
    return dataclasses.replace(
        first,
        values=V,
        full=full,
        empty=empty,
        faithfulness=F,
        cpr=cpr,
        cmd=cmd,
        details={**first.details, "reference": "given" if given else "the corrupt prompts", "distributed": details},
    )


def merge_aggregate(
    parts: Sequence[AggregateGraph], details: dict[str, Any], model: Any = None, args: Any = None
) -> AggregateGraph:
    """One :class:`interp.features.AggregateGraph` from the shards': their sums and counts added
    (:meth:`AggregateGraph.combine`, as in process)."""
    return AggregateGraph.combine(parts, details={"distributed": details})


#: function name → (result class, merge)
MERGES: dict[str, tuple[Any, Any]] = {
    "patch": (PatchResult, merge_patch),
    "attribution_patch": (PatchResult, merge_patch),
    "effects": (Effects, merge_effects),
    "edge_attribution": (EdgeScores, merge_edge_scores),
    "evaluate_circuit": (CircuitEvaluation, merge_evaluation),
    "attribute_logits": (LogitAttribution, merge_logit_attribution),
    "faithfulness_curve": (FaithfulnessCurve, merge_faithfulness),
    "aggregate_graphs": (AggregateGraph, merge_aggregate),
}
