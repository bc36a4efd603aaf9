"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.circuits._embedding import EFFECTIVE_EMBEDDING
from interp.circuits._factored import POSITION_NOTE

__all__ = [
    "EFFECTIVE_EMBEDDING",
    "POSITION_NOTE",
]
