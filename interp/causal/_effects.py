"""Total, direct and indirect effect of every node (docs/math.md, "Direct effect = the ledger").

For a node n with write a_n (a head's z_h W_O^h, an MLP's output, an embedding), the metric M and
the noising ablation a_n → ã_n (the corrupt run's value, zero, a mean or a resample):

    total(n)    = M(clean run with a_n ← ã_n, everything downstream recomputed) − M(clean)
    direct(n)   = M(x_final + J_n (ã_n − a_n), final scale σ frozen) − M(x_final, σ frozen)
    indirect(n) = total(n) − direct(n)

where J_n carries a write to the final residual with every later node frozen at its clean value:
the identity where the stream is the sum of the writes (pre-norm and parallel blocks), and where the block
norms the stream after each join (post-norm, ``model.block.normed_stream``) every later Add & Norm with its
scale frozen at the clean run's (γ ⊙ centre(·)/σ); a head's write first passes its layer's output norm where
the block has one (``model.block.out_norm("attn")``), its scale frozen too. With the final scale frozen the
logits are linear in the final residual, so for a logit difference direct(n) is exactly the
difference of n's direct-logit-attribution terms between the clean run and the run with only n
replaced — the same number two ways (tests/causal/test_effects.py).

Cost: one noising sweep (the total effects) and one batched readout of n_nodes rows (direct).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._norms import apply_frozen
from interp._validate import check_bool, check_choice, check_positive_int, shardable
from interp.causal._common import Pair, PatchNode, check_reference_spread, make_pair, resolve_nodes
from interp.engine.internal import RunCache
from interp.causal._patch import ABLATIONS, check_ablation, sweep_nodes
from interp.causal._result import Effects
from interp.errors import ArgumentError
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["effects", "node_write", "carry_to_final"]

_WRITE_SITES = ("z", "mlp_out", "embed.token", "embed.pos", "embed.type")


def node_write(model: Model, node: PatchNode, run: Optional[RunCache], like: RunCache) -> Tensor:
    """The node's write into the residual stream, [P, n, d_model] (zeros when ``run`` is None)."""
    src = run if run is not None else like
    if node.site == "z":
        z = src.acts["z"][node.layer]
        if z is None or node.head is None:
            raise RuntimeError("head outputs were not captured")
        out = z[:, :, node.head] @ model.weights.W_O[node.layer, node.head]
    elif node.site == "mlp_out":  # (after the MLP's output norm, where the block has one: its write itself)
        m = src.acts["mlp_out"][node.layer]
        if m is None:
            raise RuntimeError("MLP outputs were not captured")
        out = m
    else:
        out = src.embed[node.site]
    return torch.zeros_like(out) if run is None else out


