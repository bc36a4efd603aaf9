"""Attribution of logits (decoders) and hidden-state directions (encoders) to heads, MLPs, neurons."""

from interp.attribution._direction import attribute_direction
from interp.attribution._logits import attribute_logits
from interp.attribution._result import LogitAttribution
from interp.attribution._sources import OVAt, ov_at

__all__ = [
    "LogitAttribution",
    "OVAt",
    "attribute_direction",
    "attribute_logits",
    "ov_at",
]
