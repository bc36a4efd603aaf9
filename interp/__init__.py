"""interp: exact mechanistic-interpretability decompositions of real transformers.

The curated public API (explicit re-exports only). See docs/api.md. Figure builders live in
``interp.plots``; weight-only circuit maths in ``interp.circuits``.

``import interp`` imports only :mod:`interp.errors`: each name below is imported from its subpackage the first
time it is used (PEP 562 ``__getattr__``), and so is each subpackage (``interp.circuits``, ``interp.plots``,
...), so a script pays for torch, transformer-lens (which brings in transformers, datasets and pytest) or pandas
only when a call needs them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

from interp.errors import (
    AblationWarning,
    CompletenessWarning,
    ContextLengthWarning,
    InterpError,
    InterpWarning,
    MetricGapWarning,
    TokenSpacingWarning,
    UnknownTokenWarning,
)

if TYPE_CHECKING:  # the same names as _LAZY, for type checkers and editors (tests/test_lazy_import.py checks both)
    from interp.attribution import LogitAttribution, OVAt, attribute_direction, attribute_logits, ov_at
    from interp.causal import (
        KL,
        Direction,
        Effects,
        Logit,
        LogitDiff,
        LogitLens,
        LogProb,
        Metric,
        PatchResult,
        Prob,
        attribution_patch,
        effects,
        logit_lens,
        patch,
        path_patch,
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
    from interp.distributed import RayCluster
    from interp.edges import (
        CircuitEvaluation,
        CircuitGraph,
        EdgeCircuit,
        EdgeScores,
        FaithfulnessCurve,
        Task,
        circuit_graph,
        edge_attribution,
        edge_patch,
        evaluate_circuit,
        faithfulness_curve,
        load_task,
    )
    from interp.engine import load_model
    from interp.features import AttributionGraph, attribution_graph
    from interp.models import ArchInfo, CatalogEntry, Model, list_models
    from interp.plots import Exporter, export
    from interp.reports import dictionary_page, report, task_report, weights_report
    from interp.stream import Decomposition, Predictions, ResidualTrace, predict, trace

#: Each lazily imported public name -> the subpackage that defines it.
_LAZY: dict[str, str] = {
    **dict.fromkeys(["LogitAttribution", "OVAt", "attribute_direction", "attribute_logits", "ov_at"], "attribution"),
    **dict.fromkeys(
        [
            "KL",
            "Direction",
            "Effects",
            "Logit",
            "LogitDiff",
            "LogitLens",
            "LogProb",
            "Metric",
            "PatchResult",
            "Prob",
            "attribution_patch",
            "effects",
            "logit_lens",
            "patch",
            "path_patch",
        ],
        "causal",
    ),
    **dict.fromkeys(
        [
            "CompositionScores",
            "HeadOperator",
            "HeadScores",
            "PathExpansion",
            "composition_scores",
            "copying_scores",
            "head_operator",
            "ov_circuit",
            "path_expansion",
            "qk_circuit",
            "rotate_residual",
            "virtual_weights",
        ],
        "circuits",
    ),
    "RayCluster": "distributed",
    **dict.fromkeys(
        [
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
        ],
        "edges",
    ),
    "load_model": "engine",
    **dict.fromkeys(["AttributionGraph", "attribution_graph"], "features"),
    **dict.fromkeys(["ArchInfo", "CatalogEntry", "Model", "list_models"], "models"),
    **dict.fromkeys(["Exporter", "export"], "plots"),
    **dict.fromkeys(["dictionary_page", "report", "task_report", "weights_report"], "reports"),
    **dict.fromkeys(["Decomposition", "Predictions", "ResidualTrace", "predict", "trace"], "stream"),
}

#: The subpackages, each imported on first use as an attribute (``interp.circuits.effective_embedding``).
_SUBPACKAGES = (
    "attribution",
    "causal",
    "circuits",
    "cli",
    "distributed",
    "edges",
    "engine",
    "features",
    "groundtruth",
    "labels",
    "models",
    "plots",
    "reports",
    "stream",
    "toy",
)


#: Deprecated names -> the public names they became (kept, with a DeprecationWarning on each use, for one release).
_RENAMED: dict[str, str] = {"circuit_report": "task_report", "circuits_report": "weights_report"}


def __getattr__(name: str) -> Any:
    """A public name or subpackage, imported the first time it is asked for (then kept as a module attribute); a
    deprecated name (:data:`_RENAMED`) warns each time and gives the object of its new name."""
    if name in _RENAMED:
        from interp._validate import renamed

        return renamed(f"interp.{name}", f"interp.{_RENAMED[name]}", __getattr__(_RENAMED[name]))
    if name in _LAZY:
        value = getattr(importlib.import_module(f"interp.{_LAZY[name]}"), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"interp.{name}")
    else:
        raise AttributeError(f"module 'interp' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})


class _OldReportPath(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``interp.report`` as a module path, the package's name in 0.1 (``from interp.report import task_report``): it
    is ``interp.reports``, with a DeprecationWarning, for one release. The last finder on ``sys.meta_path``: asked
    only for that name, which no file provides."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        return importlib.util.spec_from_loader(fullname, self) if fullname == "interp.report" else None

    def create_module(self, spec: Any) -> types.ModuleType:
        import warnings

        warnings.warn(
            "the package interp.report is now interp.reports (interp.report is the function); "
            "import from interp.reports",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("interp.reports")

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Interp(types.ModuleType):
    """``interp`` itself: importing the deprecated module path ``interp.report`` (:class:`_OldReportPath`) makes the
    import system bind the attribute ``report`` to the package; the public name is the function, so that one binding
    is skipped. Both go with the deprecated path."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "report" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Interp
sys.meta_path.append(_OldReportPath())


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
    "MetricGapWarning",
    "TokenSpacingWarning",
    "UnknownTokenWarning",
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
    "dictionary_page",
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
    "task_report",
    "trace",
    "virtual_weights",
    "weights_report",
]
