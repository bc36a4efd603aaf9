"""The residual stream: read/write points, hooked capture, exact decomposition."""

from interp.stream._capture import capture, count_hooks
from interp.stream._decomposition import Decomposition
from interp.stream._inputs import Batch, as_batch, tokenize
from interp.stream._trace import ResidualTrace, trace

__all__ = ["Batch", "Decomposition", "ResidualTrace", "as_batch", "capture", "count_hooks", "tokenize", "trace"]
