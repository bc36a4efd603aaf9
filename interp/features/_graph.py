"""Attribution graphs: the exact linear replacement model of one prompt, over per-layer transcoders or a cross-layer
transcoder.

The replacement model (:mod:`interp.features._replacement`: attention patterns and norm scales frozen at the real
forward, each MLP write replaced by its transcoder's features plus an error node) is affine in its sources — the
token embeddings, the feature activations and the error nodes — and reproduces the real forward exactly. Hence
every target (an active feature's pre-activation, or the logit / logit difference) is

    target = Σ_sources J_{target←s} · s + c_target,

with J the Jacobian of the frozen model (direct effects through the residual stream and the frozen OV
circuits; no path goes through another transcoder, whose activations are sources) and c_target its
value with every source zero (all biases: b_enc, b_dec, attention biases, norm offsets, b_U). Edges are
J's entries between the active sources and targets, computed without autograd and without materialising J:
targets' reads carried down the frozen layers, sources' writes carried up, meeting at one layer
(:mod:`interp.features._jacobian`, docs/math.md §26).

:func:`attribution_graph` runs in five phases (as circuit-tracer's ``attribute``): 1. the inputs checked, 2. the
real run, 3. the targets chosen (:class:`LogitTargets`, and the node order :class:`NodeOrder`), 4. the adjacency
filled (edges, constant terms, values), 5. the graph assembled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._norms import apply_frozen
from interp._validate import check_positive_int, is_int, is_real
from interp.attribution.internal import TokenSpec
from interp.engine import readout, unembedding
from interp.engine.internal import soft_cap
from interp.errors import ArgumentError
from interp.features._jacobian import Ends, FrozenJacobian
from interp.dictionaries.internal import top_and_bottom_logits
from interp.features._prompt import one_prompt, output_tokens, position, token_text
from interp.features._replacement import RealRun, check_replaceable, real_forward
from interp.features._result import AttributionGraph, check_thresholds
from interp.dictionaries import CrossLayerTranscoder, Transcoder
from interp.labels import Feature, FeatureError
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["attribution_graph"]


def attribution_graph(
    model: Model,
    prompt: str | Tensor,
    transcoders: Union[Sequence[Transcoder], CrossLayerTranscoder],
    *,
    target: Optional[TokenSpec] = None,
    wrong: Optional[TokenSpec] = None,
    pos: int = -1,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    constant_prefix: int = 0,
    logit_effects: int = 0,
    batch_size: int = 256,
) -> AttributionGraph:
    """The exact attribution graph of ``prompt`` over per-layer ``transcoders`` (module docstring), or over one
    :class:`CrossLayerTranscoder`: its feature of layer l is one node whose decoders write at l and every later
    layer (its edges into a target sum the paths from each of its writes), the error node of layer l' is the MLP's
    write minus the CLT's joint reconstruction of it.

    ``target`` is the token whose logit at position ``pos`` is the graph's output (node ``logit``); with ``wrong``
    the output is the logit difference target − wrong. Without ``target`` the outputs are the top logits (nodes
    ``logit[<id>]``): the most probable tokens until their probabilities sum to ``desired_logit_prob``, at most
    ``max_n_logits``, each weighted by its probability in influence (as circuit-tracer selects them). Nodes: active
    features (layer, position, feature), error nodes (one per layer and position), token embeddings (one per
    position), the outputs. Edges: ``adjacency[target, source]``, the direct effect of the source on the target's
    pre-activation (features) or on the output, through the replacement model with attention patterns and norm
    scales frozen. Each target's constant term (all biases) is in ``bias``; the closure
    ``max |value − (Σ edges + bias)|`` is stored as ``closure_error`` (``relative_error`` divides each by
    Σ|edges| + |bias|). Pre-norm decoders with MLPs only (sequential or parallel blocks, sublayer output norms);
    where the model soft-caps its logits (Gemma 2) the output is the logit before the cap (the linear read).
    ``node_threshold`` and ``edge_threshold`` (in (0, 1]) are the graph's pruning thresholds as circuit-tracer
    defines them: the defaults of ``.prune()`` and ``.export()``; the graph itself is whole.
    ``constant_prefix`` = k holds the MLP writes at the first k positions at their real values: their features
    are not nodes, their error nodes have no edges, and those writes join every target's constant term (the graph
    still closes; every other edge is unchanged). k = 1 is circuit-tracer's convention (the BOS position, an
    attention sink whose MLP writes large and uninformative features; 4 for Gemma 3 chat templates). The graph
    records k (``constant_prefix``), which :meth:`AttributionGraph.faithfulness` holds too.
    ``logit_effects`` = k keeps each feature's k most promoted and k most suppressed tokens (its decoder row
    straight to the logits at its position), which the viewer shows on hover; 0 (the default) keeps none: they
    are display data, one product with W_U per distinct feature, the larger part of the build for a large
    vocabulary. ``batch_size`` targets (or sources) are carried through the frozen layers per pass (memory ∝
    batch_size · positions · d_model; the edges do not depend on it).
    """
    # 1. the inputs checked
    require_model(model)
    check_replaceable(model, transcoders)
    _check_options(node_threshold, edge_threshold, batch_size, max_n_logits, logit_effects, desired_logit_prob)
    tokens, mask = one_prompt(model, prompt)
    n = tokens.shape[1]
    pos = position("pos", pos, n)
    t_id, w_id = output_tokens(model, tokens, pos, target, wrong, "attribution_graph")
    constant_prefix = _check_prefix(constant_prefix, n)

    # 2. the real run: the replacement model frozen at it, the MLP writes at the first positions held as constants
    real = real_forward(model, tokens, mask, transcoders)
    held = real.hold_prefix(constant_prefix)

    # 3. the targets: the outputs at pos (a logit, a logit difference or the top logits) and the active features
    outputs = LogitTargets.choose(model, real, pos, t_id, w_id, desired_logit_prob, max_n_logits)
    nodes = NodeOrder([len(x) for x in real.acts], n, len(outputs.labels))

    # 4. the adjacency filled: each target's constant term and real value, then every edge (the frozen Jacobian)
    bias, value = _constants(real, held, nodes, outputs)
    A = _edges(real, nodes, outputs, batch_size)

    # 5. the graph assembled
    return _assemble(
        model,
        tokens,
        real,
        nodes,
        outputs,
        A,
        bias,
        value,
        logit_effects=logit_effects,
        node_threshold=node_threshold,
        edge_threshold=edge_threshold,
        constant_prefix=constant_prefix,
    )


def _check_options(
    node_threshold: Any,
    edge_threshold: Any,
    batch_size: Any,
    max_n_logits: Any,
    logit_effects: Any,
    desired_logit_prob: Any,
) -> None:
    """The options that do not depend on the prompt (typed errors naming the argument, its value and what is
    allowed)."""
    check_thresholds(node_threshold, edge_threshold)
    check_positive_int("batch_size", batch_size)
    check_positive_int("max_n_logits", max_n_logits)
    if not is_int(logit_effects) or logit_effects < 0:
        raise ArgumentError(f"logit_effects={logit_effects!r} must be an int ≥ 0 (0: none)")
    if not is_real(desired_logit_prob) or not 0.0 < desired_logit_prob <= 1.0:
        raise ArgumentError(f"desired_logit_prob={desired_logit_prob!r} must be a number in (0, 1]")


def _check_prefix(constant_prefix: Any, n: int) -> int:
    """``constant_prefix`` as an int if it is one in [0, n), else an :class:`ArgumentError`."""
    if not is_int(constant_prefix) or not 0 <= constant_prefix < n:
        raise ArgumentError(
            f"constant_prefix={constant_prefix!r} must be an int in [0, {n - 1}] for a prompt of {n} "
            "tokens (1: the BOS position's MLP writes are constants, circuit-tracer's convention)"
        )
    return int(constant_prefix)


@dataclass(frozen=True)
class LogitTargets:
    """The graph's outputs at position ``pos`` (K of them): ``ids`` the tokens they name, ``u`` [d, K] and ``b_u`` [K]
    each one's read of the final norm's output (a column of W_U and b_U, or the difference of two), ``value`` [K]
    its value at the real forward, ``weight`` [K] its weight in influence (a top logit's probability; 1 for a chosen
    output), ``prob`` [K] the model's probability of its token (of the target for a logit difference), ``labels`` its
    node labels and ``text`` what the graph's ``target`` says."""

    pos: int
    ids: list[int]
    u: Tensor
    b_u: Tensor
    value: Tensor
    weight: Tensor
    labels: list[str]
    text: str
    prob: Tensor

    @classmethod
    def choose(
        cls,
        model: Model,
        real: RealRun,
        pos: int,
        t_id: Optional[int],
        w_id: Optional[int],
        desired_logit_prob: float,
        max_n_logits: int,
    ) -> "LogitTargets":
        """``t_id``'s logit (minus ``w_id``'s where given), or without ``t_id`` the top logits by the model's own
        (soft-capped) probabilities: the most probable until they sum to ``desired_logit_prob``, at most
        ``max_n_logits`` (circuit-tracer's choice)."""
        a, dt, fw = model.arch, real.dtype, real.frozen.w  # fw: the weights in the replacement model's dtype
        W_U, b_U = unembedding(model, weights=fw)
        logits = readout(model, real.final[pos], weights=fw, capped=False)  # the linear logits (before the cap)
        capped = soft_cap(logits, a.final_softcap)
        probs = torch.softmax(capped.double(), -1)  # the model's own next-token probabilities
        if t_id is None:
            top_p, top_i = probs.sort(descending=True)
            K = min(int((top_p.cumsum(0) < desired_logit_prob).sum()) + 1, max_n_logits, a.d_vocab)
            ids = top_i[:K].tolist()
            u, b_u, value, weight = W_U[:, ids], b_U[ids], logits[ids], top_p[:K].to(dt)
            labels = [f"logit[{i}]" for i in ids]
            text = " | ".join(token_text(model, i) for i in ids)
        else:
            ids = [t_id] if w_id is None else [t_id, w_id]
            u, b_u = W_U[:, t_id], b_U[t_id]
            if w_id is not None:
                u, b_u = u - W_U[:, w_id], b_u - b_U[w_id]
            u, b_u = u[:, None], b_u[None]
            value = (logits[t_id] - (0 if w_id is None else logits[w_id]))[None]
            weight = torch.ones(1, dtype=dt, device="cpu")
            labels = ["logit"]
            text = token_text(model, t_id) + ("" if w_id is None else f" − {token_text(model, w_id)}")
        if a.final_softcap:  # the graph's output is the linear logit; the model reports c·tanh(logit / c)
            text += f" (before the soft-cap {a.final_softcap:g})"
        return cls(pos, ids, u, b_u, value, weight, labels, text, probs[ids[: len(labels)]].to(dt).cpu())


