"""The residual stream: read/write points, hooked capture (incl. attention patterns), exact decomposition."""

from interp.stream._attention import AttentionPatternBatch, AttentionPatterns, attention_patterns
from interp.stream._capture import capture
from interp.stream._decomposition import Decomposition
from interp.stream._predict import Predictions, predict
from interp.stream._trace import ResidualTrace, trace

__all__ = [
    "AttentionPatternBatch",
    "AttentionPatterns",
    "Decomposition",
    "Predictions",
    "ResidualTrace",
    "attention_patterns",
    "capture",
    "predict",
    "trace",
]
