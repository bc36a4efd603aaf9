"""The HTML reports: :func:`report` (one prompt through one model), :func:`circuits_report`
(weight-only pages) and :func:`circuit_report` (an edge-level circuit of a task).

This layer composes the others: it loads a model (:mod:`interp.models`), runs the analyses
(:mod:`interp.stream`, :mod:`interp.attribution`, :mod:`interp.circuits`) and turns their results
into figures with :mod:`interp.plots`. Only :mod:`interp.cli` and the top-level :mod:`interp`
import it.

The top-level name ``interp.report`` is the function (the public API), which shadows this package
as an attribute of :mod:`interp`: import from the package by name
(``from interp.report import circuits_report``), not ``import interp.report as m``.
"""

from interp.report._circuit import check_circuit_options, circuit_report
from interp.report._index import report_index
from interp.report._report import circuits_report, report

__all__ = ["check_circuit_options", "circuit_report", "circuits_report", "report", "report_index"]
