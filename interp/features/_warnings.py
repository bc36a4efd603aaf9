"""The warnings of the feature layer: a replacement run that does not reproduce the model, a dictionary that explains
too little of its layer."""

from __future__ import annotations

from interp.errors import InterpWarning

__all__ = ["ClosureWarning", "DictionaryQualityWarning"]


class ClosureWarning(InterpWarning):
    """An intervention's rerun without the intervention does not reproduce the model's logits within the documented
    tolerance (:data:`interp.features.CLOSURE_TOLERANCE`); the message gives the error, the regime and the fix."""


class DictionaryQualityWarning(InterpWarning):
    """A trained dictionary explains less of its layer than predicting the mean would (held-out FVU ≥ 1), or most
    of its features never fire: an attribution graph over it is mostly error nodes. The message names the layer and
    what to change."""
