"""internal: for other interp packages, not the public API (import-linter lets only ``interp.features`` import this
module). The pieces of the dictionary layer that :mod:`interp.features` builds its analyses on: where a transcoder
reads the MLP's input, the checks of a dictionary set's layers, and the top and bottom tokens of a logit vector."""

from interp.dictionaries._logit_effects import top_and_bottom_logits
from interp.dictionaries._set import check_transcoder, replacement_set
from interp.dictionaries._transcoder import check_layers, mlp_input

__all__ = ["check_layers", "check_transcoder", "mlp_input", "replacement_set", "top_and_bottom_logits"]
