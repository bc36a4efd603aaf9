"""interp: exact mechanistic-interpretability decompositions of real transformers.

The curated public API (explicit re-exports only). See docs/api.md.
"""

from interp.errors import InterpError
from interp.attribution import LogitAttribution, attribute_direction, attribute_logits
from interp.models import ArchInfo, CatalogEntry, Model, list_models, load_model
from interp.stream import Decomposition, ResidualTrace, trace

__all__ = [
    "ArchInfo",
    "CatalogEntry",
    "Decomposition",
    "InterpError",
    "LogitAttribution",
    "Model",
    "ResidualTrace",
    "attribute_direction",
    "attribute_logits",
    "list_models",
    "load_model",
    "trace",
]
