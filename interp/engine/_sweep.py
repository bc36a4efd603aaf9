"""The prefix-sharing sweep (docs/math.md, "Prefix sharing"): the metric of many patched variants of one base run.

Patching one node n of layer p changes nothing below p, so a *variant* (the base run with n's
activation replaced) equals the base run up to p's input. The sweep (the identity
of docs/math.md, "Prefix sharing") therefore:

1. runs the base input once, caching every layer's input x_p (and its keys/values);
2. runs the source input(s) once, caching the activation of every node to patch;
3. walks the layers with ONE growing batch: at layer p it appends a copy of x_p for every
   variant patched at p, runs the whole batch through layer p with each new row's node replaced
   by its source value, and goes on — so a variant costs L − p layers, not L;
4. reads the metric at its position only (the final norm and the unembedding of one row per
   variant, never the full-vocabulary unembedding at every position).

Variants patched at one position t of a causal model differ from the base run only at positions
≥ t: they carry only that suffix, attending to the base run's cached keys/values before t.
The batch is cut into chunks of at most ``batch_size`` rows to bound memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.engine._patches import Patch, Variant, apply_patches, merge_patches

if TYPE_CHECKING:
    from interp.engine._forward import Engine, RunCache
    from interp.engine._metrics import MetricReader

__all__ = ["sweep"]


def sweep(
    e: "Engine",
    base: RunCache,
    tokens: Tensor,
    mask: Tensor,
    variants: list["Variant"],
    read: Union["MetricReader", Callable[[Tensor, Tensor, int], Tensor]],
    *,
    batch_size: int,
    progress: bool = False,
    desc: str = "sweep",
) -> Tensor:
    """The metric [n_variants] of every variant (see module docstring), computed by the growing
    batch in chunks of at most ``batch_size`` rows; ``progress``: a bar named ``desc`` counting the variants
    (closed however the sweep ends).

    ``read(final_rows [R, T, d_model], prompt [R], t0)`` -> metric [R] reads each row's metric from
    its final residual (its positions t0…). A :class:`MetricReader` reads the chunks unchecked and the sweep checks
    the whole result for finiteness once (one host read per sweep, not one per chunk).
    """
    checked = hasattr(read, "check_finite")  # a MetricReader: its chunks read unchecked, the result checked once
    out = torch.empty(len(variants), dtype=e.model.dtype, device=e.model.device)
    groups: dict[int, list[int]] = {}
    for i, v in enumerate(variants):
        groups.setdefault(v.t0, []).append(i)
    bar = tqdm(total=len(variants), desc=desc, unit="run", disable=not progress)
    try:
        with torch.inference_mode():
            for t0, idx in sorted(groups.items()):
                idx.sort(key=lambda i: variants[i].layer)
                # the group's variant indices and prompts copied once; each chunk takes a slice
                rows = torch.tensor(idx, device=out.device)
                prs = torch.tensor([variants[i].prompt for i in idx], device=out.device)
                for c in range(0, len(idx), batch_size):
                    chunk = idx[c : c + batch_size]
                    vs = [variants[i] for i in chunk]
                    out[rows[c : c + batch_size]] = _chunk(
                        e, base, tokens, mask, vs, prs[c : c + batch_size], t0, read, checked
                    )
                    bar.update(len(chunk))
    finally:
        bar.close()
    if checked:  # its chunks were read unchecked: one host read for the whole sweep
        read.check_finite(out)  # type: ignore[union-attr]
    return out


def _chunk(
    e: "Engine",
    base: RunCache,
    tokens: Tensor,
    mask: Tensor,
    vs: list["Variant"],
    prs: Tensor,
    t0: int,
    read: Callable[..., Tensor],
    checked: bool,
) -> Tensor:
    dev = e.model.device
    first = vs[0].layer
    # every row of the chunk, allocated once: rows join by writing into it, layers update it in place
    X = torch.empty(len(vs), tokens.shape[1] - t0, e.arch.d_model, dtype=e.model.dtype, device=dev)
    x = X[:0]
    prompt = torch.empty(0, dtype=torch.long, device=dev)
    j = 0
    if first < 0:  # embedding variants: rebuild the embedding with one part replaced
        emb = [v for v in vs if v.layer < 0]
        j = len(emb)
        pr = prs[:j]
        parts = {k: t[pr, t0:] for k, t in base.embed.items()}
        for p in merge_patches([p for r, v in enumerate(emb) for p in v.patches(r, t0)]):
            parts[p.site] = apply_patches(parts[p.site], [p], t0)
        X[:j] = e.embed(parts)
        x, prompt = X[:j], pr
    for l in range(max(first, 0), e.L + 1):
        new = []
        while j < len(vs) and vs[j].layer == l:
            new.append(vs[j])
            j += 1
        patches: list[Patch] = []
        if new:
            R0 = x.shape[0]
            pr = prs[j - len(new) : j]
            start = base.resid_pre[l] if l < e.L else base.final
            X[R0 : R0 + len(new)] = start[pr, t0:]
            x = X[: R0 + len(new)]
            prompt = torch.cat([prompt, pr])
            patches = merge_patches([p for r, v in enumerate(new) for p in v.patches(R0 + r, t0)])
        if l == e.L:  # after the last layer: only shifts of the final residual ("final")
            for p in patches:
                x = apply_patches(x, [p], t0)
            break
        out = e.layer(
            l,
            x,
            prompt=prompt,
            mask=mask,
            t0=t0,
            prefix=(base.kv[l] if t0 > 0 else None),
            patches=patches,
            inplace=True,
        )
        if out.data_ptr() != x.data_ptr():  # post-norm blocks return a new tensor
            x.copy_(out)
    return read(x, prompt, t0, check=False) if checked else read(x, prompt, t0)
