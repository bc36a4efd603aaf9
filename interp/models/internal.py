"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.models._block import BlockOps, run_block
from interp.models._families import hf_state_from_weights, hf_writable
from interp.models._offload import is_streamed, per_layer
from interp.models._progress import LoadProgress, load_progress, load_step
from interp.models._native import native_state_dict, toy_weights
from interp.models._native_config import BOS_ID as TOY_BOS_ID, FIRST_WORD_ID as TOY_FIRST_WORD_ID, UNK_ID as TOY_UNK_ID
from interp.models._numerics import check_device, check_dtype
from interp.models._rotary import rotary_table_index, rotary_tables
from interp.models._program import Event, build_program, head_label, norm_hook, program_position, resid_hook_names
from interp.models._tokenize import check_token_ids, ordinary_tokens, readable_token, text_ids, warn_tokenizer_larger
from interp.models._tracr import model_from_tracr, tracr_is_numerical, tracr_output_label

__all__ = [
    "BlockOps",
    "Event",
    "LoadProgress",
    "TOY_BOS_ID",
    "TOY_FIRST_WORD_ID",
    "TOY_UNK_ID",
    "build_program",
    "check_device",
    "check_dtype",
    "check_token_ids",
    "head_label",
    "hf_state_from_weights",
    "hf_writable",
    "is_streamed",
    "load_progress",
    "load_step",
    "model_from_tracr",
    "native_state_dict",
    "norm_hook",
    "ordinary_tokens",
    "per_layer",
    "program_position",
    "readable_token",
    "resid_hook_names",
    "rotary_table_index",
    "rotary_tables",
    "run_block",
    "text_ids",
    "toy_weights",
    "tracr_is_numerical",
    "tracr_output_label",
    "warn_tokenizer_larger",
]
