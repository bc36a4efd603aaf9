"""Edge attribution patching (EAP) and EAP with integrated gradients (EAP-IG), on every edge at once.

For an edge w → r of the circuit graph (:mod:`interp.edges._graph`), metric M, clean input x_c and
corrupt input x_k (Syed et al. 2023, arXiv 2310.10348; Hanna et al. 2024, arXiv 2403.17806):

    EAP:     score(w → r) = Σ_{b,t,d} (a_w(x_c) − a_w(x_k)) · J_{w→r}ᵀ ∂M/∂x_r |_{x_c}
    EAP-IG:  the gradient averaged over m points of the corrupt → clean path, α = k/m, k = 1..m

Sign: an edge's score is positive when the edge supports the metric (≈ M(clean) − M(clean with only r seeing w's
corrupt value)): the convention of every result and page in interp (docs/math.md, "Sign convention"). The
reference implementations score (a_w(x_k) − a_w(x_c))·∂M/∂x_r, the negative of this.

J_{w→r} carries w's write to r's input: r's own norm (pre-norm), or every Add & Norm between w and r
(post-norm). ``scale="recomputed"`` (default) uses the norms' true Jacobians — the derivative of what
exact edge patching does (r's norm recomputed on the patched stream), the convention of the reference
implementations, and the one under which EAP-IG's completeness holds; ``scale="frozen"`` holds each σ at
its value in the pass, the ledger's linear map γ ⊙ C(·)/σ. For every reader, Σ_w score(w → r) is then
exactly the attribution-patching score of r's linearised input change (J Σ_w Δa_w)·∂M/∂x_r, and in a
pre-norm stream Σ_w Δa_w = Δx_r, the change of the stream r reads.

EAP-IG paths (``ig_at``):
* "inputs" (default; Hanna et al.'s EAP-IG-inputs): the token embedding e = e_k + α(e_c − e_k), Δa_w
  from the two plain runs. Completeness: Σ_r score(embed → r) → M(x_c) − M(x_k) as m → ∞ (every path
  from the embedding enters exactly one reader first, so Σ_r J_{e→r}ᵀ g_r = ∂M/∂e).
* "activations": every write at once, a_w ← α a_w + (1 − α) ã_w, Δa_w = ã_w − a_w at each point (the
  gradient of M with respect to a mask on every edge, as AutoCircuit's ``mask_gradient``).
  Completeness: Σ over every edge → M(x_c) − M(x_k).

Steps, all edges at once (never per edge): (1) the corrupt run keeps every write; (2) per path
point, one forward + backward (:class:`ReaderGradients`) gives G [batch, readers, pos, d_model];
(3) scores = ΔA·Gᵀ (:class:`EdgeScorer`), one batched GEMM over (pos, d_model), masked to the edges (post-norm: one GEMM
per stretch of writers between two norms, G carried back through each norm). Parameters are never touched:
gradients are taken with respect to activations of a weights-level forward, so no hook is attached and no
``requires_grad`` flag is set on the model.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Optional

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._validate import (
    check_bool,
    check_choice,
    check_int_min,
    check_not_inference_mode,
    check_positive_int,
    shardable,
)
from interp.engine.internal import BoundMetric, MetricReader, chunk_bytes, clean_output
from interp.causal.internal import make_pair
from interp._result import metric_gap
from interp.edges._gradient import EdgeScorer, ReaderGradients
from interp.edges._writes import Acts, EdgeWrites
from interp.edges._graph import CircuitGraph, circuit_graph
from interp.edges._scores import EdgeScores
from interp.errors import CompletenessWarning, MetricGapWarning, warn_user
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["edge_attribution", "METHODS", "COMPLETENESS_TOLERANCE", "check_completeness"]

log = logging.getLogger(__name__)

METHODS = ("eap", "eap-ig")
#: ``edge_attribution`` warns (:class:`interp.CompletenessWarning`) when a result's completeness error exceeds
#: this fraction of |M(clean) − M(corrupt)|: its scores are then a poor first-order estimate of the effects.
COMPLETENESS_TOLERANCE = 0.1
IG_AT = ("inputs", "activations")
SCALES = ("recomputed", "frozen")


@shardable
def edge_attribution(
    model: Model,
    clean: Any,
    corrupt: Any,
    *,
    metric: Any,
    method: str = "eap-ig",
    ig_steps: int = 5,
    ig_at: str = "inputs",
    scale: str = "recomputed",
    batch_size: Optional[int] = None,
    progress: bool = True,
    cluster: Any = None,
    out: Any = None,
) -> EdgeScores:
    """EAP or EAP-IG scores of every edge of ``model``'s circuit graph (see the module docstring).

    ``clean`` / ``corrupt``: prompts (strings or token ids), pairwise of equal token length. ``metric``: an
    interp metric (:class:`interp.LogitDiff`, ...) or a callable on the logits. ``method``: "eap-ig" (default;
    ``ig_steps`` path points, at the "inputs" or the "activations") or "eap" (one gradient, at the clean run:
    ``ig_steps`` + 1 times cheaper, and far from complete where the metric saturates). ``scale``: "recomputed"
    (the norms' true Jacobians) or "frozen" (σ held). ``batch_size``: prompts per forward (default: all, or
    fewer so that the writes and gradients of a chunk stay near 1 GB).

    An :class:`interp.CompletenessWarning` is given when the result's ``completeness_error`` exceeds
    :data:`COMPLETENESS_TOLERANCE` (10 %) of |M(clean) − M(corrupt)|.

    ``cluster``: None (in process) or an ``interp.RayCluster``: the prompt pairs are sharded over its workers
    and the shards merged exactly; ``out``: a folder keeping each finished shard (a rerun computes only the
    missing ones; docs/scaling.md).
    """
    # 1. the inputs checked (a cluster runs this call per shard of the prompt pairs)
    require_model(model)
    check_choice("method", method, METHODS)
    check_choice("ig_at", ig_at, IG_AT)
    check_choice("scale", scale, SCALES)
    check_bool("progress", progress)
    check_positive_int("batch_size", batch_size, allow_none=True)
    ig_steps = check_int_min("ig_steps", ig_steps, 1)  # the points on the corrupt → clean path (5: the reference's)
    check_not_inference_mode("edge_attribution")

    # 2. the clean and corrupt batches (the metric bound to them), the graph and its writes
    pair = make_pair(model, clean, corrupt, metric, need_corrupt=True)
    graph = circuit_graph(model)
    ew = EdgeWrites(model, graph, pair.engine)
    steps = ig_steps if method == "eap-ig" else 1
    bs = batch_size or _default_batch(graph, model, pair.clean.tokens.shape[1])

    # 3. the scores, a chunk of prompts at a time: per path point one forward + backward, then ΔA·Gᵀ
    per_prompt, completeness, Mc, Mk = _score_chunks(model, pair, ew, bs, steps, method, ig_at, scale, progress)

    # 4. the result, checked for completeness
    scores = per_prompt.mean(1).to(torch.float32 if model.dtype != torch.float64 else torch.float64)
    a = model.arch
    out = EdgeScores(
        edges=list(graph.edges),
        scores=scores,
        per_prompt=per_prompt.to(scores.dtype),
        method=method,
        metric=pair.bound.name,
        clean=float(Mc.mean()),
        corrupt=float(Mk.mean()),
        clean_per_prompt=Mc.to(scores.dtype),
        corrupt_per_prompt=Mk.to(scores.dtype),
        model_name=model.name,
        n_layers=a.n_layers,
        n_heads=a.n_heads,
        n_kv_heads=a.n_kv_heads,
        ig_steps=steps,
        ig_at=ig_at,
        scale=scale,
        completeness=float(completeness.mean()),
        completeness_of="every edge" if (method == "eap-ig" and ig_at == "activations") else "the edges out of embed",
        details={"batch_size": bs, "path": "α = k/m, k = 1..m" if method == "eap-ig" else "gradient at clean"},
    )
    log.info("%r", out)
    gap = metric_gap(
        out.clean,
        out.corrupt,
        warn="edge_attribution",
        undefined="the edges' scores (whose completeness sum estimates M(clean) − M(corrupt)) and their relative error",
    )
    same = _unchanged_pairs(pair)  # the gap test misses them where batching noise beats |mean M| (metrics that cancel)
    every = len(same) == pair.clean.tokens.shape[0]
    if same and (math.isfinite(gap) or not every):
        _warn_unchanged(same, pair.clean.tokens.shape[0], len(graph.edges))
    if math.isfinite(gap) and not every:
        check_completeness(out)
    return out


def _unchanged_pairs(pair: Any) -> list[int]:
    """The prompts whose corrupt input is their clean input (the same tokens and mask)."""
    c, k = pair.clean, pair.corrupt
    if k is None or c.tokens.shape != k.tokens.shape:
        return []
    same = ((c.tokens == k.tokens) & (c.attention_mask == k.attention_mask)).all(1)
    return [int(i) for i in same.nonzero().flatten().tolist()]


def _warn_unchanged(same: list[int], n_prompts: int, n_edges: int) -> None:
    """A :class:`interp.MetricGapWarning` for prompt pairs whose corrupt prompt is the clean one: every write's
    Δa = a(clean) − a(corrupt) is 0 there, so every edge scores 0 on them (and M(clean) − M(corrupt) = 0) whatever
    the edge does — not a finding, a mistake in the pairs."""
    if len(same) == n_prompts:
        what = (
            f"corrupt is the clean input again ({n_prompts} prompt{'s' if n_prompts > 1 else ''}): every write is the "
            f"same in both runs, so all {n_edges:,} edges score 0 and M(clean) − M(corrupt) = 0 whatever the edges do"
        )
    else:
        shown = ", ".join(map(str, same[:10])) + (", …" if len(same) > 10 else "")
        what = (
            f"{len(same)} of {n_prompts} prompt pairs have a corrupt prompt equal to their clean one (prompts "
            f"{shown}): every edge scores 0 on them, which pulls the mean scores toward 0"
        )
    warn_user(
        f"edge_attribution: {what}; give corrupt prompts that change what the metric reads (e.g. the IOI names "
        "swapped)",
        MetricGapWarning,
    )


def _score_chunks(
    model: Model,
    pair: Any,
    ew: EdgeWrites,
    bs: int,
    steps: int,
    method: str,
    ig_at: str,
    scale: str,
    progress: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(scores [n_edges, P], completeness sums [P], M(clean) [P], M(corrupt) [P]) in float64, ``bs`` prompts at a
    time (:func:`_chunk`)."""
    P = pair.clean.tokens.shape[0]
    E = ew.g.n_edges
    dev = model.device  # the result's tensors on the model's device
    per_prompt = torch.zeros(E, P, dtype=torch.float64, device=dev)
    completeness = torch.zeros(P, dtype=torch.float64, device=dev)
    Mc = torch.zeros(P, dtype=torch.float64, device=dev)
    Mk = torch.zeros(P, dtype=torch.float64, device=dev)
    tok_w = ew.embed_idx["embed.token"]
    chunks = [list(range(i, min(i + bs, P))) for i in range(0, P, bs)]
    bar = tqdm(total=len(chunks) * steps, desc=f"edge_attribution {method}", unit="pass", disable=not progress)
    try:
        for idx in chunks:
            s, comp, mc, mk = _chunk(
                model, pair, ew, torch.tensor(idx, device=model.device), steps, ig_at, scale, tok_w, bar
            )
            per_prompt[:, idx] = s
            completeness[idx], Mc[idx], Mk[idx] = comp, mc, mk
    finally:
        bar.close()
    return per_prompt, completeness, Mc, Mk


