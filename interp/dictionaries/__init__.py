"""Feature dictionaries: per-layer and cross-layer transcoders and residual-stream SAEs — their maths, the formats
they are loaded from (circuit-tracer's, SAELens's, sparsify's, dictionary_learning's), training them on a model's
own activations from an offline corpus, and scoring them as the field does (FVU, L0, dead features, the spliced-in
loss recovered), with each feature's top activating contexts and logit effects. The analyses over them (attribution
graphs, interventions, generation) are in :mod:`interp.features`, which re-exports every name here."""

from interp.dictionaries._contexts import top_activating_contexts
from interp.dictionaries._corpus import english_corpus, held_out_corpus, modern_corpus
from interp.dictionaries._evaluate import DictionaryEvaluation, evaluate_dictionary
from interp.dictionaries._formats import FORMATS, load_saes, load_transcoders
from interp.dictionaries._logit_effects import feature_logit_effects
from interp.dictionaries._set import DictionarySet
from interp.dictionaries._sae import SAE, SAE_SITES, SAEReconstruction, sae_reconstruction
from interp.dictionaries._train import (
    TrainConfig,
    TrainedCrossLayerTranscoder,
    TrainedTranscoders,
    default_lr,
    default_passes,
    train_transcoders,
)
from interp.dictionaries._transcoder import ACTIVATIONS, CrossLayerTranscoder, Transcoder
from interp.dictionaries._warnings import DictionaryQualityWarning

__all__ = [
    "ACTIVATIONS",
    "FORMATS",
    "SAE",
    "SAE_SITES",
    "CrossLayerTranscoder",
    "DictionaryEvaluation",
    "DictionarySet",
    "DictionaryQualityWarning",
    "SAEReconstruction",
    "TrainConfig",
    "TrainedCrossLayerTranscoder",
    "TrainedTranscoders",
    "Transcoder",
    "default_lr",
    "default_passes",
    "english_corpus",
    "evaluate_dictionary",
    "feature_logit_effects",
    "held_out_corpus",
    "load_saes",
    "load_transcoders",
    "modern_corpus",
    "sae_reconstruction",
    "top_activating_contexts",
    "train_transcoders",
]
