"""The warning of the dictionary layer: a dictionary that explains too little of its layer."""

from __future__ import annotations

from interp.errors import InterpWarning

__all__ = ["DictionaryQualityWarning"]


class DictionaryQualityWarning(InterpWarning):
    """A trained dictionary explains less of its layer than predicting the mean would (held-out FVU ≥ 1), or most
    of its features never fire: an attribution graph over it is mostly error nodes. The message names the layer and
    what to change."""
