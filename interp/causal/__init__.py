"""Causal effects: metrics, activation patching, direct/indirect effects, path patching, attribution
patching, the logit lens.

Every analysis here runs patched forward passes and reads one metric per prompt
(:mod:`interp.causal._metrics`); results follow the one result contract (:mod:`interp._result`).
"""

from interp.causal._metrics import KL, CustomMetric, Direction, Logit, LogitDiff, LogProb, Metric, Prob, readout
from interp.causal._atp import attribution_patch
from interp.causal._effects import effects
from interp.causal._patch import ABLATIONS, patch
from interp.causal._lens import LogitLens, logit_lens
from interp.causal._path import path_patch
from interp.causal._result import Effects, PatchResult

__all__ = [
    "ABLATIONS",
    "CustomMetric",
    "Direction",
    "Effects",
    "KL",
    "Logit",
    "LogitDiff",
    "LogitLens",
    "LogProb",
    "Metric",
    "PatchResult",
    "Prob",
    "attribution_patch",
    "effects",
    "logit_lens",
    "patch",
    "path_patch",
    "readout",
]
