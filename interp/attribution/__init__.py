"""Attribution of logits (decoders) and hidden-state directions (encoders) to heads, MLPs, neurons."""

from interp.attribution._direction import attribute_direction
from interp.attribution._logits import attribute_logits
from interp.attribution._result import LogitAttribution

__all__ = ["LogitAttribution", "attribute_direction", "attribute_logits"]
