"""Checking circuit-discovery methods against circuits known by construction: edge scores and ROC AUC.

For a :class:`~interp.groundtruth.DiscoveryTask` (a model, its true circuit, prompts grouped by length),
a method and an ablation, every edge w → r of the model's circuit graph gets one number, the mean over
the task's prompts of the absolute effect the method assigns to ablating that one edge:

    s(w → r) = (1/P) Σ_p | Δ_p(w → r) |

    Δ_p = M_p(clean, only r sees ã_w) − M_p(clean)                               "edge-patching" (exact)
    Δ_p = (ã_w − a_w) · ∂M_p/∂x_r |clean                                          "eap"
    Δ_p = (ã_w − a_w) · (1/m) Σ_{k=1..m} ∂M_p/∂x_r |(α = k/m on ablated → clean)   "eap-ig", "eap-ig-act"

with ã_w the ablated write: zero, the mean over the task's inputs of that length at each position
("mean"), or the write on the input's resample partner ("resample"). EAP-IG's path moves the token
embedding only ("eap-ig", Hanna et al.'s EAP-IG-inputs: e = ẽ + α(e − ẽ)) or every write at once
("eap-ig-act": a_w ← α a_w + (1 − α) ã_w, with ã_w − a_w taken at each point; the path zero ablation
implies, since it also removes the positional embedding). Scores below ``NOISE`` = 1e-5 of
the largest are set to 0: float32 cannot order them (a saturated softmax's gradient, 1e-8, against an
exact 0 would otherwise decide a rank). The edges are then ranked by s and compared with the truth by
ROC AUC (:func:`interp.groundtruth.roc_auc`).

No ablation can reveal an edge along which it changes nothing. An ablation that keeps the position
(mean per position, resample from an input of the same length) leaves every positional write as it is,
and every write that depends on the length only (reverse's length and opp_idx); zero ablation removes
the constant channels too (tracr's ``one`` and BOS dimensions, which the truth ignores), so the edges
through them matter. Besides the AUC against the truth, each ranking reports it against the *testable*
truth of its ablation, a property of the ablation and the weights, never of a method:

    testable(w → r) ⇔ w → r is true (constant channels counted)  and
                      ∃ prompt, position: (ã_w − a_w) W_r ≠ 0        (what r reads from w changes)

with W_r the reader's input matrix (W_Q^h, W_K^h, W_V^h, W_in, W_U; the models here have no norms).

"acdc" is the greedy search of Conmy et al. 2023 (section 3; ACDC's ``TLACDCExperiment``): visit the
readers from the metric backwards (reverse program order) and, for each reader, its incoming edges from
the latest writer to the earliest (a reader whose component has lost every edge out is left out of the
circuit with all its edges, as ACDC drops such nodes); ablate the edge on top of every edge already removed, and keep it
removed if the distance D(C) = (1/P) Σ_p |M_p(C) − M_p(clean)| grows by less than τ·D(∅) (τ relative to
the distance of the fully ablated model, so one grid fits every model; D by circuit evaluation, every
reader's input recomputed as in :func:`interp.evaluate_circuit`). It returns a set,
not a ranking: its ROC is traced by sweeping τ (each τ one (FPR, TPR) point; the curve closed at (0, 0)
and (1, 1) and integrated by trapezoids), as ACDC's own AUCs are.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result
from interp._validate import check_choice, check_positive_int
from interp.errors import ArgumentError
from interp.groundtruth._auc import roc_auc
from interp.groundtruth._tasks import DiscoveryTask, PromptGroup
from interp.labels import Head, Mlp
from interp.models import Model

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "METHODS",
    "RANKING_ABLATIONS",
    "EdgeRanking",
    "edge_ranking",
    "discovery_table",
    "testable_edges",
    "ACDC_TAUS",
]

log = logging.getLogger(__name__)

METHODS = ("eap", "eap-ig", "eap-ig-act", "edge-patching", "acdc")
#: the ablations edge_ranking takes (interp.causal.ABLATIONS, the patching ablations, also has "corrupt")
RANKING_ABLATIONS = ("zero", "mean", "resample")
NOISE = 1e-5
ACDC_TAUS = tuple(float(10.0**e) for e in torch.linspace(-4, 0, 9, device="cpu").tolist())  # × D(∅)


@dataclass(frozen=True, eq=False)
class EdgeRanking(Result):
    """One method's scores of every edge of a task's model, and how they rank the true edges.

    ``scores`` [n_edges] (graph order; for "acdc" the largest τ at which the edge survived, 0 if never);
    ``signed`` [n_edges] the mean signed effect Δ (None for "acdc"); ``truth`` [n_edges] bool; ``auc`` the
    edge ROC AUC (for "acdc" from the τ sweep's ROC points); ``testable`` [n_edges] the true edges this
    ablation can reveal and ``auc_testable`` the AUC against them (module docstring; NaN when there are
    none). ``ranking["L0.H3→L1.attn.k[H0]"]`` is that edge's score; ``top`` ranks by score; ``plot()``
    is the ROC curve.
    """

    label_column: ClassVar[str] = "edge"
    default_by: ClassVar[str] = "score"
    default_absolute: ClassVar[bool] = False

    task: str
    method: str
    ablation: str
    edges: tuple[str, ...] = field(repr=False)
    scores: Tensor = field(repr=False)
    truth: Tensor = field(repr=False)
    auc: float
    testable: Tensor = field(repr=False)
    auc_testable: float
    seconds: float
    signed: Optional[Tensor] = field(default=None, repr=False)
    details: dict = field(default_factory=dict, repr=False)

    @property
    def labels(self) -> list[str]:
        return list(self.edges)

    def _row(self, index: int) -> float:
        return float(self.scores[index])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per edge in graph order: score, signed effect (NaN for "acdc"), true, testable."""
        signed = self.signed.double().numpy() if self.signed is not None else float("nan")
        return pd.DataFrame(
            {
                "edge": list(self.edges),
                "score": self.scores.double().numpy(),
                "signed": signed,
                "true": self.truth.numpy(),
                "testable": self.testable.numpy(),
            }
        )

    def plot(self) -> go.Figure:
        """The ROC curve of the ranking against the truth (:func:`interp.plots.edge_roc_figure`)."""
        from interp.plots import edge_roc_figure

        return edge_roc_figure(self)

    def missed(self, *, testable: bool = False) -> list[str]:
        """True (or testable) edges ranked at or below the best false one (what keeps the AUC below 1)."""
        s = self.scores.double()
        t = self.testable if testable else self.truth
        best_false = float(s[~t].max()) if bool((~t).any()) else float("-inf")
        return [e for e, v, x in zip(self.edges, s.tolist(), t.tolist()) if x and v <= best_false]

    def outranking(self, *, testable: bool = False) -> list[str]:
        """False edges with a nonzero score ranked at or above the worst true (or testable) one."""
        s = self.scores.double()
        t = self.testable if testable else self.truth
        worst = float(s[t].min()) if bool(t.any()) else float("inf")
        return [e for e, v, x in zip(self.edges, s.tolist(), t.tolist()) if not x and v >= worst and v > 0]


def _ablation_args(group: PromptGroup, ablation: str) -> dict[str, Any]:
    """edge_patch / evaluate_circuit arguments for one group: resample = the partner prompts as corrupt."""
    if ablation == "resample":
        return {"corrupt": group.corrupt, "ablation": "corrupt"}
    if ablation == "mean":
        return {"corrupt": None, "ablation": "mean", "reference": group.clean}
    return {"corrupt": None, "ablation": "zero"}


def _eap(model: Model, group: PromptGroup, ablation: str, steps: int, ig_at: str = "inputs") -> Tensor:
    """Per-prompt EAP / EAP-IG effects [n_edges, P] with the ablated writes of ``ablation`` (``ig_at``: the
    path of "inputs" or "activations", as :func:`interp.edge_attribution`)."""
    from interp.engine.internal import MetricReader
    from interp.causal.internal import make_pair
    from interp.edges.internal import EdgeScorer, EdgeWrites, ReaderGradients, ablated_writes
    from interp.edges import circuit_graph

    args = _ablation_args(group, ablation)
    pair = make_pair(model, group.clean, args["corrupt"], group.metric, need_corrupt=ablation == "resample")
    graph = circuit_graph(model)
    fw = EdgeWrites(model, graph, pair.engine)
    gradients, scorer = ReaderGradients(fw), EdgeScorer(fw)
    if fw.post:
        raise ArgumentError(f"model {model.name!r} is post-norm; the ground-truth models are norm-free or pre-norm")
    abl = ablated_writes(model, pair, fw, args["ablation"], args.get("reference"), 0)  # None: zero
    P = pair.clean.tokens.shape[0]
    read, prompt = MetricReader(model, pair.bound), torch.arange(P, device=model.device)
    ct, cm = pair.clean.tokens, pair.clean.attention_mask
    every = ig_at == "activations"
    G_sum: Optional[Tensor] = None
    S: Optional[Tensor] = None
    dA: Optional[Tensor] = None
    for k in range(steps, 0, -1):  # α = 1 (the clean run) first: its writes give ΔA
        gp = gradients(
            ct, cm, read, prompt, mix=None if k == steps else (abl, k / steps, ig_at), keep=k == steps or every
        )
        if k == steps or every:
            dA = fw.delta(abl, gp.acts)  # type: ignore[arg-type]  # ã_w − a_w [P, W, T, d]
        if every:  # ΔA changes along the path: one product per point
            S_k = scorer(dA, gp.G, {}, frozen=False)  # type: ignore[arg-type]
            S = S_k if S is None else S.add_(S_k)
        else:
            G_sum = gp.G if G_sum is None else G_sum.add_(gp.G)
    if not every:
        S = scorer(dA, G_sum, {}, frozen=False)  # type: ignore[arg-type]
    if S is None:  # steps ≥ 1 always sets it
        raise ArgumentError(f"steps={steps!r} must be a positive int")
    S = S / steps  # [P, W, R]
    return S[:, graph.edge_writer.to(S.device), graph.edge_reader.to(S.device)].T.double()  # [E, P]


def _reader_matrix(model: Any, kind: str, layer: int, head: int) -> Tensor:
    """The matrix a reader reads the residual through: [d_model, k]."""
    w = model.weights
    return {
        "q": lambda: w.W_Q[layer, head],
        "k": lambda: w.W_K[layer, head],
        "v": lambda: w.W_V[layer, head],
        "mlp": lambda: w.W_in[layer],
        "out": lambda: w.W_U,
    }[kind]()


def testable_edges(task: DiscoveryTask, ablation: str, *, atol: float = 1e-5) -> Tensor:
    """Bool [n_edges]: the true edges (constant channels counted) along which ``ablation`` changes what the
    reader reads on some prompt of ``task`` (module docstring)."""
    from interp.causal.internal import make_pair
    from interp.edges.internal import Acts, EdgeWrites, ablated_writes
    from interp.edges import circuit_graph

    check_choice("ablation", ablation, RANKING_ABLATIONS)
    model = task.model
    if model.arch.norm != "none":
        raise ArgumentError(f"model {model.name!r} has norms; testable edges are defined for norm-free models")
    graph = circuit_graph(model)
    changes = torch.zeros(len(graph.writers), len(graph.readers), dtype=torch.bool, device=graph.mask.device)
    for g in task.groups:
        args = _ablation_args(g, ablation)
        pair = make_pair(model, g.clean, args["corrupt"], g.metric, need_corrupt=ablation == "resample")
        fw = EdgeWrites(model, graph, pair.engine)
        a = Acts.of(pair.engine.run(pair.clean.tokens, pair.clean.attention_mask, capture={"z", "mlp_out"}))
        abl = ablated_writes(model, pair, fw, args["ablation"], args.get("reference"), 0)
        D = fw.delta(abl, a)  # ã_w − a_w [P, W, T, d]
        for r, ri in enumerate(graph.reader_info):
            seen = (D @ _reader_matrix(model, ri.kind, ri.layer, ri.head)).abs().amax(dim=(0, 2, 3)) > atol  # [W]
            changes[:, r] |= seen.cpu()
    truth = (task.connected or task.truth).truth(graph.edges)
    return truth & changes[graph.edge_writer, graph.edge_reader]


def _auc_or_nan(scores: Tensor, truth: Tensor) -> float:
    return roc_auc(scores, truth) if bool(truth.any()) and bool((~truth).any()) else float("nan")


def _patching(model: Model, group: PromptGroup, ablation: str, edges: Sequence[str]) -> Tensor:
    """Per-prompt exact edge-patching effects [n_edges, P]."""
    from interp.edges import edge_patch

    args = _ablation_args(group, ablation)
    corrupt = args.pop("corrupt")
    res = edge_patch(model, group.clean, corrupt, list(edges), metric=group.metric, progress=False, **args)
    return (res.per_prompt - res.clean_per_prompt[None]).double()


def _acdc(
    model: Model, task: DiscoveryTask, ablation: str, graph: Any, taus: Sequence[float]
) -> tuple[dict[float, Tensor], float]:
    """The edges ACDC keeps at each τ (relative to D(∅), the distance with every edge ablated):
    ({τ: bool [n_edges]}, D(∅)); module docstring."""
    from interp.causal.internal import make_pair
    from interp.engine.internal import MetricReader
    from interp.edges.internal import AblatedForward, EdgeWrites, ablated_writes

    runs: list[tuple[Any, Tensor]] = []  # per group: (the ablated forward of K, M(clean))
    for g in task.groups:
        args = _ablation_args(g, ablation)
        pair = make_pair(model, g.clean, args["corrupt"], g.metric, need_corrupt=ablation == "resample")
        writes = EdgeWrites(model, graph, pair.engine)
        abl = ablated_writes(model, pair, writes, args["ablation"], args.get("reference"), 0)
        read, prompt = MetricReader(model, pair.bound), torch.arange(g.n_prompts, device=model.device)
        t, m = pair.clean.tokens, pair.clean.attention_mask
        fw = AblatedForward(writes)

        def run(
            K: Tensor,
            fw: Any = fw,
            t: Tensor = t,
            m: Tensor = m,
            abl: Any = abl,
            read: Any = read,
            prompt: Tensor = prompt,
        ) -> Tensor:
            return fw(t, m, abl, K, read, prompt)

        runs.append((run, run(torch.zeros_like(graph.mask, dtype=torch.float32))))
    P = sum(g.n_prompts for g in task.groups)
    ew, er = graph.edge_writer, graph.edge_reader

    def distance(keep: Tensor) -> float:
        K = graph.mask.float()
        K[ew[keep], er[keep]] = 0.0  # 1 = ablated
        return sum(float((run(K) - clean).abs().sum()) for run, clean in runs) / P

    cache: dict[bytes, float] = {}

    def cached(keep: Tensor) -> float:  # runs at neighbouring τ often share a state: evaluate it once
        key = keep.numpy().tobytes()
        if key not in cache:
            cache[key] = distance(keep)
        return cache[key]

    empty = cached(torch.zeros(graph.n_edges, dtype=torch.bool))
    writer_of = _reader_writers(graph)  # reader -> the writers of its component (a KV head: its query heads)
    # readers from the metric backwards; each reader's edges from the latest writer to the earliest
    order = sorted(range(graph.n_edges), key=lambda i: (-int(er[i]), -int(ew[i])))
    keeps = {tau: torch.ones(graph.n_edges, dtype=torch.bool) for tau in taus}
    current = {tau: 0.0 for tau in taus}
    for i in order:  # every τ in lockstep
        r = int(er[i])
        for tau, keep in keeps.items():
            if writer_of[r] and not bool(keep[torch.isin(ew, torch.tensor(writer_of[r]))].any()):
                keep[i] = False  # the reader's component lost every edge out: it is no longer in the circuit
                continue
            keep[i] = False
            d = cached(keep)
            if d - current[tau] < tau * empty:
                current[tau] = d
            else:
                keep[i] = True
    out = keeps
    return out, empty


def _reader_writers(graph: Any) -> list[list[int]]:
    """For each reader, the writers of its component (a head's q: that head; a KV head's k/v: the query heads
    sharing it; an MLP's input: the MLP); [] for the metric's read."""
    index = {w: i for i, w in enumerate(graph.writers)}
    group = graph.n_heads // graph.n_kv_heads if graph.n_kv_heads else 1
    out: list[list[int]] = []
    for r in graph.reader_info:
        if r.kind == "q":
            out.append([index[str(Head(r.layer, r.head))]])
        elif r.kind in ("k", "v"):
            out.append([index[str(Head(r.layer, h))] for h in range(r.head * group, (r.head + 1) * group)])
        elif r.kind == "mlp":
            out.append([index[str(Mlp(r.layer))]])
        else:
            out.append([])
    return out


def _sweep_auc(sets: dict[float, Tensor], truth: Tensor) -> float:
    """ROC AUC of a thresholded method: (FPR, TPR) per τ, closed at (0, 0) and (1, 1), trapezoids."""
    if not bool(truth.any()) or bool(truth.all()):
        return float("nan")
    pts = {(0.0, 0.0), (1.0, 1.0)}
    n_pos, n_neg = int(truth.sum()), int((~truth).sum())
    for keep in sets.values():
        pts.add((int((keep & ~truth).sum()) / n_neg, int((keep & truth).sum()) / n_pos))
    xs, ys = zip(*sorted(pts))
    # several TPRs at one FPR: the step goes up at that FPR (take the sorted order, which climbs it)
    return float(sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(xs) - 1)))


