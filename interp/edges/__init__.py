"""Edge-level circuits: the circuit graph, EAP / EAP-IG on every edge, exact edge patching, circuit
evaluation by edge ablation, faithfulness curves, and the tasks they are run on.

An edge joins a writer (an embedding, a head's output, an MLP's output) to a later reader (a head's q,
a KV head's k or v, an MLP's input, the metric's read). Every analysis here works on all four block
families (pre-norm LayerNorm / RMSNorm with GQA, parallel, post-norm) through a weights-level forward;
results follow the one result contract (:mod:`interp._result`). The equations are in docs/math.md.
"""

from interp.edges._attribution import COMPLETENESS_TOLERANCE, edge_attribution
from interp.edges._evaluate import MIB_SIZES, CircuitEvaluation, FaithfulnessCurve, evaluate_circuit, faithfulness_curve
from interp.edges._graph import CircuitGraph, circuit_graph
from interp.edges._patch import edge_patch
from interp.edges._scores import EdgeCircuit, EdgeScores
from interp.edges._tasks import TASKS, Task, load_task, read_pairs

__all__ = [
    "COMPLETENESS_TOLERANCE",
    "CircuitEvaluation",
    "CircuitGraph",
    "EdgeCircuit",
    "EdgeScores",
    "FaithfulnessCurve",
    "MIB_SIZES",
    "TASKS",
    "Task",
    "circuit_graph",
    "edge_attribution",
    "edge_patch",
    "evaluate_circuit",
    "faithfulness_curve",
    "load_task",
    "read_pairs",
]
