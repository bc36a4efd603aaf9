"""The forward engine: the block maths written once, from a model's frozen weights and its ArchInfo.

Everything in interp that re-runs a model (patching with prefix sharing, path patching, effects, edge
attribution and circuit evaluation) runs on the :class:`~interp.engine.internal.Engine` and these functions, and
reads its logits through the one readout (:func:`readout`: the final norm, the unembedding, the soft-cap) and the
metric layer (:class:`~interp.engine.internal.BoundMetric`, :class:`~interp.engine.internal.MetricReader`; the
engine's parts that other packages build on are in :mod:`interp.engine.internal`); a model family is a set
of capabilities on :class:`interp.models.ArchInfo`, never a branch here. :func:`self_check` compares the
engine's forward with the model's own when a model is loaded (:func:`load_model`).
"""

from interp.engine._capabilities import CAPABILITIES
from interp.engine._check import load_model, model_from_hf, self_check
from interp.engine._patches import SITES
from interp.engine._readout import readout, unembed, unembedding

__all__ = [
    "CAPABILITIES",
    "SITES",
    "load_model",
    "model_from_hf",
    "readout",
    "self_check",
    "unembed",
    "unembedding",
]
