"""The HTML reports: :func:`report` (one prompt through one model), :func:`circuits_report`
(weight-only pages), :func:`circuit_report` (an edge-level circuit of a task) and :func:`dictionary_page` (a
dictionary set's scores, densities and sampled features).

This layer composes the others: it loads a model (:mod:`interp.models`), runs the analyses
(:mod:`interp.stream`, :mod:`interp.attribution`, :mod:`interp.circuits`) and turns their results
into figures with :mod:`interp.plots`. Only :mod:`interp.cli` and the top-level :mod:`interp`
import it.

The top-level name ``interp.report`` is the function (the public API), which shadows this package
as an attribute of :mod:`interp`: import from the package by name
(``from interp.report import circuits_report``), not ``import interp.report as m``.
"""

from interp.report._circuit import circuit_report
from interp.report._dictionary import dictionary_page
from interp.report._index import report_index
from interp.report._report import circuits_report, report

__all__ = [
    "circuit_report",
    "circuits_report",
    "dictionary_page",
    "report",
    "report_index",
]