def check_completeness(scores: EdgeScores, tolerance: float = COMPLETENESS_TOLERANCE) -> None:
    """Warn (:class:`interp.CompletenessWarning`) when ``scores.completeness_error`` exceeds ``tolerance`` ×
    |M(clean) − M(corrupt)| (nothing to compare when the two runs give the same metric)."""
    target, err = scores.target, scores.completeness_error
    if not (math.isfinite(target) and math.isfinite(err)) or target == 0 or err <= tolerance * abs(target):
        return
    if scores.method == "eap":
        fix = "use method='eap-ig' (the default; the gradient averaged over the corrupt → clean path)"
    elif scores.scale == "frozen":
        fix = "use scale='recomputed' (completeness holds for the norms' true Jacobians) or raise ig_steps"
    else:
        fix = f"raise ig_steps (now {scores.ig_steps})"
    warn_user(
        f"edge_attribution(method={scores.method!r}): the completeness sum ({scores.completeness_of}) is "
        f"{scores.completeness:.4g} but M(clean) − M(corrupt) = {target:.4g}: an error of {err:.3g} "
        f"({err / abs(target):.1%} > {tolerance:.0%}), so the scores are a poor estimate of the edges' effects; {fix}",
        CompletenessWarning,
    )


def _default_batch(graph: CircuitGraph, model: Model, T: int) -> int:
    """Prompts per chunk: the writes and gradients of a chunk near 1 GB (more on a GPU: :func:`chunk_bytes`)."""
    per_prompt = (len(graph.writers) + 2 * len(graph.readers)) * T * model.arch.d_model * 4
    return max(1, int(chunk_bytes(model.device, 1e9) // max(per_prompt, 1)))


def _chunk(
    model: Model, pair: Any, ew: EdgeWrites, idx: Tensor, steps: int, ig_at: str, scale: str, tok_w: int, bar: Any
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Scores [n_edges, p], completeness sums [p], M(clean) [p], M(corrupt) [p] for the prompts ``idx``."""
    g = ew.g
    gradients, scorer = ReaderGradients(ew), EdgeScorer(ew)
    ct, cm = pair.clean.tokens[idx], pair.clean.attention_mask[idx]
    kt, km = pair.corrupt.tokens[idx], pair.corrupt.attention_mask[idx]
    bound = pair.bound
    clean_out = None
    if bound.needs_clean:
        c_run = pair.engine.run(ct, cm)  # a walk of its own: only metrics that compare with the clean run
        sub_out = clean_output(model, _sub(bound, idx), c_run)  # not None: the metric needs the clean run
        clean_out = None if sub_out is None else _scatter(sub_out, idx, bound.n_prompts)
    read = MetricReader(model, bound, clean_out)
    frozen = scale == "frozen"
    one_gemm = not ew.block.normed_stream and ig_at == "inputs"  # ΔA fixed and no stream norms: Σ G, one product
    G_sum: Optional[Tensor] = None
    S_sum: Optional[Tensor] = None
    dA: Optional[Tensor] = None
    M_c = M_k = None
    abl: Optional[Acts] = None
    for k in range(steps, 0, -1):  # α = 1 (the clean run) first, the corrupt run beside it: their writes give ΔA
        alpha = k / steps
        first = k == steps
        every = ig_at == "activations"
        gp = gradients(
            ct,
            cm,
            read,
            idx,
            scale=scale,
            mix=None if first else (abl, alpha, ig_at),
            corrupt=(kt, km) if first else None,
            delta=first or every,
        )
        if first:
            if gp.corrupt_final is None:
                raise RuntimeError("edge attribution: the first pass gave no corrupt run")
            M_c, abl = gp.M, gp.corrupt
            with torch.no_grad():
                M_k = read(gp.corrupt_final, idx)
        if gp.dA is not None:
            dA = gp.dA
        if one_gemm:
            G_sum = gp.G if G_sum is None else G_sum.add_(gp.G)
        else:
            if dA is None:  # the first pass (α = 1) keeps its writes
                raise RuntimeError("edge attribution: no write differences before the first gradient")
            S = scorer(dA, gp.G, gp.norm_in, frozen=frozen)
            S_sum = S if S_sum is None else S_sum.add_(S)
        del gp
        bar.update(1)
    if one_gemm and dA is not None and G_sum is not None:
        S_all = scorer(dA, G_sum, {}, frozen=frozen) / steps
    elif not one_gemm and S_sum is not None:
        S_all = S_sum / steps
    else:  # steps >= 1, so the loop ran and the α = 1 pass set dA and G (or S)
        raise RuntimeError("edge attribution: the gradient loop produced no scores")
    # S_all is (a_w(corrupt) − a_w(clean))·∂M/∂x_r; the score is its negative (positive = supports the metric)
    S_all = S_all.neg_()
    per = S_all[:, g.edge_writer.to(S_all.device), g.edge_reader.to(S_all.device)]  # [p, E]
    if ig_at == "activations" and steps > 1:
        comp = per.double().sum(1)
    else:
        comp = S_all[:, tok_w].double().sum(1)
    if M_c is None or M_k is None:
        raise RuntimeError("edge attribution: the clean pass gave no metric")
    return per.T.double(), comp, M_c.double(), M_k.double()


def _sub(bound: BoundMetric, idx: Tensor) -> BoundMetric:
    """``bound`` restricted to the prompts ``idx`` (for the clean readout of KL-type metrics)."""
    from dataclasses import replace

    pos = None if bound.positions is None else bound.positions[idx.to(bound.positions.device)]
    return replace(
        bound,
        n_prompts=len(idx),
        positions=pos,
        mask=bound.mask[idx.to(bound.mask.device)],
        fn=lambda out, p, c: bound.fn(out, idx.to(p.device)[p], c),
    )


def _scatter(t: Tensor, idx: Tensor, n: int) -> Tensor:
    out = torch.zeros(n, *t.shape[1:], dtype=t.dtype, device=t.device)
    out[idx] = t
    return out
