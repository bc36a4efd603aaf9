"""Feature dictionaries and attribution graphs: per-layer transcoders (load circuit-tracer's format) and
the exact attribution graph of a prompt over them (error nodes make the replacement model exact)."""

from interp.features._graph import attribution_graph
from interp.features._result import AttributionGraph
from interp.features._transcoder import ACTIVATIONS, Transcoder, load_transcoders

__all__ = ["ACTIVATIONS", "AttributionGraph", "Transcoder", "attribution_graph", "load_transcoders"]
