"""interp: exact mechanistic-interpretability decompositions of real transformers.

The curated public API (explicit re-exports only). See docs/api.md. Figure builders live in
``interp.plots``; weight-only circuit maths in ``interp.circuits``.
"""

from interp.errors import AblationWarning, CompletenessWarning, ContextLengthWarning, InterpError, InterpWarning, TokenSpacingWarning
from interp.attribution import LogitAttribution, OVAt, attribute_direction, attribute_logits, ov_at
from interp.causal import (
    KL, Direction, Effects, Logit, LogitDiff, LogitLens, LogProb, Metric, PatchResult, Prob, attribution_patch, effects,
    logit_lens, patch, path_patch,
)
from interp.circuits import (
    CompositionScores,
    HeadOperator,
    HeadScores,
    PathExpansion,
    composition_scores,
    copying_scores,
    head_operator,
    ov_circuit,
    path_expansion,
    qk_circuit,
    rotate_residual,
    virtual_weights,
)
from interp.edges import (
    CircuitEvaluation, CircuitGraph, EdgeCircuit, EdgeScores, FaithfulnessCurve, Task, circuit_graph, edge_attribution,
    edge_patch, evaluate_circuit, faithfulness_curve, load_task,
)
from interp.distributed import RayCluster
from interp.engine import load_model
from interp.features import AttributionGraph, attribution_graph
from interp.models import ArchInfo, CatalogEntry, Model, list_models
from interp.plots import Exporter, export
from interp.report import circuit_report, circuits_report, report
from interp.stream import Decomposition, Predictions, ResidualTrace, predict, trace

__all__ = [
    "ArchInfo",
    "AttributionGraph",
    "attribution_graph",
    "CatalogEntry",
    "CircuitEvaluation",
    "CircuitGraph",
    "EdgeCircuit",
    "EdgeScores",
    "FaithfulnessCurve",
    "Task",
    "circuit_graph",
    "edge_attribution",
    "edge_patch",
    "evaluate_circuit",
    "faithfulness_curve",
    "load_task",
    "CompositionScores",
    "Decomposition",
    "Direction",
    "Effects",
    "Exporter",
    "HeadOperator",
    "HeadScores",
    "InterpError",
    "InterpWarning",
    "AblationWarning",
    "CompletenessWarning",
    "ContextLengthWarning",
    "TokenSpacingWarning",
    "KL",
    "Logit",
    "LogitDiff",
    "LogitLens",
    "LogProb",
    "LogitAttribution",
    "Metric",
    "Model",
    "OVAt",
    "PatchResult",
    "PathExpansion",
    "Predictions",
    "Prob",
    "RayCluster",
    "ResidualTrace",
    "attribute_direction",
    "attribute_logits",
    "attribution_patch",
    "circuit_report",
    "circuits_report",
    "composition_scores",
    "copying_scores",
    "effects",
    "export",
    "head_operator",
    "list_models",
    "load_model",
    "logit_lens",
    "ov_at",
    "ov_circuit",
    "patch",
    "path_patch",
    "path_expansion",
    "predict",
    "qk_circuit",
    "report",
    "rotate_residual",
    "trace",
    "virtual_weights",
]
