"""interp: exact mechanistic-interpretability decompositions of real transformers.

The curated public API (explicit re-exports only). See docs/api.md.
"""

from interp.errors import InterpError
from interp.models import ArchInfo, CatalogEntry, Model, list_models, load_model

__all__ = [
    "ArchInfo",
    "CatalogEntry",
    "InterpError",
    "Model",
    "list_models",
    "load_model",
]
