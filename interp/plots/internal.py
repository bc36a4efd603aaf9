"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.plots._attribution import attribution_vector
from interp.plots._circuits import top_token_values
from interp.plots._common import esc, fmt, parse_head, token_label
from interp.plots._compact import compact_figure, compact_runtime, compact_status
from interp.plots._export import find_browser
from interp.plots._stream import residual_stream_norms

__all__ = [
    "attribution_vector",
    "compact_figure",
    "compact_runtime",
    "compact_status",
    "esc",
    "find_browser",
    "fmt",
    "parse_head",
    "residual_stream_norms",
    "token_label",
    "top_token_values",
]
