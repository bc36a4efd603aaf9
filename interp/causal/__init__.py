"""Causal effects: metrics, activation patching, direct/indirect effects, path patching, attribution
patching, the logit lens.

Every analysis here runs patched forward passes and reads one metric per prompt
(:mod:`interp.causal._metrics`); results follow the one result contract (:mod:`interp._result`).
"""

from interp.causal._metrics import (
    KL,
    BoundMetric,
    CustomMetric,
    Direction,
    Logit,
    LogitDiff,
    LogProb,
    Metric,
    Prob,
    as_metric,
    final_norm,
    readout,
)
from interp.causal._common import (
    MetricReader,
    baselines,
    check_reference_spread,
    clean_output,
    make_pair,
    metric_of,
    reference_acts,
)
from interp.causal._atp import attribution_patch
from interp.causal._effects import effects
from interp.causal._patch import ABLATIONS, default_batch_size, patch, shared_prefix
from interp.causal._lens import LogitLens, logit_lens
from interp.causal._path import path_patch
from interp.causal._result import Effects, PatchResult, metric_gap, patch_result

__all__ = [
    "ABLATIONS",
    "BoundMetric",
    "CustomMetric",
    "Direction",
    "Effects",
    "KL",
    "Logit",
    "LogitDiff",
    "LogitLens",
    "LogProb",
    "Metric",
    "MetricReader",
    "PatchResult",
    "Prob",
    "as_metric",
    "attribution_patch",
    "baselines",
    "check_reference_spread",
    "clean_output",
    "default_batch_size",
    "effects",
    "final_norm",
    "logit_lens",
    "make_pair",
    "metric_gap",
    "metric_of",
    "patch",
    "patch_result",
    "path_patch",
    "readout",
    "reference_acts",
    "shared_prefix",
]