@dataclass(frozen=True)
class NodeOrder:
    """The graph's nodes in order: the active features layer by layer (``counts[l]`` of layer l, from row
    ``offsets[l]``), one error node per layer and position, one token node per position, then the K outputs."""

    counts: list[int]
    n: int
    K: int

    @property
    def L(self) -> int:
        return len(self.counts)

    @property
    def offsets(self) -> list[int]:
        return [sum(self.counts[:l]) for l in range(self.L)]

    @property
    def n_feat(self) -> int:
        return sum(self.counts)

    @property
    def n_err(self) -> int:
        return self.L * self.n

    @property
    def N(self) -> int:
        return self.n_feat + self.n_err + self.n + self.K

    def features(self, l: int) -> slice:
        """Layer l's feature rows."""
        return slice(self.offsets[l], self.offsets[l] + self.counts[l])

    @property
    def errors(self) -> slice:
        return slice(self.n_feat, self.n_feat + self.n_err)

    @property
    def tokens(self) -> slice:
        return slice(self.n_feat + self.n_err, self.N - self.K)

    @property
    def outputs(self) -> slice:
        return slice(self.N - self.K, self.N)

    def targets(self) -> Tensor:
        """The rows with incoming edges: every feature, then the outputs (host indices)."""
        return torch.cat([torch.arange(self.n_feat, device="cpu"), torch.arange(self.N - self.K, self.N, device="cpu")])


