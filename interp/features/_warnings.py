"""The warnings of the feature layer: a replacement run that does not reproduce the model, an intervention whose regime
disagrees with the live model, an intervention on a feature that is not active (a dictionary that explains too little
of its layer: :class:`interp.dictionaries.DictionaryQualityWarning`)."""

from __future__ import annotations

from interp.errors import InterpWarning

__all__ = ["ClosureWarning", "InactiveFeatureWarning", "RegimeWarning"]


class ClosureWarning(InterpWarning):
    """An intervention's rerun without the intervention does not reproduce the model's logits within the documented
    tolerance (:data:`interp.features.CLOSURE_TOLERANCE`); the message gives the error, the regime and the fix."""


class RegimeWarning(InterpWarning):
    """An intervention's change in its regime (frozen attention, frozen features) is far from its change in the live
    model (:data:`interp.features.LIVE_AGREEMENT`: off by more than half of the live change, or of the other sign):
    attention patterns and norm scales re-read the intervened write. The message gives both changes."""


class InactiveFeatureWarning(InterpWarning):
    """An ablation or scaling of a feature that is not active where it acts (activation 0): its change is 0 by
    construction. The message names the feature and the position."""
