"""internal: for other interp packages, not the public API (import-linter lets any interp module import it;
nothing here is documented in docs/api.md or kept stable)."""

from interp.engine._budget import chunk_bytes
from interp.engine._capabilities import require_capabilities
from interp.engine._forward import Engine, RunCache
from interp.engine._hooks import hook_site, read_forward
from interp.engine._patches import HEADED_SITES, MLPWrite, Patch, Variant
from interp.engine._metrics import BoundMetric, MetricReader, clean_output, metric_of
from interp.engine._readout import final_norm, soft_cap
from interp.engine._rotary import allowed_keys, apply_rotary

__all__ = [
    "BoundMetric",
    "Engine",
    "HEADED_SITES",
    "MetricReader",
    "MLPWrite",
    "Patch",
    "RunCache",
    "Variant",
    "allowed_keys",
    "apply_rotary",
    "chunk_bytes",
    "clean_output",
    "final_norm",
    "hook_site",
    "metric_of",
    "require_capabilities",
    "read_forward",
    "soft_cap",
]
