"""Loading models: the offline catalog, GGUF caching, ArchInfo and frozen weights."""

from interp.models._arch import SUPPORTED_FAMILIES, ArchInfo
from interp.models._catalog import CatalogEntry, list_models
from interp.models._load import load_model, model_from_hf
from interp.models._model import Model
from interp.models._weights import Weights

__all__ = [
    "ArchInfo", "CatalogEntry", "Model", "SUPPORTED_FAMILIES", "Weights",
    "list_models", "load_model", "model_from_hf",
]
