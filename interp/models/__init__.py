"""Loading models: the offline catalog, GGUF caching, the native (toy) format, tokenisation,
ArchInfo and frozen weights.

The lowest layer: it imports no other interp subpackage (only the top-level utility modules).
"""

from interp.models._arch import ArchInfo
from interp.models._block import Block, Step, describe_block
from interp.models._families import NOT_YET_SUPPORTED, SUPPORTED_FAMILIES
from interp.models._catalog import CatalogEntry, Example, catalog_entry, default_cache_dir, list_models
from interp.models._load import load_catalog_hf, load_model_unchecked, model_from_hf_unchecked
from interp.models._model import Model
from interp.models._offload import LayerStack
from interp.models._native import build_toy, load_toy, read_toy_config, save_toy
from interp.models._native_config import ToyConfig, toy_words
from interp.models._program import sees
from interp.models._tokenize import Batch, tokenize
from interp.models._weights import Weights

__all__ = [
    "ArchInfo",
    "Batch",
    "Block",
    "Step",
    "describe_block",
    "LayerStack",
    "NOT_YET_SUPPORTED",
    "CatalogEntry",
    "Example",
    "catalog_entry",
    "Model",
    "SUPPORTED_FAMILIES",
    "ToyConfig",
    "Weights",
    "build_toy",
    "default_cache_dir",
    "list_models",
    "load_catalog_hf",
    "load_model_unchecked",
    "load_toy",
    "model_from_hf_unchecked",
    "read_toy_config",
    "save_toy",
    "sees",
    "tokenize",
    "toy_words",
]
