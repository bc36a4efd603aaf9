"""Attribution patching (AtP): every node's patching effect to first order, from two forwards and one backward.

Patching node n (replacing its activation a_n in a *base* run by its value in a *source* run) changes the
metric M by, to first order in Δa_n = a_n(source) − a_n(base),

    M(base | do(a_n ← a_n(source))) − M(base)  ≈  Δa_n · ∂M/∂a_n |_base              (Nanda 2023; Kramár et al. 2024)

with the gradient taken in the base run. ``direction`` picks the runs as :func:`interp.patch` does:
"denoise" (default) runs the corrupt input and patches in clean activations (gradient at the corrupt
input, Nanda's convention); "noise" runs the clean input and patches in corrupt ones (gradient at the
clean input, AtP's convention in Kramár et al.). ``values`` are M(base) + estimate, the estimate of what
:func:`interp.patch` with the same arguments returns.

Nodes are read at the engine's points (:func:`interp.engine.internal.read_forward`, transformer-lens's
hook names): a head's output through its z (z_h W_O^h is linear in z_h, so
Δz_h·∂M/∂z_h = Δ(z_h W_O^h)·∂M/∂(z_h W_O^h)); an MLP's output; an embedding; a resid point; a head's
q, or a KV head's k or v (an affine map of the head's input, so patching the input or the vector is
the same first-order term).

**QK fix** (``qk_fix=True``; Kramár et al. 2024 §3.1.1, "AtP*"). A query or key enters M through a
softmax, which saturates: a large change of a score may move the pattern a lot while its gradient is
~0. For q and k nodes the fix computes the attention pattern A' exactly with the patched query / key
and linearises only after the softmax:

    query q_t of head h:   ĉ = (A'_t − A_t) · ∂M/∂A_t,        A'_t = softmax(ℓ_t with q_t(source))
    key k_s of KV head g:  ĉ = Σ_{h ∈ g} Σ_t (A'_t − A_t) · ∂M/∂A_t,   A'_t = softmax(ℓ_t + Δ_ts e_s),
                           Δ_ts = scale · q_t · (k_s(source) − k_s(base))

One key changes one score per row, so with p = A_ts, p' = sigmoid(logit(p) + Δ_ts) the new row is
A'_ts = p', A'_tj = A_tj (1 − p')/(1 − p) (j ≠ s), and

    (A'_t − A_t) · g_t = (p' − p) (g_ts − m_t,−s),   m_t,−s = Σ_{j≠s} A_tj g_tj / (1 − p)

(the mean of g under the row renormalised without s) — O(T²) per head for every key at once instead
of a softmax per key. For the one key per row with p > ½, m_t,−s is computed from the scores with s
masked (no cancellation in 1 − p). Other nodes keep the plain estimate: a head's output, an MLP, a
resid point or a value does not reach M through its own softmax (for a head's output Δz is the exact
change of the head's attention output, softmax included).

Steps: (1) the source run (inference mode) keeps every node's activation (and rotated q/k for the fix);
(2) the base run keeps the same with their autograd graph and stops after the last block; M is read at
its position; (3) one ``autograd.grad`` of Σ_prompts M gives ∂M/∂a_n for every node (and ∂M/∂A where
the fix needs it); (4) ĉ(n) = Σ Δa_n·∂M/∂a_n per prompt and position. Both runs are walks of the engine's
forward; gradients are taken with respect to activations only (the graph starts at the embedding writes, the
weights are constants), and nothing is attached to the model, so an exception leaves nothing behind.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence, Union

import torch
from torch import Tensor

from interp._validate import check_bool, check_choice, check_not_inference_mode, shardable
from interp.causal._common import _checked_batch, resolve_nodes
from interp.causal._metrics import as_metric
from interp.causal._result import PatchResult, patch_result
from interp.errors import ShapeError, UnsupportedOperationError
from interp.engine.internal import allowed_keys, require_capabilities, read_forward
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["attribution_patch", "key_fix_each"]

log = logging.getLogger(__name__)

_EMBED_HOOKS = {"token": "embed.hook_out", "pos": "pos_embed.hook_out", "type": "token_type_embed.hook_out"}


@dataclass
class _Site:
    """One hook whose activation holds some nodes: a headed tensor [b, p, n, d] (``slots`` pick the
    heads) or a stream tensor [b, p, d] (one node)."""

    hook: str
    kind: str  # "z" | "q" | "k" | "v" | "pattern" | "attn" (all heads' z summed) | "stream"
    layer: int
    slots: list[int]
    labels: list[str]


def _plan(model: Model, nodes: Any) -> list[_Site]:
    """The hooks to read for ``nodes`` (a node set or labels, resolved as :func:`interp.patch` resolves
    them: same labels, same order), consecutive nodes of one hook grouped."""
    resolved, _ = resolve_nodes(model, nodes)
    sites: list[_Site] = []
    for n in resolved:
        if n.site in ("z", "q", "k", "v", "pattern"):
            hook, kind, slot = f"blocks.{n.layer}.attn.hook_{n.site}", n.site, n.head
        elif n.site == "attn_out":  # Σ_h z_h W_O^h + b_O is affine in the z's: its term is the heads' sum
            hook, kind, slot = f"blocks.{n.layer}.attn.hook_z", "attn", None
        elif n.site == "mlp_out":
            hook, kind, slot = f"blocks.{n.layer}.hook_mlp_out", "stream", None
        elif n.site.startswith("embed."):
            hook, kind, slot = _EMBED_HOOKS[n.site.split(".")[1]], "stream", None
        elif n.site.startswith("resid_"):
            hook, kind, slot = n.text, "stream", None  # the engine's point (a post-norm x_mid: after N1)
        else:
            raise UnsupportedOperationError(
                f"nodes: attribution patching has no estimate for {n.text!r} (site {n.site})"
            )
        last = sites[-1] if sites else None
        if slot is not None and last is not None and last.hook == hook and last.kind == kind:
            last.slots.append(slot)
            last.labels.append(n.text)
        else:
            sites.append(_Site(hook, kind, n.layer, [] if slot is None else [slot], [n.text]))
    return sites


def _pair(model: Model, clean: Any, corrupt: Any) -> tuple[Any, Any]:
    """Clean and corrupt batches of equal shape, pair by pair the same token length."""
    bc, bk = _checked_batch(model, clean, "clean"), _checked_batch(model, corrupt, "corrupt")
    if bk.tokens.shape[0] != bc.tokens.shape[0]:
        raise ShapeError(
            f"corrupt has {bk.tokens.shape[0]} prompts but clean has {bc.tokens.shape[0]}; "
            "give one corrupt prompt per clean prompt"
        )
    lc, lk = bc.attention_mask.sum(1), bk.attention_mask.sum(1)
    if bk.tokens.shape[1] != bc.tokens.shape[1] or bool((lc != lk).any()):
        i = int((lc != lk).nonzero()[0, 0]) if bool((lc != lk).any()) else 0
        raise ShapeError(
            f"corrupt prompt {i} has {int(lk[i])} tokens but clean prompt {i} has {int(lc[i])}; "
            "each clean/corrupt pair must have the same token length (patching aligns positions)"
        )
    return bc, bk


def _qk_hooks(model: Model, layer: int) -> list[str]:
    """The hooks of the queries and keys that meet in the scores (after the QK-norm and the rotation)."""
    # a projection-wide QK-norm: patching one head's q or k moves σ and so every head's normed vector
    require_capabilities(model, "attribution_patch(qk_fix=True)", "attn_softcap", "qk_norm_projection")
    return [f"blocks.{layer}.attn.hook_rot_q", f"blocks.{layer}.attn.hook_rot_k"]


def _qk(store: dict[str, Tensor], names: list[str]) -> tuple[Tensor, Tensor]:
    """The (rotated) queries [b, T, H, d] and keys [b, T, G, d] that meet in the scores, in float64."""
    q, k = (store[n].detach().double() for n in names)
    return q, k


def _run(model: Model, batch: Any, names: list[str], *, grad: bool) -> dict[str, Tensor]:
    """One walk of the engine's forward keeping ``names`` (with their graph, from the embeddings, if ``grad``),
    stopped after the last layer they need."""
    store, _ = read_forward(model, batch.tokens, batch.attention_mask, dict.fromkeys(names), grad=grad)
    return store


def _valid_keys(mask: Tensor, T: int, causal: bool, window: int = 0) -> Tensor:
    """[b, 1, T, T] bool: query t may attend key s (key padding, s ≤ t when causal, within the window)."""
    v = mask.bool()[:, None, None, :].expand(-1, 1, T, T)
    if causal or window:
        v = v & allowed_keys(T, T, causal=causal, window=window, device=mask.device)
    return v


def _softmax(scores: Tensor, valid: Tensor) -> Tensor:
    return torch.softmax(scores.masked_fill(~valid, float("-inf")), dim=-1).nan_to_num(0.0)


def key_fix_each(scores: Tensor, valid: Tensor, grad: Tensor, delta: Tensor) -> Tensor:
    """Σ_t (A'_t − A_t)·g_t for every key s patched alone: [..., T_k] from scores/grad/delta [..., T_q, T_k].

    ``scores`` ℓ (any value where ``valid`` is False), ``grad`` g = ∂M/∂A, ``delta`` Δ_ts the change of
    score (t, s) when key s is patched. Uses (A'_t − A_t)·g_t = (p' − p)(g_ts − m_t,−s) with
    p' = sigmoid(logit p + Δ) (module docstring); exact, O(T²), stable when a row is saturated.
    """
    neg = torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device)
    l = torch.where(valid, scores, neg)
    lse = torch.logsumexp(l, dim=-1, keepdim=True)  # [..., T, 1]
    A = torch.exp(l - lse).nan_to_num(0.0)
    top = l.argmax(dim=-1, keepdim=True)
    is_top = torch.zeros_like(valid).scatter_(-1, top, True) & valid
    l_wo = l.scatter(-1, top, float("-inf"))  # the row without its largest entry
    lse_wo = torch.logsumexp(l_wo, dim=-1, keepdim=True)
    # log Σ_{j≠s} e^{ℓ_j}: from lse for p ≤ ½ (every entry but the row's largest), directly for the largest
    lse_minus = torch.where(is_top, lse_wo, lse + torch.log1p(-A.clamp(max=0.5)))
    p_new = torch.sigmoid(l - lse_minus + delta)
    Ag = (A * grad).sum(-1, keepdim=True)
    m_rest = (Ag - A * grad) / (1 - A.clamp(max=0.5))
    m_top = (torch.softmax(l_wo, dim=-1).nan_to_num(0.0) * grad).sum(-1, keepdim=True)
    m = torch.where(is_top, m_top.expand_as(m_rest), m_rest)
    c = torch.where(valid, (p_new - A) * (grad - m), torch.zeros((), dtype=A.dtype, device=A.device))
    return c.sum(dim=-2)


def _qk_fix_layer(
    kinds: set[str],
    Qb: Tensor,
    Kb: Tensor,
    Qs: Tensor,
    Ks: Tensor,
    A: Tensor,
    gA: Tensor,
    scale: float,
    valid: Tensor,
    group: int,
    each: bool,
    tol: float,
    where: str,
) -> dict[str, Tensor]:
    """The fixed estimates of one layer's q (per query head) and/or k (per KV head) nodes.

    Inputs as captured: Q [b, T, H, d], K [b, T, G, d], A and gA [b, H, T, T]. Returns ``{kind: [b, T, n]}``
    for ``each`` (n = H for q, G for k; the position is the query's / key's) else ``{kind: [b, n]}``.
    """
    f = torch.float64
    Qb, Kb, Qs, Ks = (x.to(f).transpose(1, 2) for x in (Qb, Kb, Qs, Ks))  # [b, n, T, d]
    Kb_h, Ks_h = Kb.repeat_interleave(group, dim=1), Ks.repeat_interleave(group, dim=1)  # query head h -> KV h // group
    g = gA.detach().to(f)
    scores = scale * Qb @ Kb_h.transpose(-1, -2)  # [b, H, T, T]
    A0 = _softmax(scores, valid)
    real_q = valid.any(-1, keepdim=True)  # query rows with at least one key
    gap = float(((A0 - A.detach().to(f)).abs() * real_q).max()) if A.numel() else 0.0
    if gap > tol:
        raise UnsupportedOperationError(
            f"qk_fix=True: could not reproduce the attention pattern of {where} from its queries and keys "
            f"(max |Δ| = {gap:.2e}); this attention variant is not supported by the QK fix"
        )
    b, H, T, _ = g.shape
    out: dict[str, Tensor] = {}
    if "q" in kinds:
        A1 = _softmax(scale * Qs @ Kb_h.transpose(-1, -2), valid)
        c = ((A1 - A0) * g).sum(-1)  # [b, H, T]: the query at t patched
        out["q"] = c.transpose(1, 2) if each else c.sum(-1)
    if "k" in kinds:
        if each:
            delta = scale * Qb @ (Ks_h - Kb_h).transpose(-1, -2)
            c = key_fix_each(scores, valid.expand(b, H, T, T), g, delta)  # [b, H, T_k]
        else:
            A1 = _softmax(scale * Qb @ Ks_h.transpose(-1, -2), valid)
            c = ((A1 - A0) * g).sum(-1).sum(-1)  # [b, H]
        c = c.reshape(b, H // group, group, *c.shape[2:]).sum(2)  # KV head g: its query heads
        out["k"] = c.transpose(1, 2) if each else c
    return out


@shardable
def attribution_patch(
    model: Model,
    clean: Union[str, Sequence[str], Tensor],
    corrupt: Union[str, Sequence[str], Tensor],
    *,
    metric: Any,
    nodes: Union[str, Sequence[Any]] = "components",
    positions: str = "all",
    direction: str = "denoise",
    qk_fix: bool = False,
    cluster: Any = None,
    out: Any = None,
) -> PatchResult:
    """Every node's patching effect to first order (AtP), or with ``qk_fix`` AtP*'s exact-softmax fix for
    queries and keys — two forwards and one backward for all nodes (see the module docstring).

    ``nodes``: "heads", "mlps", "components" (embeddings, heads, MLPs), "resid", "head_inputs" (each head's
    q, each KV head's k and v) or a list of labels. ``positions``: "all" (the node patched at every position)
    or "each" (at one position; values [n_nodes, pos]). ``direction``: "denoise" (run corrupt, patch in clean;
    gradient at corrupt) or "noise" (run clean, patch in corrupt; gradient at clean). Returns a
    :class:`PatchResult` whose ``values`` estimate what :func:`interp.patch` returns for the same arguments.
    ``cluster``: None (in process) or an ``interp.RayCluster`` (prompts sharded over its workers, merged
    exactly); ``out``: a folder keeping each finished shard for resume (docs/scaling.md).
    """
    # 1. the inputs checked (a cluster runs this call per shard of the prompts)
    require_model(model)
    check_choice("positions", positions, ("all", "each"))
    check_choice("direction", direction, ("denoise", "noise"))
    check_bool("qk_fix", qk_fix)
    check_not_inference_mode("attribution_patch")

    # 2. the plan: the nodes' hooks, the paired batches with the metric bound, the base and source runs' inputs
    m = as_metric(metric, model)
    sites = _plan(model, nodes)
    bc, bk = _pair(model, clean, corrupt)
    bound = m.bind(model, bc)
    bc, bk = bound.extend(bc) or bc, bound.extend(bk, name="corrupt") or bk  # a multi-token answer, teacher-forced
    base_b, src_b = (bk, bc) if direction == "denoise" else (bc, bk)
    hooks = _Hooks.of(model, sites, qk_fix)

    # 3. the source run, the base run with its graph, M at both and one backward: ∂M/∂a_n at the base
    runs = _runs(model, bound, base_b, src_b, hooks, direction)

    # 4. the QK fix: every q and k estimate of a layer from its pattern rebuilt with the source's query / key
    each = positions == "each"
    fixed = _qk_fixed(model, sites, hooks, runs, base_b, each)

    # 5. the estimates: M(base) + Σ Δa_n·∂M/∂a_n per node and prompt (and position)
    per_prompt = _estimates(sites, runs, fixed, each)

    # 6. the result
    labels = [lab for s in sites for lab in s.labels]
    M_clean, M_corrupt = (runs.M_src, runs.M_base) if direction == "denoise" else (runs.M_base, runs.M_src)
    log.info(
        "attribution_patch: %d nodes, positions=%s, direction=%s, qk_fix=%s", len(labels), positions, direction, qk_fix
    )
    return patch_result(
        model,
        bc.tokens,
        per_prompt,
        labels,
        M_clean,
        M_corrupt,
        metric=bound.name,
        method="attribution patching",
        direction=direction,
        ablation="corrupt",
        positions=positions,
        details={
            "qk_fix": qk_fix,
            "gradient_at": "corrupt" if direction == "denoise" else "clean",
            "estimate": "M(base) + Σ (a_n(source) − a_n(base))·∂M/∂a_n at base"
            + ("; q/k nodes: exact softmax, linear in the pattern" if qk_fix else ""),
        },
        warn="attribution_patch",
    )


@dataclass
class _Hooks:
    """The hooks of one attribution patch: ``final`` (the last block's output, where M is read); per fixed layer
    (``fix_layers``: the layers with q or k nodes under ``qk_fix``) its ``qk`` hooks and its ``pattern`` hook;
    ``src`` / ``base`` the hooks each run keeps (the nodes', then the fix's) and ``wrt`` the activations M is
    differentiated by (the nodes' and the fixed layers' patterns)."""

    final: str
    fix_layers: list[int]
    qk: dict[int, list[str]]
    pattern: dict[int, str]
    src: list[str]
    base: list[str]
    wrt: list[str]

    @staticmethod
    def of(model: Model, sites: list[_Site], qk_fix: bool) -> "_Hooks":
        final = f"blocks.{model.arch.n_layers - 1}.hook_resid_post"
        names = [s.hook for s in sites]
        fix_layers = sorted({s.layer for s in sites if qk_fix and s.kind in ("q", "k")})
        qk = {l: _qk_hooks(model, l) for l in fix_layers}
        src_names = names + [h for l in fix_layers for h in qk[l]]
        pattern = {l: f"blocks.{l}.attn.hook_pattern" for l in fix_layers}
        base_names = src_names + list(pattern.values())
        wrt = list(dict.fromkeys(names + list(pattern.values())))
        return _Hooks(
            final, fix_layers, qk, pattern, list(dict.fromkeys(src_names)), list(dict.fromkeys(base_names)), wrt
        )


@dataclass
class _Runs:
    """The two runs' kept activations (``src`` inference tensors, ``base`` with their graph), ∂M/∂a at the base
    for each hook of ``wrt`` (None where M does not depend on it) and M [P] of each run."""

    src: dict[str, Tensor]
    base: dict[str, Tensor]
    grads: dict[str, Tensor]  # None where M does not depend on the activation (allow_unused)
    M_base: Tensor
    M_src: Tensor


def _runs(model: Model, bound: Any, base_b: Any, src_b: Any, hooks: _Hooks, direction: str) -> _Runs:
    """Steps (1)–(3) of the module docstring: the source run, the base run with its graph, M at both (KL's clean
    reference the clean run's output) and one ``autograd.grad`` of Σ_prompts M(base)."""
    final = hooks.final
    src = _run(model, src_b, [*hooks.src, final], grad=False)  # inference tensors
    base = _run(model, base_b, [*hooks.base, final], grad=True)
    with torch.inference_mode():
        out_src = bound.read(model, bound.select(src[final]))
    out_src = out_src.clone()  # a normal tensor: KL's clean reference enters the gradient run
    with torch.enable_grad():
        out_base = bound.read(model, bound.select(base[final]))
        clean_out = out_src if direction == "denoise" else out_base.detach()
        M_base = bound(out_base, clean=clean_out)
        wrt = hooks.wrt
        grads = dict(zip(wrt, torch.autograd.grad(M_base.sum(), [base[n] for n in wrt], allow_unused=True)))
    M_base = M_base.detach()
    with torch.inference_mode():
        M_src = bound(out_src, clean=clean_out).clone()
    return _Runs(src, base, grads, M_base, M_src)


def _qk_fixed(
    model: Model, sites: list[_Site], hooks: _Hooks, runs: _Runs, base_b: Any, each: bool
) -> dict[int, dict[str, Tensor]]:
    """Per fixed layer, :func:`_qk_fix_layer`'s estimates of its q and k nodes (one rebuilt pattern a layer)."""
    arch = model.arch
    T = base_b.tokens.shape[1]
    tol = max(1e-4, 100 * torch.finfo(model.dtype).eps)
    fixed: dict[int, dict[str, Tensor]] = {}
    for l in hooks.fix_layers:
        valid = _valid_keys(base_b.attention_mask, T, arch.causal, arch.window(l))
        Qb, Kb = _qk(runs.base, hooks.qk[l])
        Qs, Ks = _qk(runs.src, hooks.qk[l])
        kinds = {s.kind for s in sites if s.layer == l and s.kind in ("q", "k")}
        fixed[l] = _qk_fix_layer(
            kinds,
            Qb,
            Kb,
            Qs,
            Ks,
            runs.base[hooks.pattern[l]],
            runs.grads[hooks.pattern[l]],
            arch.attn_scale(l),
            valid,
            arch.group_size,
            each,
            tol,
            f"layer {l}",
        )
    return fixed


def _estimates(sites: list[_Site], runs: _Runs, fixed: dict[int, dict[str, Tensor]], each: bool) -> Tensor:
    """M(base) + ĉ(n) per node: [n, P] or (``each``) [n, T, P], with ĉ(n) = Σ Δa_n·∂M/∂a_n summed over the node's
    slice (a head's d_head, a stream's d_model, all heads for an attention output) and, unless ``each``, over
    the positions; q and k nodes of a fixed layer take their fixed estimate."""
    per_node: list[Tensor] = []  # each [b] or [b, T]
    for site in sites:
        a_b, a_s = runs.base[site.hook].detach(), runs.src[site.hook]
        gr = runs.grads[site.hook]
        if gr is None:
            gr = torch.zeros_like(a_b)
        prod = (a_s - a_b) * gr
        if site.kind == "stream":
            c = prod.sum(-1)[..., None]  # [b, T, 1]
        elif site.kind == "attn":
            c = prod.sum((-1, -2))[..., None]
        elif site.kind == "pattern":  # [b, H, T(query), T(key)]: a pattern's position is its query's
            c = prod.sum(-1).transpose(1, 2)[:, :, site.slots]
        else:
            c = prod.sum(-1)[:, :, site.slots]  # [b, T, n]
        c = c if each else c.sum(1)
        if site.layer in fixed and site.kind in fixed[site.layer]:
            c = fixed[site.layer][site.kind][..., site.slots].to(c.dtype)
        per_node.extend(c[..., i] for i in range(c.shape[-1]))
    est = torch.stack(per_node).detach()  # [n, b] or [n, b, T]
    if each:
        return runs.M_base.to(est.dtype) + est.transpose(1, 2)  # [n, T, b]
    return runs.M_base.to(est.dtype)[None] + est
