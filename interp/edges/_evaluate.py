"""Circuit evaluation by edge ablation, and faithfulness curves over circuit sizes (MIB's CPR and CMD).

A circuit C is a set of edges. One run of the clean input in which every reader r reads

    x_r = Σ_{w: (w→r) ∈ C} a_w(this run) + Σ_{w: (w→r) ∉ C} ã_w + biases

with ã_w the ablated value (the corrupt run's write, zero, the mean over reference prompts or a
resample) and every norm, attention pattern and MLP recomputed in that run (post-norm: each reader
replays its own copy of the stream through every Add & Norm). C = every edge is the clean run exactly;
C = ∅ is the ablated run (corrupt ablation: the corrupt run). Faithfulness (Hanna et al. 2024; MIB,
arXiv 2504.13151):

    f(C) = (M(C) − M(∅)) / (M(all) − M(∅))          on the mean metric over prompts

``faithfulness_curve`` evaluates the top-k circuits of an :class:`EdgeScores` for k ∈ {0.1%, 0.2%, 0.5%,
1%, 2%, 5%, 10%, 20%, 50%, 100%} of the edges (as MIB: n = int(k·N) edges by |score|, then pruned) and
reports the areas on a linear k axis (trapezoids): CPR = ∫ f dk (higher is better), CMD = ∫ |1 − f| dk
(0 is best).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Sequence

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._result import Result
from interp._validate import check_bool, check_choice, check_finite_float, check_int, shardable
from interp._result import faithfulness_curves
from interp.causal import ABLATIONS
from interp.engine.internal import MetricReader, clean_output
from interp.causal.internal import check_reference_spread, make_pair
from interp._result import metric_gap
from interp.edges import _select
from interp.edges._ablated import AblatedForward
from interp.edges._writes import Acts, EdgeWrites
from interp.edges._graph import CircuitGraph, circuit_graph
from interp.edges._patch import ablated_writes, check_edge_ablation
from interp.edges._scores import EdgeScores
from interp.errors import ArgumentError, ModelMismatchError
from interp.models import Model
from interp.stream.internal import require_model

__all__ = [
    "evaluate_circuit",
    "faithfulness_curve",
    "check_curve_args",
    "CircuitEvaluation",
    "FaithfulnessCurve",
    "MIB_SIZES",
    "circuit_mask",
    "check_reference_spread",
    "check_same_model",
]

_FAITH = "faithfulness values (M(C) − M(no edges)) / (M(all edges) − M(no edges))"
MIB_SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def check_same_model(result: Any, model_name: str, name: str) -> None:
    """ModelMismatchError when ``result`` names the model it was computed on (``model_name``, e.g. an EdgeCircuit's
    or EdgeScores') and that is not ``model_name``: its edges are another graph's, whose labels may exist here too
    (L0.H1 → L1.attn.q[H1] is an edge of most models) and mean something else. A result naming no model passes."""
    own = getattr(result, "model_name", "") or ""
    if not (isinstance(own, str) and own and own != model_name):
        return
    kind = type(result).__name__
    if isinstance(result, EdgeScores):
        fix = f"score the edges on {model_name!r} (interp.edge_attribution(model, ...)); if the two are one model, "
        fix += "load it under one name"
    else:
        fix = f"find the circuit on {model_name!r} (interp.edge_attribution(model, ...).circuit(...)); if the two are "
        fix += f"one model under two names, pass its edge labels ({name}=list({name}.edges))"
    raise ModelMismatchError(
        f"{name}={kind}({own!r}, …) was computed on model {own!r}, but this analysis runs model {model_name!r}: its "
        f"edges are another graph's; {fix}"
    )


def circuit_mask(graph: CircuitGraph, circuit: Any, *, name: str = "circuit") -> Tensor:
    """Bool [n_edges]: the graph's edges that are in ``circuit`` (an EdgeCircuit, an object with ``.edges``
    such as a ground-truth circuit, or a list of edge labels); a LabelError names an edge the graph lacks."""
    if circuit is None:
        raise ArgumentError(
            f"{name} is required: pass the circuit to evaluate, e.g. scores.circuit(n=200) (the 200 "
            "best edges of an EdgeScores), a circuit with .edges, or a list of edge labels; [] "
            "evaluates the empty circuit"
        )
    if isinstance(circuit, EdgeScores):
        raise ArgumentError(
            f"{name}=EdgeScores({circuit.model_name!r}, {circuit.method}) holds a score for every "
            f"edge ({len(circuit.edges):,}), not a circuit: evaluating it keeps every edge (faithfulness "
            "1 by construction). Pass scores.circuit(n=…) (the n best edges) or "
            "scores.circuit(threshold=…)"
        )
    check_same_model(circuit, graph.model_name, name)
    edges = getattr(circuit, "edges", circuit)
    if isinstance(edges, str) or not isinstance(edges, (list, tuple)):
        raise ArgumentError(
            f"{name}={circuit!r:.80} must be an EdgeCircuit (EdgeScores.circuit(...)), a circuit "
            "with .edges, or a list of edge labels such as ['L0.H3→L1.attn.k[H1]']"
        )
    keep = torch.zeros(graph.n_edges, dtype=torch.bool, device="cpu")  # host bookkeeping, like the graph
    if edges:
        keep[graph.indices(edges, name=name)] = True
    return keep


def check_curve_args(ablations: Any, sizes: Any, *, names: tuple[str, str] = ("ablations", "sizes")) -> list[float]:
    """The checked ``sizes`` as floats, after checking ``ablations`` (a non-empty list of :data:`ABLATIONS`) and
    ``sizes`` (increasing fractions in (0, 1]); ``names``: how the two arguments are named in the errors."""
    if isinstance(ablations, str) or not ablations:
        raise ArgumentError(f"{names[0]}={ablations!r} must be a non-empty list of {list(ABLATIONS)}")
    for a in ablations:
        check_choice(f"{names[0]}[]", a, ABLATIONS)
    try:
        ks = [] if isinstance(sizes, str) else [float(k) for k in sizes]
    except (TypeError, ValueError):
        ks = []
    if not ks or any(not 0 < k <= 1 for k in ks) or ks != sorted(ks):
        shown = list(sizes) if isinstance(sizes, (list, tuple)) else sizes
        raise ArgumentError(f"{names[1]}={shown!r} must be increasing fractions in (0, 1]")
    return ks


def _K(graph: CircuitGraph, keep: Tensor) -> Tensor:
    """[W, R] 1.0 where an edge exists and is ablated (not in the circuit)."""
    K = graph.mask.clone().float()
    keep = keep.to(graph.edge_writer.device)  # a score's mask is on the model's device, the graph's on its own
    K[graph.edge_writer[keep], graph.edge_reader[keep]] = 0.0
    return K


@dataclass(frozen=True, eq=False)
class CircuitEvaluation(Result):
    """The metric with a circuit's edges kept and every other edge ablated, and the two ends of the scale.

    Rows ``circuit`` (M(C)), ``all edges`` (M(all) — the clean run) and ``no edges`` (M(∅) — the ablated
    run); ``value`` the mean over prompts, ``per_prompt`` [3, n_prompts]; ``faithfulness`` =
    (M(C) − M(∅)) / (M(all) − M(∅)) of the means. Contract: ``result["circuit"]`` the circuit's mean metric.
    """

    label_column: ClassVar[str] = "run"
    default_by: ClassVar[str] = "value"
    default_absolute: ClassVar[bool] = False

    values: Tensor = field(repr=False)  # [3]: circuit, all edges, no edges
    per_prompt: Tensor = field(repr=False)  # [3, n_prompts]
    n_edges: int
    n_total: int
    ablation: str
    metric: str
    model_name: str = ""
    details: dict = field(default_factory=dict, repr=False)

    @property
    def labels(self) -> list[str]:
        return ["circuit", "all edges", "no edges"]

    @property
    def circuit(self) -> float:
        return float(self.values[0])

    @property
    def full(self) -> float:
        return float(self.values[1])

    @property
    def empty(self) -> float:
        return float(self.values[2])

    @property
    def faithfulness(self) -> float:
        """(M(C) − M(∅)) / (M(all) − M(∅)); NaN when M(all) ≈ M(∅) (:func:`interp._result.metric_gap`)."""
        return (self.circuit - self.empty) / metric_gap(self.full, self.empty)

    def _row(self, index: int) -> float:
        return float(self.values[index])

    def __repr__(self) -> str:
        return (
            f"CircuitEvaluation({self.model_name!r}: {self.n_edges:,} of {self.n_total:,} edges, {self.ablation} "
            f"ablation, {self.metric}: circuit {self.circuit:.4g}, all edges {self.full:.4g}, no edges "
            f"{self.empty:.4g}; faithfulness {self.faithfulness:.3f})"
        )

    def to_dataframe(self) -> pd.DataFrame:
        gap = metric_gap(self.full, self.empty)
        v = self.values.double()
        return pd.DataFrame(
            {
                "run": self.labels,
                "value": v.numpy(),
                "faithfulness": ((v - self.empty) / gap).numpy(),
                "n_edges": [self.n_edges, self.n_total, 0],
            }
        )

    def plot(self, **options: Any) -> Any:
        """The metric on the circuit, on all edges and on no edges (:func:`interp.plots.circuit_evaluation_figure`)."""
        from interp.plots import circuit_evaluation_figure

        return circuit_evaluation_figure(self, **options)


@dataclass(frozen=True, eq=False)
class FaithfulnessCurve(Result):
    """Faithfulness of the top-k circuits over circuit sizes, per ablation, with CPR and CMD (module docstring).

    ``sizes`` the fractions k; ``n_edges`` [n_sizes] edges kept before pruning (int(k·N)); ``kept`` [n_ablations,
    n_sizes] after; ``faithfulness`` and ``values`` (mean M(C)) [n_ablations, n_sizes]; ``full`` / ``empty``
    [n_ablations]; ``cpr`` / ``cmd`` [n_ablations]. Rows are labelled ``"{ablation}@{k}"`` (``resample@0.01``).
    """

    label_column: ClassVar[str] = "point"
    default_by: ClassVar[str] = "faithfulness"
    default_absolute: ClassVar[bool] = False

    sizes: list[float]
    ablations: list[str]
    n_edges: Tensor = field(repr=False)
    kept: Tensor = field(repr=False)
    faithfulness: Tensor = field(repr=False)
    values: Tensor = field(repr=False)
    full: Tensor = field(repr=False)
    empty: Tensor = field(repr=False)
    cpr: Tensor = field(repr=False)
    cmd: Tensor = field(repr=False)
    n_total: int
    method: str
    metric: str
    model_name: str = ""
    details: dict = field(default_factory=dict, repr=False)

    @property
    def labels(self) -> list[str]:
        return [f"{a}@{k:g}" for a in self.ablations for k in self.sizes]

    def _row(self, index: int) -> float:
        i, j = divmod(index, len(self.sizes))
        return float(self.faithfulness[i, j])

    def areas(self) -> pd.DataFrame:
        """CPR and CMD per ablation."""
        return pd.DataFrame(
            {"ablation": self.ablations, "cpr": self.cpr.double().numpy(), "cmd": self.cmd.double().numpy()}
        )

    def smallest(self, target: float = 0.8, *, ablation: Optional[str] = None) -> float:
        """The smallest size k on the grid whose circuit reaches faithfulness ≥ ``target`` (NaN if none);
        ``target`` a finite number (a faithfulness, e.g. 0.8), ``ablation`` one of the curve's (default: the first)."""
        check_finite_float("target", target)
        i = self.ablations.index(check_choice("ablation", ablation, self.ablations)) if ablation is not None else 0
        ok = [k for k, f in zip(self.sizes, self.faithfulness[i].tolist()) if f >= target]
        return min(ok) if ok else math.nan

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{a}: CPR {float(p):.3f} CMD {float(c):.3f}" for a, p, c in zip(self.ablations, self.cpr, self.cmd)
        )
        return f"FaithfulnessCurve({self.model_name!r}, {self.method} scores, {len(self.sizes)} sizes; {parts})"

    def to_dataframe(self) -> pd.DataFrame:
        rows = []
        for i, a in enumerate(self.ablations):
            for j, k in enumerate(self.sizes):
                rows.append(
                    {
                        "point": f"{a}@{k:g}",
                        "ablation": a,
                        "k": k,
                        "n_edges": int(self.n_edges[j]),
                        "kept": int(self.kept[i, j]),
                        "faithfulness": float(self.faithfulness[i, j]),
                        "value": float(self.values[i, j]),
                    }
                )
        return pd.DataFrame(rows)

    def plot(self, **options: Any) -> Any:
        """Faithfulness over the circuit size per ablation (:func:`interp.plots.circuit_faithfulness_figure`)."""
        from interp.plots import circuit_faithfulness_figure

        return circuit_faithfulness_figure(self, **options)