def _constants(real: RealRun, held: list[Tensor], nodes: NodeOrder, out: LogitTargets) -> tuple[Tensor, Tensor]:
    """Each node's constant term (``bias`` [N]: the frozen model with every source zero and the held writes at their
    real values) and its value at the real forward (``value`` [N]); zero for the sources. On the host, where the
    graph's tables are kept."""
    frozen, a, dt = real.frozen, real.frozen.a, real.dtype
    with torch.no_grad():
        zeros = torch.zeros(1, nodes.n, a.d_model, dtype=dt, device=real.emb.device)
        c_pres, c_out = frozen.forward(zeros, [h[None] for h in held], real.feats, out.pos, out.u, out.b_u)
    bias = torch.zeros(nodes.N, dtype=dt, device="cpu")
    value = torch.zeros(nodes.N, dtype=dt, device="cpu")
    for l in range(nodes.L):
        bias[nodes.features(l)] = c_pres[l][0].cpu()
        value[nodes.features(l)] = real.pre[l].detach().cpu()
    bias[nodes.outputs] = c_out[0].cpu()
    value[nodes.outputs] = out.value.detach().cpu()
    return bias, value


def _host_full(count: int, v: int) -> Tensor:
    return torch.full((count,), v, dtype=torch.long, device="cpu")


