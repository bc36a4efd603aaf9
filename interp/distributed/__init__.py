"""Sharded sweeps on Ray: the dataset-level functions run on prompt shards in Ray actors and merged exactly.

``cluster=interp.RayCluster(workers=N)`` (a local cluster) or ``interp.RayCluster(address=...)`` (an existing
one) on :func:`interp.attribute_logits`, :func:`interp.patch`, :func:`interp.effects`,
:func:`interp.attribution_patch`, :func:`interp.edge_attribution`, :func:`interp.evaluate_circuit`,
:func:`interp.faithfulness_curve` and :func:`interp.features.aggregate_graphs`;
``out=DIR`` keeps each finished shard so a rerun computes only the missing ones. Ray is an optional dependency
(``interp[distributed]``), imported only when a cluster is made. See docs/scaling.md.
"""

from interp.distributed._cluster import RayCluster

__all__ = [
    "RayCluster",
]