def _setup(model: Model, clean: Any, corrupt: Any, metric: Any, ablation: str, reference: Any):
    require_model(model)
    check_edge_ablation(ablation, reference, corrupt)
    pair = make_pair(model, clean, corrupt, metric, need_corrupt=ablation == "corrupt")
    graph = circuit_graph(model)
    return pair, graph, EdgeWrites(model, graph, pair.engine)


def _evaluator(model: Model, pair: Any, writes: EdgeWrites) -> Callable[[Optional[Acts], Tensor], Tensor]:
    """``run(abl, K)``: the metric [P] of the clean prompts with the edges K [W, R] marks (1) ablated to ``abl``."""
    bound = pair.bound
    clean_out = None
    if bound.needs_clean:
        clean_out = clean_output(model, bound, pair.engine.run(pair.clean.tokens, pair.clean.attention_mask))
    read, forward = MetricReader(model, bound, clean_out), AblatedForward(writes)
    t, m = pair.clean.tokens, pair.clean.attention_mask
    prompt = torch.arange(t.shape[0], device=model.device)
    return lambda abl, K: forward(t, m, abl, K, read, prompt)


@shardable
def evaluate_circuit(
    model: Model,
    clean: Any,
    corrupt: Any = None,
    circuit: Any = None,
    *,
    metric: Any,
    ablation: str = "corrupt",
    reference: Any = None,
    seed: int = 0,
    cluster: Any = None,
    out: Any = None,
) -> CircuitEvaluation:
    """M(circuit), M(all edges) and M(no edges) with out-of-circuit edges ablated (see the module docstring).

    ``circuit`` (required): an :class:`EdgeCircuit` (``scores.circuit(n=…)``), a circuit with ``.edges`` (e.g.
    a ground-truth circuit) or a list of edge labels (``[]``: the empty circuit). An :class:`EdgeScores` itself
    is refused (it lists every edge). ``ablation``: "corrupt" (needs ``corrupt``), "zero", "mean" or "resample" (from
    ``reference``, by default the corrupt prompts). ``seed``: the resample draw. ``cluster``: None (in process)
    or an ``interp.RayCluster`` (prompts sharded over its workers, merged exactly); ``out``: a folder keeping each
    finished shard for resume (docs/scaling.md).
    """
    seed = check_int("seed", seed)
    pair, graph, writes = _setup(model, clean, corrupt, metric, ablation, reference)
    keep = circuit_mask(graph, circuit)
    check_reference_spread(model, pair, [ablation], reference, arg="ablation")
    abl = ablated_writes(model, pair, writes, ablation, reference, seed)
    evaluate = _evaluator(model, pair, writes)
    runs = [
        evaluate(abl, _K(graph, keep)),
        evaluate(abl, torch.zeros_like(graph.mask, dtype=torch.float32)),
        evaluate(abl, graph.mask.float()),
    ]
    per = torch.stack(runs).double()
    metric_gap(
        float(per[1].mean()),
        float(per[2].mean()),
        warn=f"evaluate_circuit(ablation={ablation!r})",
        names=("M(all edges)", "M(no edges)"),
        undefined=_FAITH,
    )
    return CircuitEvaluation(
        values=per.mean(1),
        per_prompt=per,
        n_edges=int(keep.sum()),
        n_total=graph.n_edges,
        ablation=ablation,
        metric=pair.bound.name,
        model_name=model.name,
        details={"seed": seed},
    )


