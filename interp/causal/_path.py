"""Path patching: a sender's changed output seen by chosen readers only (docs/math.md, "Path patching").

The clean run is the base. The sender s (a head, an MLP or an embedding) has its write changed by

    δ_s = a_s(ablation) − a_s(clean)          (every position; the ablation as in :func:`interp.patch`)

and only the chosen input of each receiver r sees it; every other reader — other heads, MLPs, the
unembedding — still reads the clean stream. Downstream of r everything is recomputed (r's changed
output reaches later layers as usual). Per receiver, one variant joining the growing batch at r's
layer (:mod:`interp.engine`):

    via="q" | "k" | "v":  head r's query (KV head r's key / value) input is N1(x + δ_s) instead of N1(x)
    via="mlp":            MLP r's input is N2(x_mid + δ_s) (parallel blocks: N2(x + δ_s))
    via="logits":         the final readout reads x_final + δ_s (one value; ``receivers`` unused)

The receiver's own norm is recomputed on the shifted stream, as in transformer-lens's
``get_act_patch_direct_path`` (Wang et al. 2022, App. B), which this equals with clean and corrupt
swapped (transformer-lens runs the corrupt input and sends the clean δ). Pre-norm and parallel
blocks only: in a post-norm block the stream a reader sees is itself normalised, so "only r sees δ_s"
has no single meaning there.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from interp._validate import check_bool, check_choice, check_int, check_positive_int
from interp.causal._common import (
    PatchNode,
    _check_node,
    baselines,
    check_reference_spread,
    make_pair,
    MetricReader,
    reference_acts,
)
from interp.causal._effects import node_write
from interp.engine.internal import Patch, RunCache, Variant
from interp.causal._patch import ABLATIONS, check_ablation, default_batch_size, run_pair, shared_prefix
from interp.causal._result import PatchResult, patch_result
from interp.errors import ArgumentError, LabelError, UnsupportedOperationError
from interp.labels import Embed, Head, HeadInput, Mlp, MlpInput, Output, as_label
from interp.models import Model
from interp.stream.internal import require_model

__all__ = ["path_patch"]

VIA = ("q", "k", "v", "mlp", "logits")


def _sender(model: Model, sender: Any) -> PatchNode:
    lab = as_label(sender, (Head, Mlp, Embed), name="sender")
    node = _check_node(model, lab, "sender")
    return node


def _receivers(model: Model, receivers: Any, via: Any, sender: PatchNode) -> list[tuple[Any, int, int]]:
    """[(label, layer, head or −1)] — each receiver's reading input, checked to come after the sender."""
    a = model.arch
    if via == "logits":
        if receivers not in (None, "logits", "unembed", "final"):
            raise ArgumentError(
                f"receivers={receivers!r}: with via='logits' the receiver is the final readout; leave receivers=None"
            )
        return [(Output("unembed" if a.has_logits else "final"), a.n_layers, -1)]
    s_layer = sender.layer
    # a read at layer l sees the sender's write if the sender's add comes before it in the block's steps: a
    # head's own layer's MLP sees it where that MLP reads after the attention's add (sequential blocks)
    first_head_layer = s_layer + 1 if sender.site in ("z", "mlp_out") else 0
    if sender.site == "z" and model.block.sees("mlp", "attn"):
        first_mlp_layer = s_layer
    else:
        first_mlp_layer = s_layer + 1 if sender.site in ("z", "mlp_out") else 0
    if isinstance(receivers, str):
        if receivers not in ("heads", "mlps", "all"):
            raise ArgumentError(f"receivers={receivers!r} must be 'all', 'heads', 'mlps' or a list of labels")
        if via == "mlp":
            if receivers == "heads":
                raise ArgumentError("receivers='heads' with via='mlp': heads have no MLP input; use receivers='mlps'")
            return [(MlpInput(l, "in"), l, -1) for l in range(max(first_mlp_layer, 0), a.n_layers)]
        if receivers == "mlps":
            raise ArgumentError(f"receivers='mlps' with via={via!r}: MLPs have no {via} input; use via='mlp'")
        n = a.n_heads if via == "q" else a.n_kv_heads
        return [(HeadInput(l, via, h), l, h) for l in range(first_head_layer, a.n_layers) for h in range(n)]
    if not isinstance(receivers, (list, tuple)) or not receivers:
        raise ArgumentError(f"receivers={receivers!r} must be 'all', 'heads', 'mlps' or a non-empty list of labels")
    out: list[tuple[Any, int, int]] = []
    for i, r in enumerate(receivers):
        name = f"receivers[{i}]"
        if via == "mlp":
            lab = as_label(r, (Mlp, MlpInput), name=name)
            layer = lab.layer
            if not 0 <= layer < a.n_layers:
                raise LabelError(f"{name}={str(lab)!r}: layer {layer} does not exist")
            if layer < first_mlp_layer:
                raise ArgumentError(
                    f"{name}={str(lab)!r} does not read the sender {sender.text!r} (it comes before it)"
                )
            out.append((MlpInput(layer, "in"), layer, -1))
            continue
        lab = as_label(r, (Head, HeadInput), name=name)
        if isinstance(lab, HeadInput) and lab.which != via:
            raise ArgumentError(f"{name}={str(lab)!r} is a {lab.which} input but via={via!r}")
        layer, head = lab.layer, lab.head
        n = a.n_heads if via == "q" or isinstance(lab, Head) else a.n_kv_heads
        if not 0 <= layer < a.n_layers or not 0 <= head < n:
            raise LabelError(f"{name}={str(lab)!r} does not exist in model {model.name!r}")
        if isinstance(lab, Head) and via != "q":
            head = a.kv_head(head)  # a query head reads its KV head's k / v
        if layer < first_head_layer:
            raise ArgumentError(f"{name}={str(lab)!r} does not read the sender {sender.text!r} (it comes before it)")
        out.append((HeadInput(layer, via, head), layer, head))
    if len({str(o[0]) for o in out}) != len(out):
        raise ArgumentError("receivers lists the same input twice (under GQA two query heads share one KV head)")
    return out


