"""Exact edge patching: only reader r sees writer w's ablated value; everything else is recomputed.

For an edge w → r, metric M and the noising ablation a_w → ã_w (the corrupt run's value, zero, a mean or
a resample, as in :func:`interp.patch`):

    value(w → r) = M(clean run in which r's input is the stream with a_w replaced by ã_w)

Every other reader reads the clean stream; r's own norm (pre-norm), or every Add & Norm between w and r
(post-norm: r's own copy of the stream replayed from w with every norm recomputed), sees the change;
downstream of r everything is recomputed, r's changed output included. It is the oracle the
first-order scores of :func:`interp.edge_attribution` estimate, with the opposite sign:
score(w → r) ≈ M(clean) − value(w → r) (positive: the edge supports the metric).

Upstream of r's layer a patched run equals the clean run, so each (edge, prompt) is one variant of the
patching engine's growing batch (:mod:`interp.engine`) joining at r's layer with r's output —
its q (a KV head's k or v), its MLP's output, or the final residual the metric reads — computed from the
clean run's cache: many edges are rows of one batch, prefix-shared, and (corrupt ablation, causal models)
only the positions from the first one where clean and corrupt differ are carried.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from interp._validate import check_bool, check_choice, check_int, check_positive_int
from interp.causal import ABLATIONS, PatchResult
from interp.causal.internal import baselines, default_batch_size, make_pair, patch_result, reference_acts, shared_prefix
from interp.engine.internal import MetricReader
from interp.engine.internal import Engine, Patch, RunCache, Variant
from interp.edges._writes import Acts, EdgeWrites
from interp.edges._graph import CircuitGraph, ReaderInfo, WriterInfo, circuit_graph
from interp.errors import ArgumentError
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["edge_patch", "ablated_writes", "check_edge_ablation"]

_SITES = {"z", "mlp_out", "attn_out", "resid_mid"}


def check_edge_ablation(ablation: str, reference: Any, corrupt: Any) -> None:
    """Typed errors for ablations that cannot run (mean and resample take ``reference`` or the corrupt prompts)."""
    check_choice("ablation", ablation, ABLATIONS)
    if ablation in ("mean", "resample") and reference is None and corrupt is None:
        raise ArgumentError(
            f"ablation={ablation!r} needs reference= (prompts to take the {ablation} from) "
            "or corrupt prompts to use as the reference"
        )
    if ablation in ("corrupt", "zero") and reference is not None:
        raise ArgumentError(f"reference is only used with ablation='mean' or 'resample', not ablation={ablation!r}")


def ablated_writes(
    model: Model,
    pair: Any,
    writes: EdgeWrites,
    ablation: str,
    reference: Any,
    seed: int,
    k_run: Optional[RunCache] = None,
) -> Optional[Acts]:
    """ã for every writer: the corrupt run's writes, None (zero), the mean over the reference prompts (per
    position when they have the clean length, else over every token) or a seeded resample."""
    e = pair.engine
    if ablation == "zero":
        return None
    if ablation == "corrupt":
        if k_run is None:
            k_run = e.run(pair.corrupt.tokens, pair.corrupt.attention_mask, capture={"z", "mlp_out"})
        return Acts.of(k_run)
    P, n = pair.clean.tokens.shape
    ref = reference if reference is not None else pair.corrupt.tokens
    src = reference_acts(
        e, model, ref, {"z", "mlp_out"}, ablation, n, P, seed, pair.bound if reference is not None else None
    )  # the corrupt prompts are extended already
    return Acts.of(src)


class _Replay:
    """What reader r reads in the clean run when only it sees writer w shifted by δ (module docstring)."""

    def __init__(self, writes: EdgeWrites, run: RunCache):
        self.e, self.run = writes.e, run
        self.a, self.w, self.block = writes.a, writes.w, writes.block

    def _resid(self, site: str, l: int, p: int) -> Tensor:
        """The clean run's stream at point ``site`` (resid_pre / resid_mid) of layer l, prompt p, [T, d]."""
        return self.run.resid_pre[l][p] if site == "resid_pre" else self.run.acts[site][l][p]  # type: ignore[index]

    def _out(self, sub: str, l: int, p: int) -> Tensor:
        """The clean run's sublayer ``sub`` output of layer l as it joins the stream, prompt p, [T, d]."""
        return self.run.acts[f"{sub}_out"][l][p]  # type: ignore[index]

    def stream(self, wi: WriterInfo, ri: ReaderInfo, p: int, delta: Tensor) -> Tensor:
        """r's input stream [T, d] (before its own norm) with w's write shifted by ``delta`` [T, d]."""
        block, run = self.block, self.run
        if not block.normed_stream:  # the stream is the sum of the writes: the clean stream r reads, + δ
            if ri.kind == "out":
                base = run.final[p]
            elif ri.kind == "mlp" and block.sees("mlp", "attn"):
                base = self._resid("resid_mid", ri.layer, p)
            else:
                base = run.resid_pre[ri.layer][p]
            return base + delta
        return self._replayed(wi, ri, p, delta)

    def _replayed(self, wi: WriterInfo, ri: ReaderInfo, p: int, delta: Tensor) -> Tensor:
        """A normed stream: r's copy replayed from w's write to r's read, the block's steps walked from w's add
        (the clean run's sublayer outputs added at each add, every stream norm recomputed) until r reads."""
        steps, L = self.block.steps, self.a.n_layers
        if wi.kind == "embed":
            V = sum(t[p] for t in self.run.embed.values()) + delta
            if self.w.ln_emb_w is not None:
                V = self.e.norm(V, self.w.ln_emb_w, self.w.ln_emb_b, "layernorm")
            l, i = 0, 0
        else:  # from the stream point before w's add: the clean stream there, then the adds up to w's own
            l, sub = wi.layer, ("attn" if wi.kind == "head" else "mlp")
            i = next(k for k, s in enumerate(steps) if s.op == "add" and s.sub == sub)
            j = max(k for k in range(i) if steps[k].op == "point" and steps[k].site.startswith("resid_"))
            V = self._resid(steps[j].site, l, p)
            for s in steps[j + 1 : i]:
                if s.op == "add":
                    V = V + self._out(s.sub, l, p)
            V, i = V + self._out(sub, l, p) + delta, i + 1
        reads = {"q": "attn", "k": "attn", "v": "attn", "mlp": "mlp"}
        while True:
            if i == len(steps):
                l, i = l + 1, 0
            if l == L:
                return V
            s = steps[i]
            if s.op == "read" and ri.layer == l and reads.get(ri.kind) == s.sub:
                return V
            if s.op == "add":
                V = V + self._out(s.sub, l, p)
            elif s.op == "norm":
                V = self.e.norm_at(s.norm, l, V)
            i += 1

    def patch(self, ri: ReaderInfo, V: Tensor, row: int, t0: int) -> Patch:
        """The engine patch that gives reader r the input ``V`` [T, d] (its output recomputed from it)."""
        a, w, dev = self.a, self.w, V.device
        rows = torch.tensor([row], device=dev)
        V = V[t0:]
        if ri.kind in ("q", "k", "v"):
            l, h = ri.layer, ri.head
            x = self.e.read_norm(V, l, "attn")
            W, b = {"q": (w.W_Q, w.b_Q), "k": (w.W_K, w.b_K), "v": (w.W_V, w.b_V)}[ri.kind]
            val = x @ W[l, h] + b[l, h]
            return Patch(site=ri.kind, layer=l, rows=rows, head=torch.tensor([h], device=dev), value=val[None])
        if ri.kind == "mlp":
            l = ri.layer
            x = self.e.read_norm(V, l, "mlp")
            # the engine's mlp_out site is the output as it joins the stream (after its output norm, if any)
            return Patch(site="mlp_out", layer=l, rows=rows, value=self.e.joined(l, self.e.mlp(l, x), "mlp")[None])
        return Patch(site="final", layer=a.n_layers, rows=rows, value=V[None])


