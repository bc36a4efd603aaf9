"""Ground truth for circuit discovery: models whose circuits are known by construction.

* :func:`compile_program` compiles a RASP program (``reverse``, ``frac_prevs``, ``sort``, ``hist``)
  with tracr and loads it as an interp Model; :func:`tracr_circuit` reads its true edge set off the
  weights and tracr's residual labels (:mod:`interp.groundtruth._edges` states the rule).
* :func:`induction_circuit` finds the previous-token and induction heads of an attention-only toy
  from their attention patterns and returns the induction circuit's edges.
* :func:`tracr_task` / :func:`induction_task` build the prompts to discover those circuits on (one per
  output position, with resample partners and the :class:`OutputMargin` metric); :func:`edge_ranking`
  scores every edge with EAP, EAP-IG, exact edge patching or ACDC under zero, mean or resample ablation
  and reports the edge ROC AUC (:func:`roc_auc`) against the truth and against what the ablation can
  test (:func:`testable_edges`); :func:`misplaced` says why an AUC falls short, edge by edge.

Compiling needs the optional extra (``pip install 'interp[groundtruth]'``); tracr and jax are
imported lazily by :func:`compile_program` only, never by ``import interp``.
"""

from typing import Any

from interp.groundtruth._auc import roc_auc
from interp.groundtruth._discovery import (
    METHODS,
    RANKING_ABLATIONS,
    EdgeRanking,
    discovery_table,
    edge_ranking,
    testable_edges,
)
from interp.groundtruth._edges import DEFAULT_IGNORED, TrueCircuit, edges_from_residual_labels, tracr_circuit
from interp.groundtruth._explain import misplaced
from interp.groundtruth._induction import induction_circuit, induction_scores
from interp.groundtruth._programs import PROGRAMS, ProgramSpec, TracrProgram, compile_program, program_names
from interp.groundtruth._tasks import DiscoveryTask, OutputMargin, PromptGroup, induction_task, tracr_task

__all__ = [
    "DEFAULT_IGNORED",
    "DiscoveryTask",
    "EdgeRanking",
    "METHODS",
    "OutputMargin",
    "PROGRAMS",
    "ProgramSpec",
    "PromptGroup",
    "RANKING_ABLATIONS",
    "TracrProgram",
    "TrueCircuit",
    "compile_program",
    "discovery_table",
    "edge_ranking",
    "edges_from_residual_labels",
    "induction_circuit",
    "induction_scores",
    "induction_task",
    "misplaced",
    "program_names",
    "roc_auc",
    "testable_edges",
    "tracr_circuit",
    "tracr_task",
]

#: Deprecated names -> the names they became (kept, with a DeprecationWarning on each use, for one release):
#: ``ABLATIONS`` is :data:`interp.causal.ABLATIONS`'s name, which also has "corrupt".
_RENAMED = {"ABLATIONS": "RANKING_ABLATIONS"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        from interp._validate import renamed

        return renamed(f"interp.groundtruth.{name}", f"interp.groundtruth.{_RENAMED[name]}", globals()[_RENAMED[name]])
    raise AttributeError(f"module 'interp.groundtruth' has no attribute {name!r}")
