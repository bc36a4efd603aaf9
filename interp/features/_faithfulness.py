"""A pruned attribution graph's faithfulness: the replacement model run with every node outside the graph ablated.

An attribution graph (:func:`interp.features.attribution_graph`) has feature nodes (l, p, f) (the active features),
error nodes (l, p), token embeddings and outputs. For a set K of its feature and error nodes, run the replacement
model — each MLP replaced by its transcoder plus its error node — in which layer l's write at position p is

    m'_{l,p} = Σ_f v_{l,p,f} W_dec[f] + b_dec + h'_{l,p} W_skipᵀ + ε_{l,p}
    v_{l,p,f} = act(h'_{l,p} W_encᵀ + b_enc)_f    (l, p, f) ∈ K: recomputed from this run's MLP input h'
              = ã_{l,f}                            a feature node not in K: ablated
              = a_{l,p,f}                          not a node (inactive: 0; at a held position: its real value)
    ε_{l,p}   = e_{l,p}                            (l, p) ∈ K, or a position the graph holds (constant_prefix)
              = ẽ_l                                an error node not in K: ablated

and with a cross-layer transcoder, whose feature of layer k writes at k and every later layer (ε_{l,p} the MLP's write
minus the CLT's joint reconstruction),

    m'_{l,p} = Σ_{k ≤ l} Σ_f v_{k,p,f} W_dec[k → l][f] + b_dec[l] + h'_{l,p} W_skip[l]ᵀ + ε_{l,p}

— a feature node ablated is ablated in each of its writes (zero ablation removes them all). With ``ablation="zero"``:
ã = 0, ẽ = 0; ``"mean"``: ã_{l,f} = the mean of a_{l,p,f} and ẽ_l the mean of e_{l,p} over
the positions p ≥ k of the prompt itself (k the graph's held prefix), or of the ``reference`` prompts. Every attention
pattern and norm scale is frozen at the real forward (``frozen_attention=True``: the graph's own linear model) or
recomputed in the run (False). The metric M(K) is the graph's output read off the run's final stream — the target's
logit, the logit difference, or for a graph of the top logits Σ_k w_k z_k / Σ_k w_k (w_k the outputs' weights);
linear, before any soft-cap, like the graph's outputs. K = every node is the real forward (the recomputed features at
the real input are the real ones, ε = e, so m' = m): M(all) is the graph's output value (closure). K = ∅ ablates every
feature and error node. For each node threshold t, K_t = the feature and error nodes
:meth:`AttributionGraph.prune` (t, edge_threshold) keeps, and

    f(t) = (M(K_t) − M(∅)) / (M(all) − M(∅)),      CPR = ∫ f dt,  CMD = ∫ |1 − f| dt  (trapezoids over the thresholds)

as for edge circuits (docs/math.md §25; the denominator :func:`interp._result.metric_gap`). The ablation is of nodes:
the kept nodes interact through every path of the model, pruned edges between them included. docs/math.md §32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence, Union

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result, faithfulness_curves
from interp._validate import check_bool, check_choice, is_int
from interp.engine.internal import final_norm
from interp.engine import readout, unembedding
from interp.errors import ArgumentError, warn_user
from interp.features._intervene import CLOSURE_TOLERANCE
from interp.features._prompt import one_prompt
from interp.features._replacement import RealRun, check_replaceable, real_forward
from interp.dictionaries import CrossLayerTranscoder, Transcoder
from interp.features._warnings import ClosureWarning
from interp.models import Model
from interp.stream.internal import require_model

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.features._result import AttributionGraph

__all__ = ["GRAPH_ABLATIONS", "GRAPH_THRESHOLDS", "GraphFaithfulness", "graph_faithfulness"]

#: the node thresholds of :meth:`AttributionGraph.faithfulness`'s curve by default (fractions of the influence kept)
GRAPH_THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 1.0)
#: how a node outside the pruned graph is ablated
GRAPH_ABLATIONS = ("mean", "zero")
_FAITH = "faithfulness values (M(pruned graph) − M(no nodes)) / (M(full graph) − M(no nodes))"


@dataclass(frozen=True, eq=False)
class GraphFaithfulness(Result):
    """The faithfulness curve of an attribution graph over node thresholds (module docstring; docs/math.md §32).

    ``thresholds`` the node thresholds t; per threshold [T]: ``values`` M(K_t), ``faithfulness`` f(t),
    ``n_features`` / ``n_errors`` the feature and error nodes kept; ``full`` M(every node), ``empty`` M(no node),
    ``graph_value`` the graph's own output (the model's: ``closure_error`` = |full − graph_value|, ``relative_error``
    that over the largest |logit| at the output's position, as :data:`CLOSURE_TOLERANCE` is defined, and
    ``closure_tolerance`` the bound it is checked against); ``cpr`` / ``cmd`` the areas;
    ``n_features_total`` / ``n_errors_total`` the graph's (error nodes it holds excluded). Rows are labelled
    ``t=<threshold>``.
    """

    thresholds: list[float]
    values: Tensor = field(repr=False)
    faithfulness: Tensor = field(repr=False)
    n_features: Tensor = field(repr=False)
    n_errors: Tensor = field(repr=False)
    full: float
    empty: float
    graph_value: float
    closure_error: float
    relative_error: float
    closure_tolerance: float
    cpr: float
    cmd: float
    n_features_total: int
    n_errors_total: int
    edge_threshold: float
    ablation: str
    frozen_attention: bool
    reference: str
    target: str
    model_name: str

    label_column: ClassVar[str] = "point"
    default_by: ClassVar[str] = "faithfulness"
    default_absolute: ClassVar[bool] = False

    @property
    def labels(self) -> list[str]:
        return [f"t={t:g}" for t in self.thresholds]

    def _row(self, index: int) -> Any:
        return self.to_dataframe().iloc[index].to_dict()

    def __repr__(self) -> str:
        return (
            f"GraphFaithfulness({self.model_name!r}, {self.target}: {len(self.thresholds)} thresholds, "
            f"{self.ablation} ablation, {'frozen' if self.frozen_attention else 'live'} attention; M(full) "
            f"{self.full:.4g} (the model's {self.graph_value:.4g}, closure {self.relative_error:.1e}), M(none) "
            f"{self.empty:.4g}; CPR {self.cpr:.3f}, CMD {self.cmd:.3f})"
        )

    def to_dataframe(self) -> pd.DataFrame:
        n_all = max(self.n_features_total + self.n_errors_total, 1)
        return pd.DataFrame(
            {
                "point": self.labels,
                "threshold": list(self.thresholds),
                "n_features": self.n_features.tolist(),
                "n_errors": self.n_errors.tolist(),
                "frac_nodes": ((self.n_features + self.n_errors) / n_all).tolist(),
                "value": self.values.tolist(),
                "faithfulness": self.faithfulness.tolist(),
            }
        )

    def plot(self, **options: Any) -> "go.Figure":
        """Faithfulness against the node threshold (:func:`interp.plots.graph_faithfulness_figure`)."""
        from interp.plots import graph_faithfulness_figure

        return graph_faithfulness_figure(self, **options)


def _output(g: "AttributionGraph", W_U: Tensor, b_U: Tensor) -> tuple[int, Tensor, Tensor, float]:
    """The graph's metric as one read of the final stream: (position, u [d], b, the graph's own value) — the target's
    logit or logit difference, or the weighted mean Σ_k w_k z_k / Σ_k w_k of its top logits."""
    outs = [i for i, k in enumerate(g.node_kind) if k == "logit"]
    pos = g.node_pos[outs[0]]
    if len(outs) == 1 and g.node_labels[outs[0]] == "logit":
        ids = list(g.target_ids)
        u, b = W_U[:, ids[0]], b_U[ids[0]]
        if len(ids) == 2:
            u, b = u - W_U[:, ids[1]], b - b_U[ids[1]]
        return pos, u, b, float(g.value[outs[0]])
    w = (
        torch.ones(len(outs), dtype=torch.float64, device="cpu")
        if g.output_weight is None
        else g.output_weight.detach().cpu().double()[outs]
    )
    w = w / w.sum()
    wd = w.to(device=W_U.device, dtype=W_U.dtype)
    ids = list(g.target_ids)
    return pos, W_U[:, ids] @ wd, b_U[ids] @ wd, float((g.value.detach().cpu().double()[outs] * w).sum())


def _means(
    model: Model,
    real: RealRun,
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    reference: Any,
    k: int,
) -> tuple[list[Tensor], list[Tensor], str]:
    """Per layer the mean activation of every feature [F] and the mean error vector [d] over positions ≥ k of the
    prompt (``reference`` None) or of each reference prompt; and how the reference is described."""
    runs: list[RealRun]
    if reference is None:
        runs, what = [real], "the prompt's positions"
    else:
        if isinstance(reference, (str, Tensor)):
            reference = [reference]
        if not isinstance(reference, (list, tuple)) or not reference:
            raise ArgumentError(
                f"reference={reference!r:.80} must be None (the prompt itself) or a non-empty list of "
                "prompts (strings or token-id tensors)"
            )
        runs = []
        for i, p in enumerate(reference):
            tokens, mask = one_prompt(model, p)
            if tokens.shape[1] <= k:
                raise ArgumentError(
                    f"reference[{i}] has {tokens.shape[1]} tokens; the graph holds its first {k} "
                    "positions, so a reference prompt needs more"
                )
            runs.append(real_forward(model, tokens, mask, transcoders))
        what = f"{len(runs)} reference prompts"
    L = len(real.tcs)
    count = sum(r.emb.shape[0] - k for r in runs)
    acts = [torch.stack([r.dense(l)[k:].sum(0) for r in runs]).sum(0) / count for l in range(L)]
    errs = [torch.stack([r.errs[l][k:].sum(0) for r in runs]).sum(0) / count for l in range(L)]
    return acts, errs, what


def graph_faithfulness(
    graph: "AttributionGraph",
    model: Model,
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    *,
    thresholds: Sequence[float],
    edge_threshold: float,
    ablation: str,
    reference: Any,
    frozen_attention: bool,
) -> GraphFaithfulness:
    """:meth:`AttributionGraph.faithfulness` (module docstring); ``thresholds`` and ``edge_threshold`` checked there.

    In five steps: 1. the inputs checked and the prompt's real run, its features matched against the graph's nodes;
    2. the nodes each run keeps (every node, none, each threshold's pruned graph); 3. the ablated values; 4. the runs,
    all at once as a batch, and their metric; 5. the curve and the closure of the every-node run."""
    # 1. the inputs checked, the real run, the graph's nodes matched against its active features
    _check_inputs(graph, model, transcoders, ablation, reference, frozen_attention)
    tokens, mask = one_prompt(model, torch.tensor([graph.tokens], dtype=torch.long, device=model.device))
    n = tokens.shape[1]
    k = _held_prefix(graph, n)
    real = real_forward(model, tokens, mask, transcoders)
    feat_nodes, err_nodes = _graph_nodes(graph, real, k)

    # 2. the runs: every node, none, then each threshold's pruned graph
    ts = [float(t) for t in thresholds]
    kept_sets: list[Optional[set[str]]] = [None, set()]
    kept_sets += [set(graph.prune(t, edge_threshold).node_labels) for t in ts]
    K_feat, K_err = _kept(graph, feat_nodes, err_nodes, kept_sets, n)

    # 3. the ablated values: zero, or the means over the prompt's (or the reference prompts') positions ≥ k
    if ablation == "mean":
        abl_a, abl_e, ref_text = _means(model, real, transcoders, reference, k)
    else:
        abl_a = [torch.zeros(t.n_features, dtype=real.dtype, device=model.device) for t in real.tcs]
        abl_e = [torch.zeros(model.arch.d_model, dtype=real.dtype, device=model.device) for _ in real.tcs]
        ref_text = "zero"

    # 4. the runs, and the graph's metric read off each
    W_U, b_U = unembedding(model, weights=real.frozen.w)  # in the replacement model's dtype
    pos, u, b_u, graph_value = _output(graph, W_U, b_U)
    writes = _Writes.of(real, graph, feat_nodes, K_feat, K_err, abl_a, abl_e)
    m = _run(real, tokens, mask, writes, pos, u, b_u, frozen_attention).detach().double()

    # 5. the curve, its areas, and the every-node run against the model (closure)
    full, empty, values = float(m[0]), float(m[1]), m[2:]
    f, cpr_t, cmd_t = faithfulness_curves(  # the one computation of every faithfulness curve
        values[None],
        m[:1],
        m[1:2],
        torch.tensor(ts, dtype=torch.float64, device=m.device),
        warn=["AttributionGraph.faithfulness"],
        names=("M(full graph)", "M(no nodes)"),
        undefined=_FAITH,
    )
    faith = f[0]
    cpr, cmd = (float(cpr_t[0]), float(cmd_t[0])) if len(ts) > 1 else (math.nan, math.nan)  # one point: no area
    closure, relative, tol = _closure(model, real, W_U, b_U, pos, full, graph_value)
    n_err = [sum(1 for i in err_nodes if graph.node_labels[i] in (s or ())) for s in kept_sets[2:]]
    return GraphFaithfulness(
        thresholds=ts,
        values=values,
        faithfulness=faith,
        n_features=K_feat[2:].sum(1),
        n_errors=torch.tensor(n_err, dtype=torch.long, device="cpu"),
        full=full,
        empty=empty,
        graph_value=graph_value,
        closure_error=closure,
        relative_error=relative,
        closure_tolerance=tol,
        cpr=cpr,
        cmd=cmd,
        n_features_total=len(feat_nodes),
        n_errors_total=len(err_nodes),
        edge_threshold=float(edge_threshold),
        ablation=ablation,
        frozen_attention=frozen_attention,
        reference=ref_text,
        target=graph.target,
        model_name=model.name,
    )


def _check_inputs(
    graph: "AttributionGraph",
    model: Model,
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    ablation: str,
    reference: Any,
    frozen_attention: bool,
) -> None:
    """The model is the graph's, the transcoders replace its MLPs, the options are allowed (typed errors)."""
    require_model(model)
    check_replaceable(model, transcoders)
    check_choice("ablation", ablation, GRAPH_ABLATIONS)
    check_bool("frozen_attention", frozen_attention)
    if model.name != graph.model_name or model.arch.n_layers != graph.n_layers:
        raise ArgumentError(
            f"model {model.name!r} ({model.arch.n_layers} layers) is not the graph's "
            f"({graph.model_name!r}, {graph.n_layers} layers)"
        )
    if reference is not None and ablation != "mean":
        raise ArgumentError(f"reference= gives the means of mean ablation; ablation={ablation!r} does not use it")


def _held_prefix(g: "AttributionGraph", n: int) -> int:
    """The positions the graph holds as constants: its ``constant_prefix`` (checked: an int in [0, n))."""
    k = g.constant_prefix
    if not is_int(k) or not 0 <= k < n:
        raise ArgumentError(
            f"the graph's constant_prefix={k!r} must be an int in [0, {n - 1}] for its prompt of {n} tokens"
        )
    return int(k)


def _graph_nodes(g: "AttributionGraph", real: RealRun, k: int) -> tuple[list[int], list[int]]:
    """The graph's feature nodes and its error nodes (from position k on), as indices into its node table, once its
    feature nodes are checked to be the features the transcoders make active on its prompt from position k on
    (else the graph was built with other transcoders, or another held prefix: an ArgumentError)."""
    kinds = g.node_kind
    feat_nodes = [i for i, kd in enumerate(kinds) if kd == "feature"]
    node_pf = {(g.node_layer[i], g.node_pos[i], g.node_feature[i]) for i in feat_nodes}
    real_pf = {
        (l, p, f)
        for l in range(len(real.tcs))
        for p, f in zip(real.feats[l][0].tolist(), real.feats[l][1].tolist())
        if p >= k
    }
    if node_pf != real_pf:
        extra, missing = sorted(node_pf - real_pf)[:3], sorted(real_pf - node_pf)[:3]
        raise ArgumentError(
            f"transcoders: the graph's feature nodes are not the features these transcoders make active "
            f"on its prompt (graph only: {extra}; transcoders only: {missing}, as (layer, pos, feature)): "
            "pass the transcoders (and model) the graph was built with (a graph saved before its constant_prefix "
            f"was recorded reads {k}: dataclasses.replace(graph, constant_prefix=...) restores it)"
        )
    err_nodes = [i for i, kd in enumerate(kinds) if kd == "error" and g.node_pos[i] >= k]
    return feat_nodes, err_nodes


def _kept(
    g: "AttributionGraph", feat_nodes: list[int], err_nodes: list[int], kept_sets: list[Optional[set[str]]], n: int
) -> tuple[Tensor, Tensor]:
    """Per run (a set of kept node labels, None = every node), which feature nodes it keeps [B, n_feat] and which
    error vectors [B, L, n] (the held positions < k, which are no nodes, always keep theirs); on the host."""
    K_feat = torch.tensor(
        [[True] * len(feat_nodes) if s is None else [g.node_labels[i] in s for i in feat_nodes] for s in kept_sets],
        dtype=torch.bool,
        device="cpu",
    )
    K_err = torch.ones(len(kept_sets), g.n_layers, n, dtype=torch.bool, device="cpu")
    for r, s in enumerate(kept_sets):
        if s is not None:
            for i in err_nodes:
                K_err[r, g.node_layer[i], g.node_pos[i]] = g.node_labels[i] in s
    return K_feat, K_err


class _Writes:
    """The MLP writes of the B runs (module docstring): ``keep[l]`` [B, n, F] the feature nodes recomputed from the
    run's MLP input, ``fixed[l]`` [B, n, F] every other activation's value (ablated for a dropped node, real where no
    node), ``err[l]`` [B, n, d] each position's error vector (real or ablated). Called once per layer in order, as a
    run meets the layers; layer l's write sums the features of every layer k ≤ l that writes to it through
    W_dec[k → l] (``later`` [B, n, L, d] carries each layer's writes to itself and the layers after it: a
    per-layer set's to its own only)."""

    def __init__(self, real: RealRun, keep: list[Tensor], fixed: list[Tensor], err: list[Tensor]):
        self.real, self.keep, self.fixed, self.err = real, keep, fixed, err
        self.later: Optional[Tensor] = None

    @classmethod
    def of(
        cls,
        real: RealRun,
        g: "AttributionGraph",
        feat_nodes: list[int],
        K_feat: Tensor,
        K_err: Tensor,
        abl_a: list[Tensor],
        abl_e: list[Tensor],
    ) -> "_Writes":
        """The writes of the runs that keep the nodes ``K_feat`` / ``K_err`` (:func:`_kept`), the others at their
        ablated values ``abl_a[l]`` [F] / ``abl_e[l]`` [d]."""
        device = real.emb.device
        B, n = K_feat.shape[0], real.emb.shape[0]
        keep, fixed, err = [], [], []
        K_feat_d, K_err_d = K_feat.to(device), K_err.to(device)
        for l in range(len(real.tcs)):
            cols = [j for j, i in enumerate(feat_nodes) if g.node_layer[i] == l]
            p_l = torch.tensor([g.node_pos[feat_nodes[j]] for j in cols], dtype=torch.long, device=device)
            f_l = torch.tensor([g.node_feature[feat_nodes[j]] for j in cols], dtype=torch.long, device=device)
            kp = torch.zeros(B, n, real.tcs[l].n_features, dtype=torch.bool, device=device)
            kp[:, p_l, f_l] = K_feat_d[:, torch.tensor(cols, dtype=torch.long, device=device)]
            fx = real.dense(l)[None].repeat(B, 1, 1)
            fx[:, p_l, f_l] = abl_a[l][f_l]
            keep.append(kp)
            fixed.append(fx)
            err.append(torch.where(K_err_d[:, l, :, None], real.errs[l][None], abl_e[l][None, None]))
        return cls(real, keep, fixed, err)

    def __call__(self, l: int, h2: Tensor) -> Tensor:
        """h2 [B, n, d], the run's MLP input at layer l → layer l's MLP write [B, n, d]."""
        tc, ds = self.real.tcs[l], self.real.dictionaries
        v = torch.where(self.keep[l], tc.encode(h2), self.fixed[l])
        W = ds.W_dec[ds.index(l)]
        F, J, d = W.shape  # layer l's features write at layers l .. l + J − 1 (J = 1 per-layer)
        later = h2.new_zeros(*h2.shape[:-1], len(self.real.tcs), d) if self.later is None else self.later
        later[..., l : l + J, :] += (v @ W.reshape(F, J * d)).unflatten(-1, (J, d))
        self.later = later
        return later[..., l, :] + tc.b_dec + tc.skip(h2) + self.err[l]


def _run(
    real: RealRun,
    tokens: Tensor,
    mask: Tensor,
    writes: _Writes,
    pos: int,
    u: Tensor,
    b_u: Tensor,
    frozen_attention: bool,
) -> Tensor:
    """The B runs as one batch, each MLP's write replaced by ``writes``: the metric N_f(x_pos)·u + b_u of each [B] —
    with attention patterns and norm scales frozen at the real forward (the replacement model) or recomputed (the
    engine's forward with each layer's ``mlp_out`` patched)."""
    fr = real.frozen
    B = writes.keep[0].shape[0]
    with torch.no_grad():
        x = real.rerun(tokens, mask, writes, frozen_attention=frozen_attention, batch=B)
        if frozen_attention:
            return fr.readout(x, pos, u[:, None], b_u[None])[:, 0]
        return final_norm(fr.e.model, x[:, pos].to(real.dtype), weights=fr.w)[0] @ u + b_u


def _closure(
    model: Model, real: RealRun, W_U: Tensor, b_U: Tensor, pos: int, full: float, graph_value: float
) -> tuple[float, float, float]:
    """|M(every node) − the graph's value|, that over the largest |logit| of the real forward at ``pos`` (the scale of
    :data:`CLOSURE_TOLERANCE`), and the tolerance; past it a :class:`ClosureWarning`."""
    with torch.no_grad():  # the largest linear logit
        scale = float(readout(model, real.final[pos], weights=real.frozen.w, capped=False).abs().max())
    closure = abs(full - graph_value)
    relative = closure / max(scale, torch.finfo(real.dtype).tiny)
    tol = CLOSURE_TOLERANCE.get(model.dtype, 1e-3)
    if not relative <= tol:
        warn_user(
            f"AttributionGraph.faithfulness: with every node kept the replacement run gives {full:.6g}, not the "
            f"graph's (the model's) {graph_value:.6g} (relative {relative:.2e}, tolerance {tol:g} for "
            f"{model.dtype}), so the curve mixes the ablations with that error; run in float64 "
            "(load_model(..., dtype=torch.float64)) or check the transcoders' held-out FVU",
            ClosureWarning,
        )
    return closure, relative, tol
