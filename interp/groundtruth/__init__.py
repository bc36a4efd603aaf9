"""Ground truth for circuit discovery: models whose circuits are known by construction.

* :func:`compile_program` compiles a RASP program (``reverse``, ``frac_prevs``, ``sort``, ``hist``)
  with tracr and loads it as an interp Model; :func:`tracr_circuit` reads its true edge set off the
  weights and tracr's residual labels (:mod:`interp.groundtruth._edges` states the rule).
* :func:`induction_circuit` finds the previous-token and induction heads of an attention-only toy
  from their attention patterns and returns the induction circuit's edges.

Compiling needs the optional extra (``pip install 'interp[groundtruth]'``); tracr and jax are
imported lazily by :func:`compile_program` only, never by ``import interp``.
"""

from interp.groundtruth._edges import DEFAULT_IGNORED, TrueCircuit, edges_from_residual_labels, tracr_circuit
from interp.groundtruth._induction import induction_circuit, induction_scores
from interp.groundtruth._programs import PROGRAMS, ProgramSpec, TracrProgram, compile_program, program_names

__all__ = [
    "DEFAULT_IGNORED", "PROGRAMS", "ProgramSpec", "TracrProgram", "TrueCircuit", "compile_program",
    "edges_from_residual_labels", "induction_circuit", "induction_scores", "program_names", "tracr_circuit",
]
