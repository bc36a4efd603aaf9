"""Plotly figure builders for interp results, and export to html/png/svg/pdf/json.

Every builder returns a plotly ``go.Figure`` (never shows it) whose hover text names the term,
its value and the tokens involved. Figures are built from results (traces, decompositions,
attributions, attention patterns, circuit scores), read by their attributes: this package never
runs a model and imports no analysis package. The reports that run analyses and compose these
figures are in :mod:`interp.reports`.
"""

from interp.plots._attention import attention_pattern_figure
from interp.plots._attention_view import AttentionView, attention_view
from interp.plots._attribution import attribution_heatmap, attribution_waterfall
from interp.plots._causal import effects_figure, patch_figure
from interp.plots._circuit_evaluation import circuit_evaluation_figure, circuit_faithfulness_figure
from interp.plots._circuit_graph import CircuitGraphOptions, circuit_graph_figure
from interp.plots._circuits import copying_score_map, ov_eigenvalue_figure, top_token_table
from interp.plots._decomposition import decomposition_figure
from interp.plots._dictionary import dictionary_density_figure, dictionary_evaluation_figure
from interp.plots._export import Exporter, export
from interp.plots._faithfulness import graph_faithfulness_figure
from interp.plots._feature_graph import FeatureGraphView, feature_graph_view
from interp.plots._feature_results import (
    aggregate_graph_figure,
    attribution_graph_figure,
    generation_figure,
    intervention_figure,
    qk_attribution_figure,
)
from interp.plots._graph import composition_graph_figure
from interp.plots._lens import logit_lens_figure
from interp.plots._page import Page
from interp.plots._predict import predictions_figure
from interp.plots._roc import edge_roc_figure
from interp.plots._scores import (
    composition_score_map,
    erasure_figure,
    head_score_map,
    path_expansion_figure,
    privileged_basis_figure,
    self_rank_histogram,
    subspace_overlap_map,
    virtual_weight_map,
)
from interp.plots._sources import head_source_heatmap, source_ov_figure
from interp.plots._stream import residual_stream_figure

__all__ = [
    "AttentionView",
    "CircuitGraphOptions",
    "Exporter",
    "FeatureGraphView",
    "Page",
    "aggregate_graph_figure",
    "attention_pattern_figure",
    "attention_view",
    "attribution_graph_figure",
    "attribution_heatmap",
    "attribution_waterfall",
    "circuit_evaluation_figure",
    "circuit_faithfulness_figure",
    "circuit_graph_figure",
    "composition_graph_figure",
    "composition_score_map",
    "copying_score_map",
    "decomposition_figure",
    "dictionary_density_figure",
    "dictionary_evaluation_figure",
    "edge_roc_figure",
    "effects_figure",
    "erasure_figure",
    "export",
    "feature_graph_view",
    "generation_figure",
    "graph_faithfulness_figure",
    "head_score_map",
    "head_source_heatmap",
    "intervention_figure",
    "logit_lens_figure",
    "ov_eigenvalue_figure",
    "patch_figure",
    "path_expansion_figure",
    "predictions_figure",
    "privileged_basis_figure",
    "qk_attribution_figure",
    "residual_stream_figure",
    "self_rank_histogram",
    "source_ov_figure",
    "subspace_overlap_map",
    "top_token_table",
    "virtual_weight_map",
]
