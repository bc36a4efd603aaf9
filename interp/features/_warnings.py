"""The warnings of the feature layer: a replacement run that does not reproduce the model, a dictionary that explains
too little of its layer, an intervention whose regime disagrees with the live model, an intervention on a feature that
is not active."""

from __future__ import annotations

from interp.errors import InterpWarning

__all__ = ["ClosureWarning", "DictionaryQualityWarning", "InactiveFeatureWarning", "RegimeWarning"]


class ClosureWarning(InterpWarning):
    """An intervention's rerun without the intervention does not reproduce the model's logits within the documented
    tolerance (:data:`interp.features.CLOSURE_TOLERANCE`); the message gives the error, the regime and the fix."""


class DictionaryQualityWarning(InterpWarning):
    """A trained dictionary explains less of its layer than predicting the mean would (held-out FVU ≥ 1), or most
    of its features never fire: an attribution graph over it is mostly error nodes. The message names the layer and
    what to change."""


class RegimeWarning(InterpWarning):
    """An intervention's change in its regime (frozen attention, frozen features) is far from its change in the live
    model (:data:`interp.features.LIVE_AGREEMENT`: off by more than half of the live change, or of the other sign):
    attention patterns and norm scales re-read the intervened write. The message gives both changes."""


class InactiveFeatureWarning(InterpWarning):
    """An ablation or scaling of a feature that is not active where it acts (activation 0): its change is 0 by
    construction. The message names the feature and the position."""
