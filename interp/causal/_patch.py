"""Activation patching of every node at once, exactly, by prefix sharing (docs/math.md, "Prefix sharing").

For a node n with activation a_n and a metric M (Heimersheim & Nanda 2024, "How to use and
interpret activation patching", arXiv 2404.15255):

    denoise:  value(n) = M(corrupt run with a_n ← a_n(clean))          (sufficiency; transformer-lens's
                                                                         ``get_act_patch_*`` convention)
    noise:    value(n) = M(clean run with a_n ← a_n(ablation))          (necessity)

with the ablation the corrupt run (interchange), zero, the mean over ``reference`` prompts, or a
seeded random ``reference`` prompt (resample). Everything downstream of n is recomputed.

Steps: (1) check the inputs and bind the metric; (2) one engine run of the clean and of the corrupt
input, keeping every layer's input and the patched sites (plus the reference run for mean /
resample); (3) one variant per node × prompt (× position for ``positions="each"``), swept by the
growing batch of :mod:`interp.engine`; (4) the metric at its position only.

Skipped as exact no-ops (their value is the base run's): with the corrupt ablation in a causal model,
positions before the first token where clean and corrupt differ (both runs agree there), so every
variant carries only the positions from there on; with ``positions="each"``, patches at padding or
after the metric position.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._validate import check_bool, check_choice, check_int, check_positive_int, shardable
from interp.causal._common import (
    PatchNode,
    Pair,
    baselines,
    check_reference_spread,
    make_pair,
    MetricReader,
    reference_acts,
    resolve_nodes,
    source_acts,
)
from interp.engine.internal import HEADED_SITES, Patch, RunCache, Variant, chunk_bytes
from interp.causal._result import PatchResult, patch_result
from interp.errors import ArgumentError
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["patch"]

log = logging.getLogger(__name__)

POSITIONS = ("all", "each")
DIRECTIONS = ("denoise", "noise")
ABLATIONS = ("corrupt", "zero", "mean", "resample")


def check_ablation(direction: str, ablation: str, reference: Any) -> None:
    """Typed errors for combinations that do not exist."""
    if direction == "denoise" and ablation != "corrupt":
        raise ArgumentError(
            f"ablation={ablation!r} applies to direction='noise' (the clean run with nodes "
            "ablated); direction='denoise' patches clean activations into the corrupt run"
        )
    if ablation in ("mean", "resample") and reference is None:
        raise ArgumentError(f"ablation={ablation!r} needs reference= (prompts to take the {ablation} from)")
    if ablation in ("corrupt", "zero") and reference is not None:
        raise ArgumentError(f"reference is only used with ablation='mean' or 'resample', not ablation={ablation!r}")


def default_batch_size(model: Model, n: int) -> int:
    """Rows per chunk so that one layer's activations stay near 256 MB (more on a GPU: :func:`chunk_bytes`)."""
    a = model.arch
    per_token = 6 * a.d_model + 3 * a.d_mlp + (a.n_heads + 2 * a.n_kv_heads) * a.d_head + 3 * a.n_heads * n
    per_row = n * per_token * torch.finfo(model.dtype).bits // 8
    return max(1, int(chunk_bytes(model.device, 256e6) // max(per_row, 1)))


def shared_prefix(pair: Pair) -> int:
    """First position where any clean/corrupt pair differs (causal models: nothing before it changes)."""
    if pair.corrupt is None or not pair.engine.arch.causal:
        return 0
    diff = (pair.clean.tokens != pair.corrupt.tokens).any(0)
    return int(diff.nonzero()[0, 0]) if bool(diff.any()) else pair.clean.tokens.shape[1]


def node_value(
    node: PatchNode, src: Optional[RunCache], like: RunCache, prompt: int, t: Optional[int], t0: int
) -> Tensor:
    """The source value of ``node`` for one prompt: [1, T, ...] (all positions from t0) or [1, ...] (position t).
    ``src=None`` means zero ablation (zeros shaped like ``like``'s activation)."""
    act = source_acts(node.site, node.layer, src if src is not None else like)
    if node.site == "pattern":
        v = act[prompt, node.head, t0:] if t is None else act[prompt, node.head, t]
    elif node.site in HEADED_SITES:
        v = act[prompt, t0:, node.head] if t is None else act[prompt, t, node.head]
    else:
        v = act[prompt, t0:] if t is None else act[prompt, t]
    v = v[None]
    return torch.zeros_like(v) if src is None else v


def node_patch(node: PatchNode, row: int, value: Tensor, t: Optional[int], ids: Tensor) -> Patch:
    """The patch of ``node`` in row ``row``; its one-element indices are views of ``ids`` (an arange on the model's
    device longer than any row, head and position), not a host-to-device copy each."""
    return Patch(
        site=node.site,
        layer=node.layer,
        rows=ids[row : row + 1],
        value=value,
        head=None if node.head is None else ids[node.head : node.head + 1],
        pos=None if t is None else ids[t : t + 1],
    )


def _variant(
    node: PatchNode, src: Optional[RunCache], like: RunCache, prompt: int, t: Optional[int], t0: int, ids: Tensor
) -> Variant:
    def make(row: int, t0_: int) -> list[Patch]:
        return [node_patch(node, row, node_value(node, src, like, prompt, t, t0_), t, ids)]

    # resid_post of layer l is the input of l + 1: join there (the patch still applies at the end of l)
    return Variant(layer=node.layer, prompt=prompt, t0=t0, make=make)


def capture_sites(nodes: Sequence[PatchNode]) -> set[str]:
    return {n.site for n in nodes if not n.site.startswith("embed.") and n.site != "resid_pre"}


def run_pair(
    pair: Pair, sites: set[str], *, base: str, keep_kv: bool, keep_scales: bool = False
) -> tuple[RunCache, Optional[RunCache]]:
    """(clean run, corrupt run) with the sites captured; the base run keeps keys/values if asked."""
    e = pair.engine
    c = e.run(
        pair.clean.tokens,
        pair.clean.attention_mask,
        capture=sites,
        keep_kv=keep_kv and base == "clean",
        keep_scales=keep_scales,
    )
    k = None
    if pair.corrupt is not None:
        k = e.run(
            pair.corrupt.tokens, pair.corrupt.attention_mask, capture=sites, keep_kv=keep_kv and base == "corrupt"
        )
    return c, k


@shardable
def patch(
    model: Model,
    clean: Any,
    corrupt: Any = None,
    *,
    metric: Any,
    nodes: Union[str, Sequence[Any]] = "heads",
    positions: str = "all",
    direction: str = "denoise",
    ablation: str = "corrupt",
    reference: Any = None,
    batch_size: Optional[int] = None,
    progress: bool = True,
    seed: int = 0,
    cluster: Any = None,
    out: Any = None,
) -> PatchResult:
    """The metric after patching each node (see the module docstring for the conventions).

    ``clean``/``corrupt``: strings, lists of strings or token ids, each pair the same token length
    (``corrupt`` may be None when noising with ``ablation`` "zero", "mean" or "resample").
    ``metric``: :class:`interp.LogitDiff`, :class:`interp.Logit`, :class:`interp.LogProb`,
    :class:`interp.Prob`, :class:`interp.KL`, :class:`interp.Direction` or a callable on the logits.
    ``nodes``: "heads", "mlps", "components" (embeddings, heads, MLPs), "resid" (every
    ``hook_resid_*`` point), "head_inputs" (each head's q, each KV head's k and v), "patterns", or a
    list of labels. ``positions``: "all" (each node at every position at once) or "each" (each node at
    one position; in a ragged batch a shorter prompt's padded positions are NaN in ``per_prompt`` — there is no
    token to patch — and ``values`` averages each position over the prompts that have it). ``batch_size``: rows
    of the growing batch per chunk (default: ~256 MB per layer).
    ``seed``: the resample draw. ``cluster``: None (in process) or an ``interp.RayCluster``: the prompt pairs
    are sharded over its workers and the shards' results merged exactly; ``out``: a folder keeping each
    finished shard, so a rerun computes only the missing ones (docs/scaling.md).
    """
    # 1. the inputs checked (a cluster runs this call per shard of the prompt pairs)
    require_model(model)
    check_choice("positions", positions, POSITIONS)
    check_choice("direction", direction, DIRECTIONS)
    check_choice("ablation", ablation, ABLATIONS)
    check_bool("progress", progress)
    check_positive_int("batch_size", batch_size, allow_none=True)
    seed = check_int("seed", seed)
    check_ablation(direction, ablation, reference)

    # 2. the clean and corrupt batches (the metric bound to them), the nodes
    pair = make_pair(model, clean, corrupt, metric, need_corrupt=direction == "denoise" or ablation == "corrupt")
    check_reference_spread(model, pair, [ablation], reference, arg="ablation")
    node_list, kind = resolve_nodes(model, nodes)

    # 3. the sweep: the two runs, one variant per node × prompt (× position), the metric of each
    sw = sweep_nodes(
        model,
        pair,
        node_list,
        positions=positions,
        direction=direction,
        ablation=ablation,
        reference=reference,
        batch_size=batch_size,
        progress=progress,
        seed=seed,
        desc=f"patch {kind}",
    )

    # 4. the result
    return patch_result(
        model,
        pair.clean.tokens,
        sw.per_prompt,
        [nd.text for nd in node_list],
        sw.clean_m,
        sw.corrupt_m,
        metric=pair.bound.name,
        method="activation patching",
        direction=direction,
        ablation=ablation,
        positions=positions,
        details={"nodes": kind, "seed": seed},
        warn="patch",
        mask=pair.clean.attention_mask,
    )


@dataclass
class Sweep:
    """One sweep's metric per node and prompt, the baselines, and the runs it made."""

    per_prompt: Tensor  # [nodes, P] or [nodes, pos, P]
    clean_m: Tensor
    corrupt_m: Tensor
    c_run: RunCache
    k_run: Optional[RunCache]
    src: Optional[RunCache]  # the source of the patched values (None: zero ablation)
    clean_out: Optional[Tensor]


def sweep_nodes(
    model: Model,
    pair: Pair,
    node_list: list[PatchNode],
    *,
    positions: str,
    direction: str,
    ablation: str,
    reference: Any,
    batch_size: Optional[int],
    progress: bool,
    seed: int,
    desc: str,
    keep_scales: bool = False,
    extra_sites: Optional[set[str]] = None,
) -> Sweep:
    """Steps 2–4 of the module docstring for checked inputs."""
    P, n = pair.clean.tokens.shape
    # 2. the clean and corrupt runs, the base run patched and the source of the patched values; the baselines
    sites = capture_sites(node_list) | (extra_sites or set())
    runs = _Runs.make(model, pair, sites, direction, ablation, reference, seed, keep_scales)
    clean_out, clean_m, corrupt_m = baselines(model, pair.bound, runs.c_run, runs.k_run)
    base_m = corrupt_m if direction == "denoise" else clean_m

    # 3. one variant per node × prompt (× position), the exact no-ops skipped (their value is the base run's)
    share = shared_prefix(pair) if ablation == "corrupt" else 0
    bs = batch_size or default_batch_size(model, n)
    ids = torch.arange(max(bs, n, model.arch.n_heads), device=model.device)  # see node_patch
    variants, where = _node_variants(model, pair, node_list, runs, positions, share, ids)
    # [nodes, P] or [nodes, pos, P], the base run's metric wherever a patch is a no-op
    per_prompt = (
        base_m.reshape(1, P).repeat(len(node_list), 1)
        if positions == "all"
        else base_m.reshape(1, 1, P).repeat(len(node_list), n, 1)
    )
    log.info(
        "%s: %d nodes, %d variants, batch_size %d, shared prefix %d", desc, len(node_list), len(variants), bs, share
    )

    # 4. the sweep, the metric of each variant at its position
    if variants:
        read = MetricReader(model, pair.bound, clean_out, runs.base)
        vals = pair.engine.sweep(
            runs.base,
            runs.base_batch.tokens,
            pair.clean.attention_mask,
            variants,
            read,
            batch_size=bs,
            progress=progress,
            desc=desc,
        )
        idx = torch.tensor(where, device=per_prompt.device)
        per_prompt[tuple(idx.T)] = vals.to(per_prompt.dtype)
    return Sweep(
        per_prompt=per_prompt,
        clean_m=clean_m,
        corrupt_m=corrupt_m,
        c_run=runs.c_run,
        k_run=runs.k_run,
        src=runs.src,
        clean_out=clean_out,
    )


@dataclass
class _Runs:
    """A sweep's runs: the clean and corrupt runs, the base run (and batch) the variants patch, the source of the
    patched values (None: zero ablation)."""

    c_run: RunCache
    k_run: Optional[RunCache]
    base: RunCache
    base_batch: Any
    src: Optional[RunCache]

    @staticmethod
    def make(
        model: Model,
        pair: Pair,
        sites: set[str],
        direction: str,
        ablation: str,
        reference: Any,
        seed: int,
        keep_scales: bool,
    ) -> "_Runs":
        """The clean and corrupt runs capturing ``sites`` (the base one keeping keys/values in a causal model);
        denoise: base corrupt, source clean; noise: base clean, source the ablation's run."""
        P, n = pair.clean.tokens.shape
        base_name = "corrupt" if direction == "denoise" else "clean"
        c_run, k_run = run_pair(pair, sites, base=base_name, keep_kv=model.arch.causal, keep_scales=keep_scales)
        base_run = k_run if direction == "denoise" else c_run
        base_batch = pair.corrupt if direction == "denoise" else pair.clean
        if base_run is None or base_batch is None:
            raise ArgumentError("corrupt=None: direction='denoise' runs the corrupt input")
        if direction == "denoise":
            src: Optional[RunCache] = c_run
        elif ablation == "corrupt":
            src = k_run
        elif ablation == "zero":
            src = None
        else:
            src = reference_acts(pair.engine, model, reference, sites, ablation, n, P, seed, pair.bound)
        return _Runs(c_run, k_run, base_run, base_batch, src)


def _node_variants(
    model: Model, pair: Pair, node_list: list[PatchNode], runs: _Runs, positions: str, share: int, ids: Tensor
) -> tuple[list[Variant], list[tuple]]:
    """The variants of every node × prompt (× position for ``positions="each"``) and where each one's value goes
    ((node, prompt) or (node, position, prompt)). Skipped (module docstring): every variant when clean and corrupt
    agree everywhere (``share`` = n); with ``positions="each"``, positions at padding, in the shared prefix or (causal)
    after the metric's last position."""
    P, n = pair.clean.tokens.shape
    causal = model.arch.causal
    mpos = pair.bound.last_positions  # patches after the last position the metric reads are no-ops
    # positions="each" reads the mask and the metric's positions on the host: once, not once per (prompt, position)
    real = pair.clean.attention_mask.bool().tolist() if positions == "each" else []
    last = mpos.tolist() if positions == "each" and mpos is not None else None
    variants: list[Variant] = []
    where: list[tuple] = []
    for i, node in enumerate(node_list):
        for p in range(P):
            if positions == "all":
                if share >= n:
                    continue
                variants.append(_variant(node, runs.src, runs.base, p, None, share if causal else 0, ids))
                where.append((i, p))
                continue
            for t in range(n):
                if not real[p][t] or t < share or (causal and last is not None and t > last[p]):
                    continue
                variants.append(_variant(node, runs.src, runs.base, p, t, t if causal else 0, ids))
                where.append((i, t, p))
    return variants, where
