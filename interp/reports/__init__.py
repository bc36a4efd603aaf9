"""The HTML reports: :func:`report` (one prompt through one model), :func:`weights_report`
(weight-only pages), :func:`task_report` (an edge-level circuit of a task; ``circuits_report`` and ``circuit_report``
were their names in 0.1 and still work, with a DeprecationWarning) and :func:`dictionary_page` (a
dictionary set's scores, densities and sampled features).

This layer composes the others: it loads a model (:mod:`interp.models`), runs the analyses
(:mod:`interp.stream`, :mod:`interp.attribution`, :mod:`interp.circuits`) and turns their results
into figures with :mod:`interp.plots`. Only :mod:`interp.cli` and the top-level :mod:`interp`
import it.

``interp.report`` is the function :func:`report` (``interp.reports.report``): the package is ``interp.reports``, so
the two names are two things. ``from interp.report import …`` (the package's name in 0.1) still works for one release,
with a DeprecationWarning.
"""

from typing import Any

from interp.reports._circuit import task_report
from interp.reports._dictionary import dictionary_page
from interp.reports._index import report_index
from interp.reports._report import report
from interp.reports._weights import weights_report

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

        return renamed(f"interp.reports.{name}", f"interp.reports.{_RENAMED[name]}", globals()[_RENAMED[name]])
    raise AttributeError(f"module 'interp.reports' has no attribute {name!r}")
