"""Plotly figure builders for interp results, export to html/png/svg/pdf/json, and the report.

Every builder returns a plotly ``go.Figure`` (never shows it) whose hover text names the term,
its value and the tokens involved. Figures are built from results (traces, decompositions,
attributions, circuit scores), never from a model, except :func:`attention_patterns`, which
runs one hooked forward pass to capture patterns.
"""

from interp.plots._attention import AttentionPatterns, attention_pattern_figure, attention_patterns
from interp.plots._attribution import attribution_heatmap, attribution_waterfall
from interp.plots._circuits import copying_score_map, ov_eigenvalue_figure, top_token_table
from interp.plots._decomposition import decomposition_figure
from interp.plots._export import Exporter, export
from interp.plots._graph import CompositionGraph, composition_edges, composition_graph, composition_graph_json
from interp.plots._report import circuits_report, report
from interp.plots._stream import residual_stream_figure

__all__ = [
    "AttentionPatterns",
    "CompositionGraph",
    "Exporter",
    "attention_pattern_figure",
    "attention_patterns",
    "attribution_heatmap",
    "attribution_waterfall",
    "circuits_report",
    "composition_edges",
    "composition_graph",
    "composition_graph_json",
    "copying_score_map",
    "decomposition_figure",
    "export",
    "ov_eigenvalue_figure",
    "report",
    "residual_stream_figure",
    "top_token_table",
]