def path_patch(
    model: Model,
    clean: Any,
    corrupt: Any = None,
    *,
    metric: Any,
    sender: Any,
    receivers: Union[str, Sequence[Any], None] = "all",
    via: str = "q",
    ablation: str = "corrupt",
    reference: Any = None,
    batch_size: Optional[int] = None,
    progress: bool = True,
    seed: int = 0,
) -> PatchResult:
    """The metric with the sender's ablated output seen only by each receiver's ``via`` input, one
    value per receiver (see the module docstring).

    ``sender``: a head, MLP or embedding label. ``receivers``: "all" (every later head's q, every later
    KV head's k/v, or every later MLP for ``via="mlp"``) or a list of labels (``L5.H3`` or
    ``L5.attn.q[H3]``; for k/v a query head means its KV head; ``L5.mlp``). Returns a
    :class:`PatchResult` with ``method="path patching"`` and ``direction="noise"``.
    """
    # 1. the inputs checked
    require_model(model)
    check_choice("via", via, VIA)
    check_choice("ablation", ablation, ABLATIONS)
    check_bool("progress", progress)
    check_positive_int("batch_size", batch_size, allow_none=True)
    seed = check_int("seed", seed)
    check_ablation("noise", ablation, reference)
    if model.block.normed_stream:
        raise UnsupportedOperationError(
            f"model={model.name!r} is post-norm: every reader sees the stream through the same Add & Norm, so a "
            "path to one reader only is undefined; use interp.effects (direct effects) or interp.patch"
        )

    # 2. the clean and corrupt batches (the metric bound to them), the sender and its receivers
    pair = make_pair(model, clean, corrupt, metric, need_corrupt=ablation == "corrupt")
    check_reference_spread(model, pair, [ablation], reference, arg="ablation")
    s = _sender(model, sender)
    recv = _receivers(model, receivers, via, s)

    # 3. the clean and corrupt runs, the sender's changed write δ_s and the baselines
    c_run, k_run, delta = _sender_delta(model, pair, s, ablation, reference, seed)
    clean_out, clean_m, corrupt_m = baselines(model, pair.bound, c_run, k_run)

    # 4. one variant per receiver × prompt: δ_s added to the receiver's input only, swept from the clean run
    P, n = pair.clean.tokens.shape
    share = min(shared_prefix(pair) if ablation == "corrupt" else 0, n - 1)
    variants = _path_variants(model, recv, via, delta, share if model.arch.causal else 0)
    read = MetricReader(model, pair.bound, clean_out, c_run)
    vals = pair.engine.sweep(
        c_run,
        pair.clean.tokens,
        pair.clean.attention_mask,
        variants,
        read,
        batch_size=batch_size or default_batch_size(model, n),
        progress=progress,
        desc=f"path_patch {s.text} via {via}",
    )

    # 5. the result
    return patch_result(
        model,
        pair.clean.tokens,
        vals.reshape(len(recv), P).to(clean_m.dtype),
        [str(r[0]) for r in recv],
        clean_m,
        corrupt_m,
        metric=pair.bound.name,
        method="path patching",
        direction="noise",
        ablation=ablation,
        positions="all",
        details={"sender": s.text, "via": via, "seed": seed},
        warn="path_patch",
    )


def _sender_delta(
    model: Model, pair: Any, s: PatchNode, ablation: str, reference: Any, seed: int
) -> tuple[RunCache, Optional[RunCache], Tensor]:
    """(clean run, corrupt run, δ_s [P, n, d] = a_s(ablation) − a_s(clean)): the clean run keeps keys/values (the
    variants grow from it) and both capture the sender's site."""
    P, n = pair.clean.tokens.shape
    sites = {s.site} if not s.site.startswith("embed.") else set()
    c_run, k_run = run_pair(pair, sites, base="clean", keep_kv=model.arch.causal)
    if ablation == "corrupt":
        src = k_run
    elif ablation == "zero":
        src = None
    else:
        src = reference_acts(pair.engine, model, reference, sites, ablation, n, P, seed, pair.bound)
    delta = node_write(model, s, src, c_run) - node_write(model, s, c_run, c_run)  # [P, n, d]
    return c_run, k_run, delta


def _path_variants(model: Model, recv: list[tuple[Any, int, int]], via: str, delta: Tensor, t0: int) -> list[Variant]:
    """Per receiver (label, layer, head or −1) and prompt, the variant adding δ_s [P, n, d] (from position ``t0``)
    to the receiver's ``via`` input."""
    dev = model.device
    site = {"q": "q_in", "k": "k_in", "v": "v_in", "mlp": "mlp_in", "logits": "final"}[via]

    def variant(layer: int, head: int, prompt: int) -> Variant:
        def make(row: int, t0_: int) -> list[Patch]:
            return [
                Patch(
                    site=site,
                    layer=layer,
                    rows=torch.tensor([row], device=dev),
                    value=delta[prompt, t0_:][None],
                    head=None if head < 0 else torch.tensor([head], device=dev),
                    add=True,
                )
            ]

        return Variant(layer=layer, prompt=prompt, t0=t0, make=make)

    return [variant(layer, head, p) for (_, layer, head) in recv for p in range(delta.shape[0])]
