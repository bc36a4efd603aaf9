"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.stream._capture import count_hooks
from interp.stream._inputs import as_batch, check_tensor_data, require_model, resolve_positions
from interp.stream._trace import project_each
from interp.stream._trace_at import trace_at

__all__ = [
    "as_batch",
    "check_tensor_data",
    "count_hooks",
    "project_each",
    "require_model",
    "resolve_positions",
    "trace_at",
]
