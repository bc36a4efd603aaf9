"""Circuits from the weights: OV/QK, A ⊗ W_O W_V, virtual weights, composition, copying, rotation.

Pure weight maths over a Model's frozen weights (no hooks, no forward passes — except
``privileged_basis_report``, which needs activations, and ``head_operator``, which takes a
pattern you give it). Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits";
docs/math.md §6–12. Conventions:

* transformer-lens's row-vector layout (x W), its ``FactoredMatrix`` for every product;
* GQA: query head h reads KV head h // (n_heads / n_kv_heads);
* ``fold_norms=True`` (default): the gain of the norm before each read is folded into the read
  weight and LayerNorm models' writes are centred — transformer-lens's HookedTransformer /
  compatibility-mode weights; ``fold_norms=False``: the raw HF weights (see ``_common``).
"""

from interp.circuits._basis import PrivilegedBasisReport, privileged_basis_report
from interp.circuits._composition import CompositionScores, composition_scores
from interp.circuits._copying import HeadScores, OVDiagonalStats, copying_scores, ov_diagonal_stats
from interp.circuits._embedding import effective_embedding
from interp.circuits._factored import Circuit
from interp.circuits._graph import CompositionGraph, composition_edges, composition_graph, composition_graph_json
from interp.circuits._head_operator import HeadOperator, head_operator
from interp.circuits._labels import read_labels, write_labels
from interp.circuits._ov_qk import ov_circuit, qk_circuit
from interp.circuits._path_expansion import PathExpansion, path_expansion
from interp.circuits._rotation import random_rotation, rotate_residual
from interp.circuits._subspace import ErasureTable, SubspaceOverlap, erasure_candidates, write_subspace_overlap
from interp.circuits._virtual import VirtualWeightNorms, virtual_weight_norms, virtual_weights

__all__ = [
    "Circuit",
    "CompositionGraph",
    "CompositionScores",
    "ErasureTable",
    "HeadOperator",
    "HeadScores",
    "OVDiagonalStats",
    "PathExpansion",
    "PrivilegedBasisReport",
    "SubspaceOverlap",
    "VirtualWeightNorms",
    "composition_edges",
    "composition_graph",
    "composition_graph_json",
    "composition_scores",
    "copying_scores",
    "effective_embedding",
    "erasure_candidates",
    "head_operator",
    "ov_circuit",
    "ov_diagonal_stats",
    "path_expansion",
    "privileged_basis_report",
    "qk_circuit",
    "random_rotation",
    "read_labels",
    "rotate_residual",
    "virtual_weight_norms",
    "virtual_weights",
    "write_labels",
    "write_subspace_overlap",
]
