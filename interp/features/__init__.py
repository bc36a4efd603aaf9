"""Feature dictionaries and attribution graphs: per-layer transcoders and residual-stream SAEs (load circuit-tracer's,
SAELens's, sparsify's and dictionary_learning's formats; an SAE's reconstruction of the real stream, FVU and L0);
the exact attribution graph of a prompt over transcoders (error nodes make the replacement model exact);
interventions on features in the replacement model, and during generation (features and steering vectors); QK
attribution of a head's score to the graph's nodes."""

from interp.features._contexts import top_activating_contexts
from interp.features._generate import GenerationResult, Steer, generate
from interp.features._graph import attribution_graph
from interp.features._intervene import (
    CLOSURE_TOLERANCE,
    LIVE_AGREEMENT,
    REGIMES,
    Intervention,
    InterventionResult,
    intervene,
)
from interp.features._qk import QKAttribution, qk_attribution
from interp.features._result import AttributionGraph
from interp.features._train import (
    TrainedCrossLayerTranscoder,
    TrainedTranscoders,
    default_lr,
    default_passes,
    train_transcoders,
)
from interp.features._formats import FORMATS, load_saes, load_transcoders
from interp.features._sae import SAE, SAE_SITES, SAEReconstruction, sae_reconstruction
from interp.features._transcoder import ACTIVATIONS, CrossLayerTranscoder, Transcoder
from interp.features._warnings import (
    ClosureWarning,
    DictionaryQualityWarning,
    InactiveFeatureWarning,
    RegimeWarning,
)
from interp.features._aggregate import AggregateGraph, aggregate_graphs
from interp.features._faithfulness import GRAPH_ABLATIONS, GRAPH_THRESHOLDS, GraphFaithfulness
from interp.features._evaluate import DictionaryEvaluation, evaluate_dictionary
from interp.features._logit_effects import feature_logit_effects
from interp.features._corpus import english_corpus, held_out_corpus, modern_corpus

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
__all__ += ["DictionaryEvaluation", "evaluate_dictionary", "feature_logit_effects", "held_out_corpus"]
__all__ += ["english_corpus", "modern_corpus"]
__all__ += ["AggregateGraph", "GRAPH_ABLATIONS", "GRAPH_THRESHOLDS", "GraphFaithfulness", "aggregate_graphs"]
__all__ += ["InactiveFeatureWarning", "LIVE_AGREEMENT", "RegimeWarning"]
