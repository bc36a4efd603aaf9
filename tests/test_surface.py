"""The public surface is the documented API: every name a package under interp/ exports (its ``__all__``) appears in
docs/api.md. The names below are the measured gap (146 of 357 on 2026-12-02); fixing one means documenting it or
moving it to the provider's internal module, then deleting it here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "api.md").read_text()
PACKAGES = sorted(p.parent.name for p in (ROOT / "interp").glob("*/__init__.py"))

#: Exported names not yet in docs/api.md (issue 44 item 3: document each or stop exporting it). This list may
#: only shrink: the test fails on a new undocumented export and on a listed name that is now documented or gone.
KNOWN_UNDOCUMENTED: dict[str, frozenset[str]] = {
    "attribution": frozenset(
        ["TokenSpec", "check_distinct", "resolve_candidate", "resolve_targets", "resolve_tokens", "warn_unspaced"]
    ),
    "causal": frozenset(
        [
            "ABLATIONS",
            "BoundMetric",
            "Metric",
            "MetricReader",
            "as_metric",
            "baselines",
            "check_reference_spread",
            "clean_output",
            "default_batch_size",
            "final_norm",
            "make_pair",
            "metric_gap",
            "metric_of",
            "patch_result",
            "reference_acts",
            "shared_prefix",
        ]
    ),
    "circuits": frozenset(["EFFECTIVE_EMBEDDING", "POSITION_NOTE", "read_labels", "write_labels"]),
    "dictionaries": frozenset(["ACTIVATIONS"]),
    "distributed": frozenset(
        [
            "DEFAULT_OBJECT_STORE",
            "merge_aggregate",
            "merge_edge_scores",
            "merge_effects",
            "merge_evaluation",
            "merge_faithfulness",
            "merge_logit_attribution",
            "merge_patch",
            "model_source",
            "shard_bounds",
        ]
    ),
    "edges": frozenset(
        [
            "AblatedForward",
            "Acts",
            "EdgeScorer",
            "EdgeWrites",
            "MIB_SIZES",
            "ReaderGradients",
            "TASKS",
            "ablated_writes",
            "check_completeness",
            "check_curve_args",
        ]
    ),
    "engine": frozenset(
        [
            "BoundMetric",
            "CAPABILITIES",
            "Engine",
            "HEADED_SITES",
            "MetricReader",
            "MLPWrite",
            "Patch",
            "RunCache",
            "SITES",
            "Variant",
            "allowed_keys",
            "apply_rotary",
            "clean_output",
            "final_norm",
            "metric_of",
            "require_capabilities",
            "soft_cap",
        ]
    ),
    "features": frozenset(["ACTIVATIONS"]),
    "groundtruth": frozenset(
        [
            "ABLATIONS",
            "DEFAULT_IGNORED",
            "METHODS",
            "PROGRAMS",
            "ProgramSpec",
            "PromptGroup",
            "discovery_table",
            "edges_from_residual_labels",
            "induction_scores",
            "program_names",
        ]
    ),
    "models": frozenset(
        [
            "Batch",
            "Block",
            "BlockOps",
            "Event",
            "Example",
            "LoadProgress",
            "NOT_YET_SUPPORTED",
            "SUPPORTED_FAMILIES",
            "Step",
            "TOY_BOS_ID",
            "TOY_FIRST_WORD_ID",
            "TOY_UNK_ID",
            "build_program",
            "catalog_entry",
            "check_device",
            "check_dtype",
            "check_token_ids",
            "default_cache_dir",
            "describe_block",
            "head_label",
            "hf_state_from_weights",
            "hf_writable",
            "is_streamed",
            "load_model_unchecked",
            "load_progress",
            "load_step",
            "model_from_hf_unchecked",
            "model_from_tracr",
            "native_state_dict",
            "norm_hook",
            "ordinary_tokens",
            "per_layer",
            "program_position",
            "read_toy_config",
            "readable_token",
            "resid_hook_names",
            "rotary_table_index",
            "rotary_tables",
            "run_block",
            "text_ids",
            "tokenize",
            "toy_weights",
            "toy_words",
            "tracr_is_numerical",
            "tracr_output_label",
            "warn_tokenizer_larger",
        ]
    ),
    "plots": frozenset(
        [
            "FeatureGraphView",
            "attribution_vector",
            "compact_figure",
            "compact_runtime",
            "compact_status",
            "dictionary_density_figure",
            "dictionary_evaluation_figure",
            "edge_roc_figure",
            "esc",
            "find_browser",
            "fmt",
            "parse_head",
            "predictions_figure",
            "residual_stream_norms",
            "token_label",
            "top_token_values",
        ]
    ),
    "report": frozenset(["check_circuit_options", "report_index"]),
    "stream": frozenset(
        [
            "Batch",
            "as_batch",
            "check_tensor_data",
            "count_hooks",
            "require_model",
            "resolve_positions",
            "tokenize",
            "trace_at",
        ]
    ),
}


def _documented(name: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", DOC) is not None


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_is_documented(package):
    exported = set(importlib.import_module(f"interp.{package}").__all__)
    missing = {n for n in exported if not _documented(n)}
    known = KNOWN_UNDOCUMENTED.get(package, frozenset())
    assert missing - known == set(), f"interp.{package} exports names docs/api.md does not document"
    assert known - missing == set(), f"documented or no longer exported: delete from KNOWN_UNDOCUMENTED[{package!r}]"
