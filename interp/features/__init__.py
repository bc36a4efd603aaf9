"""Attribution graphs and interventions over feature dictionaries (the dictionaries themselves — transcoders, SAEs,
their formats, training and scoring — are :mod:`interp.dictionaries`, every name of it re-exported here):
the exact attribution graph of a prompt over transcoders (error nodes make the replacement model exact);
interventions on features in the replacement model, and during generation (features and steering vectors); QK
attribution of a head's score to the graph's nodes."""

# the dictionaries themselves (interp.dictionaries), re-exported: interp.features.Transcoder etc. keep working
from interp.dictionaries import (
    ACTIVATIONS,
    FORMATS,
    SAE,
    SAE_SITES,
    CrossLayerTranscoder,
    DictionaryEvaluation,
    DictionaryQualityWarning,
    DictionarySet,
    SAEReconstruction,
    TrainConfig,
    TrainedCrossLayerTranscoder,
    TrainedTranscoders,
    Transcoder,
    default_lr,
    default_passes,
    english_corpus,
    evaluate_dictionary,
    feature_logit_effects,
    held_out_corpus,
    load_saes,
    load_transcoders,
    modern_corpus,
    sae_reconstruction,
    top_activating_contexts,
    train_transcoders,
)
from interp.features._aggregate import AggregateGraph, aggregate_graphs
from interp.features._faithfulness import GRAPH_ABLATIONS, GRAPH_THRESHOLDS, GraphFaithfulness
from interp.features._generate import Steer, generate
from interp.features._generation_result import GenerationResult
from interp.features._graph import attribution_graph
from interp.features._intervene import (
    CLOSURE_TOLERANCE,
    LIVE_AGREEMENT,
    REGIMES,
    InterventionResult,
    intervene,
)
from interp.features._intervention import Intervention
from interp.features._qk import QKAttribution, qk_attribution
from interp.features._result import AttributionGraph
from interp.features._warnings import ClosureWarning, InactiveFeatureWarning, RegimeWarning

__all__ = [
    "ACTIVATIONS",
    "CLOSURE_TOLERANCE",
    "FORMATS",
    "REGIMES",
    "AttributionGraph",
    "ClosureWarning",
    "CrossLayerTranscoder",
    "DictionaryQualityWarning",
    "GenerationResult",
    "Intervention",
    "InterventionResult",
    "QKAttribution",
    "SAE",
    "SAEReconstruction",
    "SAE_SITES",
    "Steer",
    "TrainedCrossLayerTranscoder",
    "TrainedTranscoders",
    "Transcoder",
    "attribution_graph",
    "default_lr",
    "default_passes",
    "generate",
    "intervene",
    "load_saes",
    "load_transcoders",
    "qk_attribution",
    "sae_reconstruction",
    "top_activating_contexts",
    "train_transcoders",
]
__all__ += ["DictionarySet", "TrainConfig"]
__all__ += ["DictionaryEvaluation", "evaluate_dictionary", "feature_logit_effects", "held_out_corpus"]
__all__ += ["english_corpus", "modern_corpus"]
__all__ += ["AggregateGraph", "GRAPH_ABLATIONS", "GRAPH_THRESHOLDS", "GraphFaithfulness", "aggregate_graphs"]
__all__ += ["InactiveFeatureWarning", "LIVE_AGREEMENT", "RegimeWarning"]
