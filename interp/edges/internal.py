"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.edges._ablated import AblatedForward
from interp.edges._attribution import check_completeness
from interp.edges._evaluate import check_curve_args
from interp.edges._gradient import EdgeScorer, ReaderGradients
from interp.edges._patch import ablated_writes
from interp.edges._writes import Acts, EdgeWrites

__all__ = [
    "AblatedForward",
    "Acts",
    "EdgeScorer",
    "EdgeWrites",
    "ReaderGradients",
    "ablated_writes",
    "check_completeness",
    "check_curve_args",
]