@shardable
def faithfulness_curve(
    model: Model,
    clean: Any,
    corrupt: Any,
    scores: EdgeScores,
    *,
    metric: Any,
    ablations: Sequence[str] = ("corrupt", "zero", "mean", "resample"),
    reference: Any = None,
    sizes: Sequence[float] = MIB_SIZES,
    absolute: bool = True,
    prune: bool = True,
    seed: int = 0,
    progress: bool = True,
    cluster: Any = None,
    out: Any = None,
) -> FaithfulnessCurve:
    """Faithfulness of the top-k circuits of ``scores`` for each k in ``sizes`` and each ablation, with CPR/CMD.

    ``ablations``: any of "corrupt" (the counterfactual ablation of MIB's circuit track: each out-of-circuit
    edge carries the corrupt prompt's value; first by default, the one :meth:`FaithfulnessCurve.smallest`
    reads), "zero", "mean", "resample". ``reference``: the prompts mean and resample ablations draw from
    (default: the corrupt prompts — with a single prompt pair both are then the corrupt ablation, and an
    :class:`interp.AblationWarning` says so).
    ``absolute``: rank by |score| (default) or, when False, by the signed score (the edges that support the
    metric most: MIB's signed ranking, whose metric is a loss). ``cluster``: None (in process) or an
    ``interp.RayCluster`` (prompts sharded over its workers; the means behind each point merged prompt-weighted,
    faithfulness, CPR and CMD recomputed from them); ``out``: a folder keeping each finished shard for resume
    (docs/scaling.md).
    """
    # 1. the inputs checked (a cluster runs this call per shard of the prompt pairs)
    if not isinstance(scores, EdgeScores):
        raise ArgumentError(f"scores={type(scores).__name__} must be the EdgeScores of interp.edge_attribution")
    check_bool("absolute", absolute)
    check_bool("prune", prune)
    check_bool("progress", progress)
    ks = check_curve_args(ablations, sizes)
    if "corrupt" in ablations and corrupt is None:
        raise ArgumentError(
            f"ablations={list(ablations)!r} includes 'corrupt' but corrupt=None: pass the corrupt "
            "prompts, or leave 'corrupt' out (e.g. ablations=('zero',))"
        )

    # 2. the clean and corrupt batches (the metric bound to them), the graph the scores are for
    check_same_model(scores, model.name, "scores")
    pair, graph, writes = _setup(model, clean, corrupt, metric, ablations[0], None)
    if list(scores.edges) != list(graph.edges):
        raise ArgumentError(
            f"scores are for another graph ({len(scores.edges)} edges of {scores.model_name!r}); "
            f"{model.name!r} has {graph.n_edges}"
        )
    check_reference_spread(model, pair, ablations, reference)

    # 3. the circuits: per size k the int(k·N) best edges by (|)score(|), pruned where asked
    N = graph.n_edges
    n_edges = [int(k * N) for k in ks]
    masks = [_top_circuit(graph, scores, n, absolute, prune) for n in n_edges]

    # 4. the metric of the clean run (every edge), and per ablation of no edge and of each circuit
    evaluate = _evaluator(model, pair, writes)
    full = evaluate(None, torch.zeros_like(graph.mask, dtype=torch.float32)).double().mean()
    V, empty = _curve_points(
        model, pair, writes, graph, evaluate, masks, full.device, ablations, reference, seed, progress
    )

    # 5. the faithfulness, its areas and the result (one curve per ablation)
    dev = full.device  # the result's tensors on the model's device
    F, cpr, cmd = faithfulness_curves(
        V,
        full.expand(len(ablations)),
        empty,
        torch.tensor(ks, dtype=torch.float64, device=dev),
        warn=[f"faithfulness_curve, ablation {a!r}" for a in ablations],
        names=("M(all edges)", "M(no edges)"),
        undefined=_FAITH,
    )
    return FaithfulnessCurve(
        sizes=ks,
        ablations=list(ablations),
        n_edges=torch.tensor(n_edges, device=dev),
        kept=torch.tensor([[int(k.sum()) for k in masks]] * len(ablations), device=dev),
        faithfulness=F,
        values=V,
        full=full.repeat(len(ablations)),
        empty=empty,
        cpr=cpr,
        cmd=cmd,
        n_total=N,
        method=scores.method,
        metric=pair.bound.name,
        model_name=model.name,
        details={
            "absolute": absolute,
            "prune": prune,
            "seed": seed,
            "reference": "given" if reference is not None else "the corrupt prompts",
        },
    )


