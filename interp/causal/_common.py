"""Shared setup of the causal analyses: checked inputs, node lists, the runs they need, reading the metric.

A *node* is one activation a patch replaces: a head's output z_h (so its write z_h W_O^h), an MLP's
output, an embedding write, a resid point, a head's q (a KV head's k, v), a head's attention
pattern, or a whole attention layer's output. Nodes are named by :mod:`interp.labels`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from interp.engine.internal import BoundMetric, Engine, MetricReader, RunCache, clean_output, metric_of
from interp.causal._metrics import Metric, as_metric
from interp.errors import AblationWarning, ArgumentError, LabelError, ShapeError, warn_user
from interp.labels import Attn, Embed, Head, HeadInput, Mlp, Resid, as_label
from interp.models import Batch
from interp.models.internal import resid_hook_names
from interp.models import Model
from interp.stream.internal import as_batch

__all__ = [
    "PatchNode",
    "NODE_SETS",
    "resolve_nodes",
    "Pair",
    "make_pair",
    "MetricReader",  # interp.engine.internal.MetricReader, re-exported: the metric layer is below features
    "baselines",
    "clean_output",
    "metric_of",
    "source_acts",
    "check_reference_spread",
]

NODE_SETS = ("heads", "mlps", "components", "resid", "head_inputs", "patterns")
_EMBED_SITE = {"token": "embed.token", "pos": "embed.pos", "type": "embed.type"}


@dataclass(frozen=True)
class PatchNode:
    """A patchable activation: its label, the engine site, layer (−1: embedding) and head (or None)."""

    label: Any
    site: str
    layer: int
    head: Optional[int] = None

    @property
    def text(self) -> str:
        return str(self.label)


def _embed_nodes(model: Model) -> list[PatchNode]:
    w = model.weights
    out = [PatchNode(Embed("token"), "embed.token", -1)]
    if w.W_pos is not None and model.arch.positional == "learned":
        out.append(PatchNode(Embed("pos"), "embed.pos", -1))
    if w.W_type is not None:
        out.append(PatchNode(Embed("type"), "embed.type", -1))
    return out


def resolve_nodes(model: Model, nodes: Any, *, name: str = "nodes") -> tuple[list[PatchNode], str]:
    """(nodes, kind) from a node-set name or a list of labels; kind is the set name or "labels"."""
    a = model.arch
    L, H, Hkv = a.n_layers, a.n_heads, a.n_kv_heads
    if isinstance(nodes, str) and nodes in NODE_SETS:
        if nodes == "heads":
            return [PatchNode(Head(l, h), "z", l, h) for l in range(L) for h in range(H)], nodes
        if nodes == "patterns":
            return [PatchNode(Head(l, h), "pattern", l, h) for l in range(L) for h in range(H)], nodes
        if nodes == "mlps":
            if not model.has_mlp:
                raise ArgumentError(f"{name}='mlps': model {model.name!r} has no MLP sublayers (attention-only)")
            return [PatchNode(Mlp(l), "mlp_out", l) for l in range(L)], nodes
        if nodes == "components":
            out = _embed_nodes(model)
            for l in range(L):
                out += [PatchNode(Head(l, h), "z", l, h) for h in range(H)]
                if model.has_mlp:
                    out.append(PatchNode(Mlp(l), "mlp_out", l))
            return out, nodes
        if nodes == "resid":
            out = []
            for hook in resid_hook_names(a):
                lab = as_label(hook, Resid)
                out.append(PatchNode(lab, f"resid_{lab.where}", lab.layer))
            return out, nodes
        out = []
        for l in range(L):
            out += [PatchNode(HeadInput(l, "q", h), "q", l, h) for h in range(H)]
            out += [PatchNode(HeadInput(l, "k", h), "k", l, h) for h in range(Hkv)]
            out += [PatchNode(HeadInput(l, "v", h), "v", l, h) for h in range(Hkv)]
        return out, nodes
    if isinstance(nodes, str) or not isinstance(nodes, (list, tuple)) or not nodes:
        raise ArgumentError(
            f"{name}={nodes!r} must be one of {list(NODE_SETS)} or a non-empty list of labels "
            "(e.g. ['L3.H5', 'L3.mlp', 'embed', 'blocks.3.hook_resid_pre', 'L3.attn.q[H5]'])"
        )
    out = []
    for i, text in enumerate(nodes):
        lab = as_label(text, (Head, Mlp, Embed, Resid, HeadInput, Attn), name=f"{name}[{i}]")
        out.append(_check_node(model, lab, f"{name}[{i}]"))
    if len({n.text for n in out}) != len(out):
        raise ArgumentError(f"{name} lists a node twice; give each node once")
    return out, "labels"


def _check_node(model: Model, lab: Any, name: str) -> PatchNode:
    a = model.arch
    layer = getattr(lab, "layer", -1)
    if isinstance(lab, (Head, Mlp, Resid, HeadInput, Attn)) and not 0 <= layer < a.n_layers:
        raise LabelError(f"{name}={str(lab)!r}: layer {layer} does not exist; layers are 0..{a.n_layers - 1}")
    if isinstance(lab, Head):
        if not 0 <= lab.head < a.n_heads:
            raise LabelError(f"{name}={str(lab)!r}: head {lab.head} does not exist; heads are 0..{a.n_heads - 1}")
        return PatchNode(lab, "z", layer, lab.head)
    if isinstance(lab, HeadInput):
        n = a.n_heads if lab.which == "q" else a.n_kv_heads
        if not 0 <= lab.head < n:
            what = "query heads" if lab.which == "q" else "KV heads"
            raise LabelError(f"{name}={str(lab)!r}: {lab.which} head {lab.head} does not exist; {what} are 0..{n - 1}")
        return PatchNode(lab, lab.which, layer, lab.head)
    if isinstance(lab, Mlp):
        if not model.has_mlp:
            raise LabelError(f"{name}={str(lab)!r}: model {model.name!r} has no MLPs")
        return PatchNode(lab, "mlp_out", layer)
    if isinstance(lab, Attn):
        return PatchNode(lab, "attn_out", layer)
    if isinstance(lab, Resid):
        if str(lab) not in resid_hook_names(a):
            raise LabelError(
                f"{name}={str(lab)!r} is not a resid point of this model "
                f"({'parallel blocks have no resid_mid' if lab.where == 'mid' else 'unknown'})"
            )
        return PatchNode(lab, f"resid_{lab.where}", layer)
    emb = {n.text: n for n in _embed_nodes(model)}
    if str(lab) not in emb:
        raise LabelError(f"{name}={str(lab)!r}: model {model.name!r} has no such embedding; it has {sorted(emb)}")
    return emb[str(lab)]


def _checked_batch(model: Model, inputs: Any, name: str) -> Batch:
    try:
        return as_batch(model, inputs)
    except ArgumentError as e:
        msg = str(e)
        raise type(e)(msg.replace("inputs", name, 1) if msg.startswith("inputs") else f"{name}: {msg}") from None


@dataclass
class Pair:
    """The checked clean (and corrupt) batches, the bound metric and the engine."""

    engine: Engine
    clean: Batch
    corrupt: Optional[Batch]
    metric: Metric
    bound: BoundMetric

    @property
    def n_prompts(self) -> int:
        return int(self.clean.tokens.shape[0])


def make_pair(model: Model, clean: Any, corrupt: Any, metric: Any, *, need_corrupt: bool) -> Pair:
    """Check clean/corrupt (same number of prompts, same token lengths) and bind the metric."""
    cb = _checked_batch(model, clean, "clean")
    kb = None
    if corrupt is None:
        if need_corrupt:
            raise ArgumentError(
                "corrupt=None: this analysis needs a corrupt input (strings or ids, "
                "one per clean prompt, each the same token length)"
            )
    else:
        kb = _checked_batch(model, corrupt, "corrupt")
        if kb.tokens.shape[0] != cb.tokens.shape[0]:
            raise ShapeError(
                f"corrupt has {kb.tokens.shape[0]} prompts but clean has {cb.tokens.shape[0]}; "
                "give one corrupt prompt per clean prompt"
            )
        lc, lk = cb.attention_mask.sum(1), kb.attention_mask.sum(1)
        if kb.tokens.shape[1] != cb.tokens.shape[1] or bool((lc != lk).any()):
            i = int((lc != lk).nonzero()[0, 0]) if bool((lc != lk).any()) else 0
            raise ShapeError(
                f"corrupt prompt {i} has {int(lk[i])} tokens but clean prompt {i} has {int(lc[i])}; "
                "each clean/corrupt pair must have the same token length (patching aligns positions)"
            )
    m = as_metric(metric, model)
    bound = m.bind(model, cb)
    # a multi-token continuation is teacher-forced: appended to the clean and corrupt prompts alike
    cb = bound.extend(cb) or cb
    kb = bound.extend(kb, name="corrupt")
    return Pair(engine=Engine.of(model), clean=cb, corrupt=kb, metric=m, bound=bound)


def baselines(
    model: Model, bound: BoundMetric, c_run: RunCache, k_run: Optional[RunCache]
) -> tuple[Optional[Tensor], Tensor, Tensor]:
    """(the clean run's metric input where the metric compares with it, M(clean) [P], M(corrupt) [P]: NaN where
    there is no corrupt run) — the unpatched baselines of a sweep."""
    clean_out = clean_output(model, bound, c_run)
    clean_m = metric_of(model, bound, c_run, clean_out)
    if k_run is None:
        return clean_out, clean_m, torch.full_like(clean_m, float("nan"))
    return clean_out, clean_m, metric_of(model, bound, k_run, clean_out)


def check_reference_spread(
    model: Model, pair: Any, ablations: Sequence[str], reference: Any, *, arg: str = "ablations"
) -> None:
    """Mean and resample ablation over one distinct reference prompt are that prompt's run. With the default
    reference (the corrupt prompts) they are then the corrupt ablation: an :class:`AblationWarning` says so;
    a ``reference`` given explicitly that is the single corrupt prompt is an ArgumentError (it cannot give a
    different distribution); one other prompt warns (mean and resample are both ablation with it)."""
    spread = [a for a in dict.fromkeys(ablations) if a in ("mean", "resample")]
    if not spread or (reference is None and pair.corrupt is None):
        return
    rb = pair.corrupt if reference is None else pair.bound.extend(as_batch(model, reference), name="reference")
    rows = torch.unique(rb.tokens, dim=0)
    if rows.shape[0] > 1:
        return
    n = pair.clean.tokens.shape[1]
    per_position = rb.tokens.shape[1] == n and not bool((rb.attention_mask == 0).any())
    same = [a for a in spread if a == "resample" or per_position]  # a mean over every token of another length differs
    if not same:
        return
    what = f"{arg}={same[0]!r}" if len(same) == 1 else f"{arg} {same[0]!r} and {same[1]!r}"
    it = "it is" if len(same) == 1 else "both are"
    corrupt_rows = None if pair.corrupt is None else torch.unique(pair.corrupt.tokens, dim=0)
    is_corrupt = corrupt_rows is not None and corrupt_rows.shape == rows.shape and bool(torch.equal(corrupt_rows, rows))
    keep = [a for a in ablations if a not in same] if arg == "ablations" else []
    drop = (
        f"leave them out ({arg}={tuple(keep)!r})" if keep else "use ablation='corrupt' (what they reduce to) or 'zero'"
    )
    fix = (
        f"pass reference= with several prompts of the clean prompts' length (the distribution to draw from), "
        f"use more prompt pairs, or {drop}"
    )
    if reference is not None and is_corrupt:
        raise ArgumentError(
            f"reference={reference!r:.80} is the single corrupt prompt: with {what}, {it} the corrupt "
            f"ablation, not a different distribution; {fix}"
        )
    if reference is None:
        msg = (
            f"{what} with reference=None {'draws' if len(same) == 1 else 'draw'} from the corrupt prompts, "
            "and there is 1 distinct corrupt prompt: "
            f"{it} the corrupt ablation (the same numbers); {fix}"
        )
    else:
        msg = (
            f"reference={reference!r:.80} has 1 distinct prompt: with {what}, {it} ablation with that one prompt "
            f"(mean = resample); {fix}"
        )
    warn_user(msg, AblationWarning)


def source_acts(site: str, layer: int, run: RunCache) -> Tensor:
    """The activation of ``site`` at ``layer`` of a captured run, [P, n, ...] ([P, H, n, n] for patterns)."""
    if site.startswith("embed."):
        return run.embed[site]
    if site == "resid_pre":
        return run.resid_pre[layer]
    t = run.acts[site][layer]
    if t is None:
        raise RuntimeError(f"site {site} of layer {layer} was not captured")
    return t


def reference_acts(
    engine: Engine,
    model: Model,
    reference: Any,
    sites: set[str],
    ablation: str,
    n: int,
    n_prompts: int,
    seed: int,
    bound: Optional[BoundMetric] = None,
) -> RunCache:
    """A run-shaped cache whose activations are the mean over ``reference`` (``ablation="mean"``) or a
    seeded random reference prompt per base prompt (``"resample"``), each [n_prompts, n, ...]. ``bound``: the
    metric, whose teacher-forced continuation (if any) the reference prompts get too."""
    rb = _checked_batch(model, reference, "reference")
    if bound is not None:
        rb = bound.extend(rb, name="reference") or rb
    run = engine.run(
        rb.tokens, rb.attention_mask, capture=[s for s in sites if not s.startswith("embed") and s != "resid_pre"]
    )
    R, m = rb.tokens.shape
    out = RunCache(acts={s: [] for s in run.acts})
    if ablation == "resample":
        if m != n or bool((rb.attention_mask == 0).any()):
            raise ShapeError(
                f"reference prompts have {m} tokens (with padding: {bool((rb.attention_mask == 0).any())}); "
                f"ablation='resample' needs reference prompts of the clean prompts' length {n}, unpadded"
            )
        g = torch.Generator().manual_seed(seed)  # a CPU generator: the same picks on every device
        pick = torch.randint(0, R, (n_prompts,), generator=g, device="cpu").to(rb.tokens.device)

        def take(t: Tensor, pattern: bool = False) -> Tensor:
            return t[pick]
    else:
        maskf = rb.attention_mask.to(model.dtype)
        same = m == n and not bool((rb.attention_mask == 0).any())

        def take(t: Tensor, pattern: bool = False) -> Tensor:
            if same:  # the mean at each position over reference prompts
                return t.mean(0, keepdim=True).expand(n_prompts, *t.shape[1:])
            if pattern:
                raise ShapeError(
                    f"reference prompts have {m} tokens (or padding); a mean attention pattern needs "
                    f"reference prompts of the clean prompts' length {n}, unpadded"
                )
            w = maskf.reshape(R, m, *([1] * (t.ndim - 2)))
            mean = (t * w).sum((0, 1)) / w.sum()  # over every real token of every reference prompt
            return mean.expand(n_prompts, n, *t.shape[2:])

    for s, layers in run.acts.items():
        out.acts[s] = [None if t is None else (take(t, True) if s == "pattern" else take(t)) for t in layers]
    out.resid_pre = [take(t) for t in run.resid_pre]
    out.embed = {k: take(t) for k, t in run.embed.items()}
    return out
