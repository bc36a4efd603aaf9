"""interp: exact mechanistic-interpretability decompositions of real transformers.

The curated public API (explicit re-exports only). See docs/api.md. Figure builders live in
``interp.plots``; weight-only circuit maths in ``interp.circuits``.
"""

from interp.errors import InterpError
from interp.attribution import LogitAttribution, attribute_direction, attribute_logits
from interp.models import ArchInfo, CatalogEntry, Model, list_models, load_model
from interp.plots import Exporter, export, report
from interp.stream import Decomposition, ResidualTrace, trace

__all__ = [
    "ArchInfo",
    "CatalogEntry",
    "Decomposition",
    "Exporter",
    "InterpError",
    "LogitAttribution",
    "Model",
    "ResidualTrace",
    "attribute_direction",
    "attribute_logits",
    "export",
    "list_models",
    "load_model",
    "report",
    "trace",
]
