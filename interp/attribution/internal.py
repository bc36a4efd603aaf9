"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.attribution._answers import TokenSpec, check_distinct, resolve_tokens, warn_unspaced
from interp.attribution._targets import resolve_candidate, resolve_targets

__all__ = [
    "TokenSpec",
    "check_distinct",
    "resolve_candidate",
    "resolve_targets",
    "resolve_tokens",
    "warn_unspaced",
]