def edge_patch(
    model: Model,
    clean: Any,
    corrupt: Any = None,
    edges: Sequence[Any] = (),
    *,
    metric: Any,
    ablation: str = "corrupt",
    reference: Any = None,
    batch_size: Optional[int] = None,
    progress: bool = True,
    seed: int = 0,
) -> PatchResult:
    """The metric with each edge exactly patched, one value per edge (see the module docstring).

    ``edges``: edge labels (``"L0.H3→L1.attn.k[H1]"``, :class:`~interp.labels.Edge`) of
    :func:`interp.circuit_graph`. ``ablation``: "corrupt" (needs ``corrupt``), "zero", "mean" or
    "resample" (from ``reference``, by default the corrupt prompts). Returns a :class:`interp.PatchResult`
    with ``method="edge patching"``, ``direction="noise"``; its ``effect`` is what edge scores estimate.
    """
    require_model(model)
    check_bool("progress", progress)
    check_positive_int("batch_size", batch_size, allow_none=True)
    seed = check_int("seed", seed)
    check_edge_ablation(ablation, reference, corrupt)
    if isinstance(edges, str) or not isinstance(edges, (list, tuple)) or not edges:
        raise ArgumentError(
            f"edges={edges!r:.80} must be a non-empty list of edge labels, e.g. "
            "['L0.H3→L1.attn.k[H1]', 'L1.mlp→unembed']"
        )
    pair = make_pair(model, clean, corrupt, metric, need_corrupt=ablation == "corrupt")
    graph = circuit_graph(model)
    idx = graph.indices(edges).tolist()
    if len(set(idx)) != len(idx):
        raise ArgumentError("edges lists an edge twice; give each edge once")
    values, clean_m, corrupt_m = sweep_edges(model, pair, graph, idx, ablation, reference, seed, batch_size, progress)
    return patch_result(
        model,
        pair.clean.tokens,
        values,
        [graph.edges[i] for i in idx],
        clean_m,
        corrupt_m,
        metric=pair.bound.name,
        method="edge patching",
        direction="noise",
        ablation=ablation,
        positions="all",
        details={"seed": seed},
        warn="edge_patch",
    )


