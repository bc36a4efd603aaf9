"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.causal._metrics import as_metric
from interp.causal._common import baselines, check_reference_spread, make_pair, reference_acts
from interp.causal._patch import default_batch_size, shared_prefix
from interp.causal._result import patch_result

__all__ = [
    "as_metric",
    "baselines",
    "check_reference_spread",
    "default_batch_size",
    "make_pair",
    "patch_result",
    "reference_acts",
    "shared_prefix",
]
