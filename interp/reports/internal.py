"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.reports._circuit import check_circuit_options

__all__ = [
    "check_circuit_options",
]
