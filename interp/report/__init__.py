"""The HTML reports: :func:`report` (one prompt through one model), :func:`weights_report`
(weight-only pages), :func:`task_report` (an edge-level circuit of a task; ``circuits_report`` and ``circuit_report``
were their names in 0.1 and still work, with a DeprecationWarning) and :func:`dictionary_page` (a
dictionary set's scores, densities and sampled features).

This layer composes the others: it loads a model (:mod:`interp.models`), runs the analyses
(:mod:`interp.stream`, :mod:`interp.attribution`, :mod:`interp.circuits`) and turns their results
into figures with :mod:`interp.plots`. Only :mod:`interp.cli` and the top-level :mod:`interp`
import it.

The top-level name ``interp.report`` is the function (the public API), which shadows this package
as an attribute of :mod:`interp`: import from the package by name
(``from interp.report import weights_report``), not ``import interp.report as m``.
"""

from typing import Any

from interp.report._circuit import task_report
from interp.report._dictionary import dictionary_page
from interp.report._index import report_index
from interp.report._report import report
from interp.report._weights import weights_report

__all__ = [
    "dictionary_page",
    "report",
    "report_index",
    "task_report",
    "weights_report",
]

#: Deprecated names -> the names they became (kept, with a DeprecationWarning on each use, for one release).
_RENAMED = {"circuit_report": "task_report", "circuits_report": "weights_report"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        from interp._validate import renamed

        return renamed(f"interp.report.{name}", f"interp.report.{_RENAMED[name]}", globals()[_RENAMED[name]])
    raise AttributeError(f"module 'interp.report' has no attribute {name!r}")