def sweep_edges(
    model: Model,
    pair: Any,
    graph: CircuitGraph,
    idx: list[int],
    ablation: str,
    reference: Any,
    seed: int,
    batch_size: Optional[int],
    progress: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """(values [n_edges, P], M(clean) [P], M(corrupt) [P]) for the checked inputs."""
    e: Engine = pair.engine
    writes = EdgeWrites(model, graph, e)
    P, n = pair.clean.tokens.shape
    causal = model.arch.causal
    c_run = e.run(pair.clean.tokens, pair.clean.attention_mask, capture=_SITES, keep_kv=causal)
    k_run = None
    if pair.corrupt is not None:
        k_run = e.run(pair.corrupt.tokens, pair.corrupt.attention_mask, capture={"z", "mlp_out"})
    abl = ablated_writes(model, pair, writes, ablation, reference, seed, k_run)
    this = Acts.of(c_run)
    clean_out, clean_m, corrupt_m = baselines(model, pair.bound, c_run, k_run)
    share = min(shared_prefix(pair), n - 1) if ablation == "corrupt" else 0
    t0 = share if causal else 0
    replay = _Replay(writes, c_run)

    def variant(ei: int, p: int) -> Variant:
        wi = graph.writer_info[int(graph.edge_writer[ei])]
        ri = graph.reader_info[int(graph.edge_reader[ei])]
        w_i = int(graph.edge_writer[ei])

        def make(row: int, t0_: int) -> list[Patch]:
            V = replay.stream(wi, ri, p, writes.writer_delta(abl, this, w_i, p))
            return [replay.patch(ri, V, row, t0_)]

        return Variant(layer=ri.layer, prompt=p, t0=t0, make=make)

    variants = [variant(i, p) for i in idx for p in range(P)]
    read = MetricReader(model, pair.bound, clean_out, c_run)
    vals = e.sweep(  # in inference mode, the variants' patches made in it too
        c_run,
        pair.clean.tokens,
        pair.clean.attention_mask,
        variants,
        read,
        batch_size=batch_size or default_batch_size(model, n),
        progress=progress,
        desc="edge_patch",
    )
    return vals.reshape(len(idx), P).to(clean_m.dtype), clean_m, corrupt_m