def _target_ends(real: RealRun, nodes: NodeOrder, out: LogitTargets) -> Ends:
    """The targets' reads carried to the stream they read (every active feature, layer by layer, then the outputs),
    their layer (n_layers for an output), position and row (:class:`Ends`' indices are host indices)."""
    fr, tcs, feats, L = real.frozen, real.tcs, real.feats, nodes.L
    reads = [fr.stream_reads(tcs[l].W_enc[feats[l][1]], feats[l][0], l) for l in range(L)]
    reads.append(fr.stream_reads(out.u.T, torch.full((nodes.K,), out.pos, dtype=torch.long, device=out.u.device), L))
    layer = [_host_full(nodes.counts[l], l) for l in range(L)] + [_host_full(nodes.K, L)]
    pos = [feats[l][0].cpu() for l in range(L)] + [_host_full(nodes.K, out.pos)]
    return Ends(torch.cat(reads), torch.cat(layer), torch.cat(pos), nodes.targets())


def _source_ends(real: RealRun, nodes: NodeOrder) -> tuple[Ends, Tensor]:
    """The sources' writes (per layer: its features' a_f W_dec[f], then its error nodes; then the token
    embeddings), their layer (−1 for an embedding), position and column; and ``owner`` [X]: a CLT feature's writes
    at the layers after its own are extra sources in columns N, N + 1, … of their own, ``owner`` their feature's
    column (empty for per-layer transcoders)."""
    feats, n = real.feats, nodes.n
    every = torch.arange(n, device="cpu")
    vecs, layer, pos, index, owner = [], [], [], [], []
    extra = nodes.N
    for k in range(nodes.L):
        rows = nodes.features(k)
        cols = torch.arange(rows.start, rows.stop, device="cpu")
        for j, W in real.writes(k, feats[k][1]):
            vecs.append(W * real.acts[k][:, None])
            layer.append(_host_full(nodes.counts[k], j))
            pos.append(feats[k][0].cpu())
            if j == k:
                index.append(cols)
            else:
                index.append(torch.arange(extra, extra + len(cols), device="cpu"))
                owner.append(cols)
                extra += len(cols)
        vecs.append(real.errs[k])
        layer.append(_host_full(n, k))
        pos.append(every)
        index.append(nodes.n_feat + k * n + every)
    vecs.append(real.emb)
    layer.append(_host_full(n, -1))
    pos.append(every)
    index.append(nodes.tokens.start + every)
    return (
        Ends(torch.cat(vecs), torch.cat(layer), torch.cat(pos), torch.cat(index)),
        torch.cat(owner) if owner else torch.zeros(0, dtype=torch.long, device="cpu"),
    )


