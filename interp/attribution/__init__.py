"""Attribution of logits (decoders) and hidden-state directions (encoders) to heads, MLPs, neurons."""

from interp.attribution._answers import TokenSpec, check_distinct, resolve_tokens, warn_unspaced
from interp.attribution._direction import attribute_direction
from interp.attribution._logits import attribute_logits
from interp.attribution._result import LogitAttribution
from interp.attribution._sources import OVAt, ov_at
from interp.attribution._targets import resolve_candidate, resolve_targets

__all__ = [
    "LogitAttribution",
    "OVAt",
    "TokenSpec",
    "attribute_direction",
    "attribute_logits",
    "check_distinct",
    "ov_at",
    "resolve_candidate",
    "resolve_targets",
    "resolve_tokens",
    "warn_unspaced",
]