def _top_circuit(graph: CircuitGraph, scores: EdgeScores, n: int, absolute: bool, prune: bool) -> Tensor:
    """Bool [n_edges]: the ``n`` edges of largest score (|score| when ``absolute``), with ``prune`` pruned (edges
    from unfed writers and into unproductive readers removed)."""
    keep = _select.top_n(scores.scores, n, absolute=absolute)
    return _select.prune(graph, keep) if prune else keep


def _curve_points(
    model: Model,
    pair: Any,
    writes: EdgeWrites,
    graph: CircuitGraph,
    evaluate: Callable[[Optional[Acts], Tensor], Tensor],
    masks: list[Tensor],
    dev: torch.device,
    ablations: Sequence[str],
    reference: Any,
    seed: int,
    progress: bool,
) -> tuple[Tensor, Tensor]:
    """(mean metric V [n_ablations, n_sizes], M(no edges) [n_ablations], on ``dev``): per ablation the run with
    every edge ablated, then each circuit's."""
    V = torch.zeros(len(ablations), len(masks), dtype=torch.float64, device=dev)
    empty = torch.zeros(len(ablations), dtype=torch.float64, device=dev)
    bar = tqdm(total=len(ablations) * (len(masks) + 1), desc="faithfulness_curve", unit="run", disable=not progress)
    try:
        for i, a in enumerate(ablations):
            if a == "corrupt" and pair.corrupt is None:
                raise ArgumentError("ablations includes 'corrupt' but corrupt=None")
            ref = reference if a in ("mean", "resample") else None
            abl = ablated_writes(model, pair, writes, a, ref, seed)
            empty[i] = evaluate(abl, graph.mask.float()).double().mean()
            bar.update(1)
            for j, keep in enumerate(masks):
                V[i, j] = evaluate(abl, _K(graph, keep)).double().mean()
                bar.update(1)
    finally:
        bar.close()
    return V, empty