def _edges(real: RealRun, nodes: NodeOrder, out: LogitTargets, batch_size: int) -> Tensor:
    """The adjacency [N, N] (on the host): the frozen model's Jacobian between every source and every target
    (:mod:`interp.features._jacobian`); zero where a source cannot reach a target, and in the sources' rows. A CLT
    feature's writes at later layers are filled into columns of their own, then added into its column."""
    src, owner = _source_ends(real, nodes)
    A = torch.zeros(nodes.N, nodes.N + len(owner), dtype=real.dtype, device=real.emb.device)
    FrozenJacobian(real.frozen, nodes.n).fill(A, _target_ends(real, nodes, out), src, batch_size)
    if len(owner):
        A[:, : nodes.N].index_add_(1, owner.to(A.device), A[:, nodes.N :])
        A = A[:, : nodes.N].contiguous()
    return A.cpu()


def _closure(A: Tensor, bias: Tensor, value: Tensor, nodes: NodeOrder) -> tuple[float, float]:
    """max |value − (Σ edges + bias)| over the targets, and each residual over Σ|edges| + |bias| (its largest)."""
    res = value - (A.sum(1) + bias)
    res[nodes.n_feat : nodes.N - nodes.K] = 0  # sources have no incoming edges
    scale = A.abs().sum(1) + bias.abs()
    rows = nodes.targets()
    closure = float(res[rows].abs().max())
    relative = float((res[rows].abs() / scale[rows].clamp_min(torch.finfo(A.dtype).tiny)).max())
    return closure, relative


def _node_table(real: RealRun, nodes: NodeOrder, out: LogitTargets) -> dict[str, Any]:
    """The nodes' columns in graph order: labels, kinds, layers, positions, feature ids (−1 for a non-feature) and
    activations (a feature's activation; an error node's or token's ‖vector‖; 0 for an output)."""
    L, n, dt = nodes.L, nodes.n, real.dtype
    labels: list[str] = []
    kinds: list[str] = []
    layers: list[int] = []
    poss: list[int] = []
    fids: list[int] = []

    def add(label: str, kind: str, layer: int, p: int, f: int = -1) -> None:
        labels.append(label)
        kinds.append(kind)
        layers.append(layer)
        poss.append(p)
        fids.append(f)

    activation = torch.zeros(nodes.N, dtype=dt, device="cpu")
    for l in range(L):
        for p, f in zip(real.feats[l][0].tolist(), real.feats[l][1].tolist()):
            add(str(Feature(l, f, p)), "feature", l, p, f)
        activation[nodes.features(l)] = real.acts[l].detach().cpu()
    for l in range(L):
        for p in range(n):
            add(str(FeatureError(l, p)), "error", l, p)
    activation[nodes.errors] = torch.stack([er.detach().norm(dim=-1) for er in real.errs]).reshape(-1).cpu()
    for p in range(n):
        add(f"embed@{p}", "token", -1, p)
    activation[nodes.tokens] = real.emb.detach().norm(dim=-1).cpu()
    for lab in out.labels:
        add(lab, "logit", L, out.pos)
    return dict(
        node_labels=labels, node_kind=kinds, node_layer=layers, node_pos=poss, node_feature=fids, activation=activation
    )


def _logit_effect_table(model: Model, real: RealRun, nodes: NodeOrder, k: int) -> dict[str, Any]:
    """Each feature's ``k`` most promoted and suppressed tokens (:func:`_logit_effects`) as the graph's columns
    (ids −1 and values 0 for the other nodes; their text where the model has a tokenizer); None for k = 0."""
    if not k:
        return dict(logit_effect_ids=None, logit_effect_values=None, logit_effect_strs=None)
    k = min(k, model.arch.d_vocab)
    ids = torch.full((nodes.N, 2 * k), -1, dtype=torch.long, device="cpu")
    vals = torch.zeros(nodes.N, 2 * k, dtype=real.dtype, device="cpu")
    if nodes.n_feat:
        ids[: nodes.n_feat], vals[: nodes.n_feat] = _logit_effects(real, k)
    strs: Optional[list[list[str]]] = None
    if model.tokenizer is not None:
        uniq = sorted(set(ids[: nodes.n_feat].reshape(-1).tolist()))
        text = dict(zip(uniq, model.tokenizer.batch_decode([[i] for i in uniq]))) if uniq else {}
        strs = [[text[i] for i in row] if row[0] >= 0 else [] for row in ids.tolist()]
    return dict(logit_effect_ids=ids, logit_effect_values=vals, logit_effect_strs=strs)


