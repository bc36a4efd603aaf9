"""Projection-mode capture: each write projected on its read's directions while the pass runs.

``trace(model, inputs, project={read_label: U})`` needs, per read R, only the numbers
(w · U_w) [.., batch, pos, k] and the norm scales σ [batch, pos, 1] (:mod:`interp.stream._walk`:
U_w depends on the weights alone, even through a post-norm model's chain of norms). So every
hook projects its activation as soon as the forward pass produces it and keeps nothing of size
d_model per position:

1. Plan each read's walk (U_w of every term, the norms' input hooks, the hook of R's own tensor).
2. Group the work by hook name; one hook per name projects the activation for every term (of every
   read) that needs it, stores σ if it is a norm's input, and projects R's own tensor on U0 if it
   is R's total.
3. After the pass: S_j from the σ's, terms = projection · S_j, biases from the weights — the same
   functions and the same arithmetic as :meth:`ResidualTrace.decompose` on a full capture.

Extra memory beyond the forward pass itself: Σ_reads n_terms · batch · pos · k floats plus one
[batch, pos] scale per norm.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from interp.models import Model
from interp.engine.internal import read_forward
from interp.stream._decomposition import Decomposition
from interp.stream._inputs import Batch
from interp.stream._walk import Plan, project_term, scale_chain, sigma

__all__ = ["capture_projected"]


def capture_projected(
    model: Model, batch: Batch, plans: dict[str, Plan], str_tokens: Any
) -> tuple[dict[str, Decomposition], Optional[Tensor]]:
    """Run the engine's forward once; return {read label: its projected Decomposition} and the logits.

    Every tensor that outlives a hook (each read's [n_terms, batch, pos, k] result, its total, the
    σ's) is allocated before the pass and filled in place: small allocations kept alive between
    the pass's large transient ones fragment the heap (measured on smollm2 at 8 × 128 tokens:
    +120 MB peak RSS with glibc's default malloc, +4 MB with a fixed mmap threshold)."""
    arch, w = model.arch, model.weights
    b, p = batch.tokens.shape
    first = next(iter(plans.values())).U0
    dtype, dev = first.dtype, first.device
    # hook name -> what to do with its activation
    term_jobs: dict[str, list[tuple[str, int, int]]] = defaultdict(list)  # (read, term index, row offset)
    total_jobs: dict[str, list[str]] = defaultdict(list)
    sigma_rows: dict[str, int] = {}
    out_buf: dict[str, Tensor] = {}
    total_buf: dict[str, Tensor] = {}
    for read, plan in plans.items():
        k = plan.U0.shape[1]
        out_buf[read] = torch.empty(len(plan.labels), b, p, k, dtype=dtype, device=dev)
        total_buf[read] = torch.empty(b, p, k, dtype=dtype, device=dev)
        row = 0
        for i, t in enumerate(plan.terms):
            if t.hook is not None:
                term_jobs[t.hook].append((read, i, row))
            row += len(t.labels)
        total_jobs[plan.total_hook].append(read)
        for h in [*plan.norm_hooks, *plan.local_hooks]:
            sigma_rows.setdefault(h, len(sigma_rows))
    sigma_buf = torch.empty(len(sigma_rows), b, p, 1, dtype=dtype, device=dev)

    def make(name: str) -> Callable[[Tensor], None]:
        def hook(v: Tensor) -> None:
            for read, i, row in term_jobs.get(name, ()):
                t = plans[read].terms[i]
                out_buf[read][row : row + len(t.labels)].copy_(project_term(t, v, w, b, p))  # broadcasts
            if name in sigma_rows:
                sigma_buf[sigma_rows[name]].copy_(sigma(v, arch, dtype))
            for read in total_jobs.get(name, ()):
                total_buf[read].copy_(torch.einsum("bpd,bkd->bpk", v.to(dtype), plans[read].U0))

        return hook

    names = list(dict.fromkeys([*term_jobs, *total_jobs, *sigma_rows]))
    _, out = read_forward(model, batch.tokens, batch.attention_mask, {n: make(n) for n in names}, logits=True)
    result: dict[str, Decomposition] = {}
    for read, plan in plans.items():
        S = scale_chain([sigma_buf[sigma_rows[h]] for h in plan.norm_hooks], b, p, plan.U0)
        contributions, row = out_buf[read], 0
        for t in plan.terms:  # the same arithmetic as fill(): projection · S_j, a bias broadcast
            n = len(t.labels)
            s = S[t.stage] if t.local is None else S[t.stage] / sigma_buf[sigma_rows[t.local]]
            if t.kind == "bias":
                contributions[row] = project_term(t, None, w, b, p) * s
            else:
                contributions[row : row + n].mul_(s)
            row += n
        result[read] = Decomposition.build(
            point=read,
            labels=plan.labels,
            contributions=contributions,
            total=total_buf[read],
            attention_mask=batch.attention_mask,
            str_tokens=str_tokens,
            directions=plan.U0,
        )
    return result, out
