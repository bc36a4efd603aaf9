"""Why a ranking falls short of AUC 1: each misplaced edge put in one of five classes.

A false edge with a nonzero score ranked at or above the worst *findable* true edge (testable, with an exact
effect) *outranks*; a true edge ranked at or below the best false edge that has no effect of its own is
*missed* (false edges tied with a missed true edge at 0 are the miss's cost, not outranking). Each is classified from
facts that do not depend on the method being judged — the testable truth of the ablation
(:func:`interp.groundtruth.testable_edges`) and the exact single-edge effect (edge patching, the oracle) under the same
ablation:

=================  ========================================================================================
``blind``          true, but the ablation changes nothing the reader reads along it: a positional write
                   under an ablation that keeps the position, or a write that is the same on every input
                   of one length (the length a same-length resample keeps) — no method can see it
``inert``          true and testable, but its exact effect is zero on every prompt: the weights connect the
                   two and the carried write changes, yet the output does not (reverse's all-true selector:
                   every query attends uniformly whatever its token) — no single-edge method can see it
``first-order``    true with a nonzero exact effect that the method scores too low: a linear estimate of a
                   nonlinear change (a saturated softmax, a ReLU step) — the method's own error
``off-circuit``    false, yet ablating it moves the output: a constant channel the truth ignores (tracr's
                   ``one`` or BOS, which zero ablation removes), or a component outside the known mechanism
                   that still contributes (the toy's other heads, its direct path)
``spurious``       false with no exact effect, scored high by the method — the method's own error
=================  ========================================================================================
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["misplaced", "counts", "CLASSES"]

CLASSES = ("blind", "inert", "first-order", "off-circuit", "spurious")


def misplaced(ranking: Any, oracle: Optional[Any] = None, *, atol: float = 1e-6) -> dict[str, list[str]]:
    """{class: edges} for the edges that keep ``ranking``'s AUC below 1 (module docstring).

    ``oracle``: the edge-patching :class:`EdgeRanking` of the same task and ablation (its scores are the
    exact mean |effect| of each edge); without it, "inert" and "first-order" cannot be told apart and both
    are reported as "first-order", "off-circuit" (unless testable) and "spurious" likewise as "spurious".
    """
    s = ranking.scores.double()
    truth, testable = ranking.truth, ranking.testable
    exact = oracle.scores.double() if oracle is not None else None
    out: dict[str, list[str]] = {c: [] for c in CLASSES}
    # false edges that move the output (constant channels, components outside the mechanism) are reported as
    # off-circuit; a true edge counts as missed only below a false edge that does not
    effect = testable.clone() if exact is None else testable | (exact > atol)
    plain = ~truth & ~effect
    best_plain = float(s[plain].max()) if bool(plain.any()) else float("-inf")
    # outranking is judged against the true edges a method could find (testable, with an exact effect): the
    # blind and inert ones sit at 0 whatever the method does, and their cost is counted as theirs
    findable = truth & testable & (exact > atol) if exact is not None else truth & testable
    ref = findable if bool(findable.any()) else truth
    worst_true = float(s[ref].min()) if bool(ref.any()) else float("inf")
    for i, e in enumerate(ranking.edges):
        if bool(truth[i]) and float(s[i]) <= best_plain:
            if not bool(testable[i]):
                out["blind"].append(e)
            elif exact is not None and float(exact[i]) <= atol:
                out["inert"].append(e)
            else:
                out["first-order"].append(e)
        elif not bool(truth[i]) and float(s[i]) >= worst_true and float(s[i]) > 0:  # a 0 was not scored high
            out["off-circuit" if bool(effect[i]) else "spurious"].append(e)
    return out


def counts(groups: dict[str, list[str]]) -> str:
    """``"blind 2, first-order 1"`` (the non-empty classes)."""
    return ", ".join(f"{c} {len(v)}" for c, v in groups.items() if v) or "none"