def _assemble(
    model: Model,
    tokens: Tensor,
    real: RealRun,
    nodes: NodeOrder,
    out: LogitTargets,
    A: Tensor,
    bias: Tensor,
    value: Tensor,
    *,
    logit_effects: int,
    node_threshold: float,
    edge_threshold: float,
    constant_prefix: int,
) -> AttributionGraph:
    """The :class:`AttributionGraph`: the adjacency, constant terms and values with the node table, the closure, the
    outputs' weights, the display data (token text, logit effects) and the held prefix."""
    closure, relative = _closure(A, bias, value, nodes)
    weight = torch.zeros(nodes.N, dtype=real.dtype, device="cpu")
    weight[nodes.outputs] = out.weight.cpu()
    prob = torch.zeros(nodes.N, dtype=real.dtype, device="cpu")
    prob[nodes.outputs] = out.prob
    tok = model.tokenizer
    ids = tokens[0].tolist()
    return AttributionGraph(
        adjacency=A,
        bias=bias,
        value=value,
        **_node_table(real, nodes, out),
        tokens=ids,
        target_ids=out.ids,
        target=out.text,
        closure_error=closure,
        relative_error=relative,
        n_layers=nodes.L,
        model_name=model.name,
        output_weight=weight,
        output_prob=prob,
        token_strs=None if tok is None else [tok.decode([t]) for t in ids],
        output_token_strs=None if tok is None else [tok.decode([t]) for t in out.ids],
        **_logit_effect_table(model, real, nodes, logit_effects),
        node_threshold=float(node_threshold),
        edge_threshold=float(edge_threshold),
        constant_prefix=constant_prefix,
    ).to(model.device)  # assembled on the host (the N × N adjacency); the result on the model's device


def _logit_effects(real: RealRun, k: int) -> tuple[Tensor, Tensor]:
    """Each active feature's (graph order) ``k`` most promoted and ``k`` most suppressed tokens per unit of its
    activation, directly at its own position p: W_dec[f] through the final norm with p's frozen scale, then
    W_U — (ids [n_feat, 2k], values [n_feat, 2k]). The scale 1/σ_p is positive, so a feature's tokens are the
    same at every position: each distinct feature's product is computed once, then divided by σ_p."""
    fr = real.frozen
    w = fr.w
    k = min(k, int(w.W_U.shape[1]))  # type: ignore[union-attr]
    W_U = w.W_U
    assert W_U is not None  # _check: a decoder with an unembedding
    uniq: list[Tensor] = []
    where: list[Tensor] = []
    for l, (_, f_idx) in enumerate(real.feats):
        u, inv = torch.unique(f_idx, return_inverse=True)
        where.append(inv + sum(int(x.shape[0]) for x in uniq))
        Ws = [W for _, W in real.writes(l, u)]  # a CLT feature's writes at every layer reach the final stream
        uniq.append(Ws[0] if len(Ws) == 1 else torch.stack(Ws).sum(0))
    if not uniq:
        return torch.zeros(0, 2 * k, dtype=torch.long, device="cpu"), torch.zeros(0, 2 * k, dtype=fr.dt, device="cpu")
    with torch.no_grad():
        one = torch.ones((), dtype=fr.dt, device=W_U.device)  # σ_p is divided out below, per position
        U = apply_frozen(torch.cat(uniq), w.lnf_w, one, fr.a.norm)  # γ ⊙ C(W_dec[f]) (C the centring of LayerNorm)
        ids, vals = top_and_bottom_logits(U, W_U, k)
    at = torch.cat(where)
    sigma = torch.cat([fr.s_final[p_idx] for p_idx, _ in real.feats])  # [n_feat, 1]
    return ids[at].cpu(), (vals[at] / sigma).cpu()