def carry_to_final(model: Model, node: PatchNode, delta: Tensor, clean: RunCache, pos: Optional[Tensor]) -> Tensor:
    """J_n δ: a change of n's write carried to the final residual with every later node frozen.

    ``delta`` [P, m, d] at positions ``pos`` [P, m] (or every position when None). A head's write through its
    layer's output norm (where the block has one); then, where the block norms the stream after each join,
    through every later stream norm — each with its scale frozen at the clean run's (``RunCache.scales``, by
    norm id); otherwise the identity.
    """
    a, w, block = model.arch, model.weights, model.block

    def sig(t: Tensor) -> Tensor:  # a clean σ [P, n, 1] at the positions of delta
        return t if pos is None else torch.gather(t, 1, pos[..., None])

    def frozen(x: Tensor, norm: str, l: int) -> Tensor:  # γ ⊙ centre(x) / σ of layer l's norm ``norm``
        return apply_frozen(x, getattr(w, f"{norm}_w")[l], sig(clean.scales[norm][l]), a.norm)

    x = delta
    out_norm = block.out_norm("attn")
    if node.site == "z" and out_norm is not None:
        # a head's write passes its layer's output norm (shared by the layer's heads): γ' ⊙ δ / σ'
        x = frozen(x, out_norm, node.layer)
    if not block.normed_stream:
        return x

    if node.layer < 0:  # embeddings: the embedding norm, then every block
        if w.ln_emb_w is not None:
            parts = torch.stack(list(clean.embed.values())).sum(0)
            s = torch.sqrt(((parts - parts.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + a.norm_eps)
            x = apply_frozen(x, w.ln_emb_w, sig(s), "layernorm")
        start, joins = 0, None
    else:
        start, joins = node.layer, ("attn" if node.site == "z" else "mlp")
    for l in range(start, a.n_layers):
        after = joins is None or l > start  # past the node's own add (its layer's earlier norms do not see it)
        for st in block.walk():
            if after and st.op == "norm":
                x = frozen(x, st.norm, l)  # type: ignore[arg-type]
            after = after or (st.op == "add" and st.sub == joins)
    return x


@shardable
def effects(
    model: Model,
    clean: Any,
    corrupt: Any = None,
    *,
    metric: Any,
    nodes: Union[str, Sequence[Any]] = "components",
    ablation: str = "corrupt",
    reference: Any = None,
    batch_size: Optional[int] = None,
    progress: bool = True,
    seed: int = 0,
    cluster: Any = None,
    out: Any = None,
) -> Effects:
    """Total, direct and indirect effect of each node's write on ``metric`` (module docstring).

    ``nodes``: "components" (embeddings, heads, MLPs), "heads", "mlps" or a list of such labels.
    ``ablation``: "corrupt" (needs ``corrupt``), "zero", "mean" or "resample" (need ``reference``).
    ``cluster``: None (in process) or an ``interp.RayCluster`` (prompts sharded over its workers, merged
    exactly); ``out``: a folder keeping each finished shard for resume (docs/scaling.md).
    """
    # 1. the inputs checked (a cluster runs this call per shard of the prompts)
    require_model(model)
    check_choice("ablation", ablation, ABLATIONS)
    check_bool("progress", progress)
    check_positive_int("batch_size", batch_size, allow_none=True)
    check_ablation("noise", ablation, reference)
    if isinstance(nodes, str) and nodes not in ("components", "heads", "mlps"):
        raise ArgumentError(
            f"nodes={nodes!r}: effects are defined for writes; use 'components', 'heads', 'mlps' "
            "or a list of head / MLP / embedding labels"
        )

    # 2. the clean and corrupt batches (the metric bound to them), the nodes (writes only)
    pair = make_pair(model, clean, corrupt, metric, need_corrupt=ablation == "corrupt")
    check_reference_spread(model, pair, [ablation], reference, arg="ablation")
    node_list, kind = _write_nodes(model, nodes)

    # 3. the total effects: one noising sweep (keeping the clean run's norm scales where J_n needs them)
    block = model.block
    sw = sweep_nodes(
        model,
        pair,
        node_list,
        positions="all",
        direction="noise",
        ablation=ablation,
        reference=reference,
        batch_size=batch_size,
        progress=progress,
        seed=seed,
        desc=f"effects {kind}",
        keep_scales=block.normed_stream or block.sublayer_norms,
        extra_sites={"attn_out", "mlp_out", "resid_mid"} if block.normed_stream else set(),
    )
    total = sw.per_prompt - sw.clean_m[None]

    # 4. the direct effects (one batched frozen-scale readout), the indirect ones the rest
    direct = _direct(model, pair, node_list, sw.c_run, sw.src, sw.clean_out)
    indirect = total - direct

    # 5. the result
    per = torch.stack([total, direct, indirect])
    return Effects(
        total=total.mean(-1),
        direct=direct.mean(-1),
        indirect=indirect.mean(-1),
        per_prompt=per,
        labels=[nd.text for nd in node_list],
        clean=float(sw.clean_m.mean()),
        clean_per_prompt=sw.clean_m,
        metric=pair.bound.name,
        ablation=ablation,
        n_layers=model.arch.n_layers,
        n_heads=model.arch.n_heads,
        corrupt=float(sw.corrupt_m.mean()),
    )


def _write_nodes(model: Model, nodes: Any) -> tuple[list[PatchNode], str]:
    """``nodes`` resolved (:func:`interp.causal._common.resolve_nodes`), each a write: a head, an MLP or an
    embedding."""
    node_list, kind = resolve_nodes(model, nodes)
    bad = [nd.text for nd in node_list if nd.site not in _WRITE_SITES]
    if bad:
        raise ArgumentError(
            f"nodes={bad[:3]}: effects are defined for writes (heads, MLPs, embeddings), "
            "not resid points, head inputs or patterns"
        )
    return node_list, kind


def _direct(
    model: Model,
    pair: Pair,
    node_list: list[PatchNode],
    c_run: RunCache,
    src: Optional[RunCache],
    clean_out: Optional[Tensor],
) -> Tensor:
    """direct [n_nodes, P]: one batched frozen-scale readout of x_final + J_n δ_n for every node."""
    bound = pair.bound
    P, n = pair.clean.tokens.shape
    dev = model.device
    final = c_run.final  # [P, n, d]
    if bound.positions is None:
        pos = None
        x0 = final
    else:
        span = torch.arange(bound.span, device=dev)
        pos = bound.positions.to(dev)[:, None] + span  # [P, m]: the positions the metric reads
        x0 = torch.gather(final, 1, pos[..., None].expand(P, bound.span, final.shape[-1]))
    from interp.causal._metrics import final_norm

    _, sigma = final_norm(model, x0)  # the clean run's final scale at these positions: frozen
    deltas = []
    for nd in node_list:
        d = node_write(model, nd, src, c_run) - node_write(model, nd, c_run, c_run)
        if pos is not None:
            d = torch.gather(d, 1, pos[..., None].expand(P, bound.span, d.shape[-1]))
        deltas.append(carry_to_final(model, nd, d, c_run, pos))
    D = torch.stack(deltas)  # [N, P, m, d]
    N = D.shape[0]
    prompt = torch.arange(P, device=dev).repeat(N)

    def metric(x: Tensor, prompt_: Tensor) -> Tensor:  # x [R, m, d]
        out = bound.read(model, x, scale=sigma[prompt_])
        out = bound.select(out, prompt_) if pos is None else (out[:, 0] if bound.span == 1 else out)
        return bound(out, prompt=prompt_, clean=clean_out)

    with torch.inference_mode():
        base = metric(x0, torch.arange(P, device=dev))  # = the clean metric (its own scale)
        patched = metric((x0[None] + D).reshape(N * P, *x0.shape[1:]), prompt)
    return (patched.reshape(N, P) - base[None]).to(torch.float64 if model.dtype == torch.float64 else torch.float32)
