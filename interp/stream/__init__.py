"""The residual stream: read/write points, hooked capture (incl. attention patterns), exact decomposition."""

from interp.stream._attention import AttentionPatternBatch, AttentionPatterns, attention_patterns
from interp.stream._capture import capture, count_hooks
from interp.stream._decomposition import Decomposition
from interp.stream._inputs import Batch, as_batch, check_tensor_data, require_model, resolve_positions, tokenize
from interp.stream._predict import Predictions, predict
from interp.stream._trace import ResidualTrace, trace
from interp.stream._trace_at import trace_at

__all__ = [
    "AttentionPatternBatch",
    "AttentionPatterns",
    "Batch",
    "Decomposition",
    "Predictions",
    "ResidualTrace",
    "as_batch",
    "attention_patterns",
    "capture",
    "check_tensor_data",
    "count_hooks",
    "predict",
    "require_model",
    "resolve_positions",
    "tokenize",
    "trace",
    "trace_at",
]
