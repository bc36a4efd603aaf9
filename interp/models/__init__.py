"""Loading models: the offline catalog, GGUF caching, the native (toy) format, tokenisation,
ArchInfo and frozen weights.

The lowest layer: it imports no other interp subpackage (only the top-level utility modules).
"""

from interp.models._arch import ArchInfo
from interp.models._block import Block, BlockOps, Step, describe_block, run_block
from interp.models._families import NOT_YET_SUPPORTED, SUPPORTED_FAMILIES, hf_state_from_weights, hf_writable
from interp.models._catalog import CatalogEntry, Example, catalog_entry, default_cache_dir, list_models
from interp.models._load import load_catalog_hf, load_model_unchecked, model_from_hf_unchecked
from interp.models._model import Model
from interp.models._offload import LayerStack, is_streamed, per_layer
from interp.models._progress import LoadProgress, load_progress, load_step
from interp.models._native import build_toy, load_toy, native_state_dict, read_toy_config, save_toy, toy_weights
from interp.models._native_config import BOS_ID as TOY_BOS_ID
from interp.models._native_config import FIRST_WORD_ID as TOY_FIRST_WORD_ID
from interp.models._native_config import UNK_ID as TOY_UNK_ID
from interp.models._native_config import ToyConfig, toy_words
from interp.models._numerics import check_device, check_dtype
from interp.models._rotary import rotary_table_index, rotary_tables
from interp.models._program import (
    Event,
    build_program,
    head_label,
    norm_hook,
    program_position,
    resid_hook_names,
    sees,
)
from interp.models._tokenize import (
    Batch,
    check_token_ids,
    ordinary_tokens,
    readable_token,
    text_ids,
    tokenize,
    warn_tokenizer_larger,
)
from interp.models._tracr import model_from_tracr, tracr_is_numerical, tracr_output_label
from interp.models._weights import Weights

__all__ = [
    "ArchInfo",
    "Batch",
    "check_token_ids",
    "Block",
    "BlockOps",
    "Step",
    "describe_block",
    "run_block",
    "LayerStack",
    "LoadProgress",
    "load_progress",
    "load_step",
    "is_streamed",
    "per_layer",
    "NOT_YET_SUPPORTED",
    "CatalogEntry",
    "Example",
    "catalog_entry",
    "Event",
    "Model",
    "SUPPORTED_FAMILIES",
    "TOY_BOS_ID",
    "TOY_FIRST_WORD_ID",
    "TOY_UNK_ID",
    "ToyConfig",
    "Weights",
    "build_program",
    "check_device",
    "check_dtype",
    "build_toy",
    "default_cache_dir",
    "head_label",
    "hf_state_from_weights",
    "hf_writable",
    "list_models",
    "load_catalog_hf",
    "load_model_unchecked",
    "norm_hook",
    "ordinary_tokens",
    "load_toy",
    "model_from_hf_unchecked",
    "model_from_tracr",
    "native_state_dict",
    "program_position",
    "read_toy_config",
    "readable_token",
    "resid_hook_names",
    "rotary_table_index",
    "rotary_tables",
    "save_toy",
    "sees",
    "text_ids",
    "tokenize",
    "toy_weights",
    "toy_words",
    "warn_tokenizer_larger",
    "tracr_is_numerical",
    "tracr_output_label",
]