def edge_ranking(
    task: DiscoveryTask,
    method: str,
    ablation: str,
    *,
    ig_steps: int = 5,
    taus: Sequence[float] = ACDC_TAUS,
    testable: Optional[Tensor] = None,
) -> EdgeRanking:
    """Score every edge of ``task``'s model with ``method`` under ``ablation`` and compute its edge ROC AUC.

    ``testable``: :func:`testable_edges` of this task and ablation, if already computed (it is otherwise)."""
    from interp.edges import circuit_graph

    check_choice("method", method, METHODS)
    check_choice("ablation", ablation, RANKING_ABLATIONS)
    check_positive_int("ig_steps", ig_steps)
    if not isinstance(task, DiscoveryTask):
        raise ArgumentError(f"task={type(task).__name__} must be a DiscoveryTask (tracr_task / induction_task)")
    model = task.model
    graph = circuit_graph(model)
    truth = task.truth.truth(graph.edges)
    testable = testable_edges(task, ablation) if testable is None else testable
    t0 = time.perf_counter()
    details: dict[str, Any] = {}
    signed: Optional[Tensor] = None
    if method == "acdc":
        sets, empty = _acdc(model, task, ablation, graph, taus)
        details["empty_distance"] = empty
        scores = torch.zeros(graph.n_edges, dtype=torch.float64)
        for tau in sorted(sets):  # the largest τ at which the edge survives
            scores[sets[tau]] = tau
        auc, auc_t = _sweep_auc(sets, truth), _sweep_auc(sets, testable)
        details["kept"] = {f"{tau:g}": int(k.sum()) for tau, k in sets.items()}  # τ → edges kept (JSON keys)
    else:
        per = []
        for g in task.groups:
            if method == "edge-patching":
                per.append(_patching(model, g, ablation, graph.edges))
            else:
                steps = 1 if method == "eap" else ig_steps
                per.append(_eap(model, g, ablation, steps, "activations" if method == "eap-ig-act" else "inputs"))
        effects = torch.cat(per, dim=1)  # [E, all prompts]
        scores = effects.abs().mean(1)
        scores = torch.where(scores <= NOISE * scores.max(), torch.zeros_like(scores), scores)
        auc, auc_t = roc_auc(scores, truth), _auc_or_nan(scores, testable)
        signed = effects.mean(1)
    seconds = time.perf_counter() - t0
    out = EdgeRanking(
        task=task.name,
        method=method,
        ablation=ablation,
        edges=tuple(graph.edges),
        scores=scores,
        truth=truth,
        auc=auc,
        testable=testable,
        auc_testable=auc_t,
        seconds=seconds,
        signed=signed,
        details=details,
    )
    log.info("%s %s %s: AUC %.4f (%.1f s)", task.name, method, ablation, auc, seconds)
    return out.to(model.device)  # ACDC's thresholds and the truth are host tensors: the result is on the model's device


def discovery_table(
    tasks: Sequence[DiscoveryTask],
    *,
    methods: Sequence[str] = METHODS,
    ablations: Sequence[str] = RANKING_ABLATIONS,
    ig_steps: int = 5,
) -> tuple[pd.DataFrame, list[EdgeRanking]]:
    """Edge ROC AUC of every method × ablation × task: (a long table, the rankings behind it)."""
    rows, rankings = [], []
    for task in tasks:
        for m in methods:
            for a in ablations:
                r = edge_ranking(task, m, a, ig_steps=ig_steps)
                rankings.append(r)
                rows.append(
                    {
                        "model": task.name,
                        "method": m,
                        "ablation": a,
                        "auc": r.auc,
                        "auc_testable": r.auc_testable,
                        "true": int(r.truth.sum()),
                        "testable": int(r.testable.sum()),
                        "edges": len(r.edges),
                        "seconds": r.seconds,
                    }
                )
    return pd.DataFrame(rows), rankings
