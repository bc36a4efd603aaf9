"""trace_at(): a trace that keeps only chosen positions of each prompt, gathered during the pass.

Attribution reads the stream at one position per prompt (or a few: a teacher-forced multi-token
answer reads one position per answer token), so every activation is gathered at ``positions``
[batch, k] as the forward pass produces it and the trace's pos axis has length k. Memory is
O(n_layers · batch · k · d_model), not O(· pos ·). The decomposition at a kept position equals the
full trace's there, term by term (the walk is per position).

``keep`` (see :mod:`interp.stream._keep`) adds attention internals: each pattern's *query* axis is
gathered at ``positions`` and its key axis kept whole ([batch, n_heads, k, pos]); queries are gathered
like the stream, keys and values are kept at every position ([batch, pos, n_kv_heads, d_head]) — what a
head reads from every source position.
"""

from __future__ import annotations

from typing import Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from interp.models import Model
from interp.engine.internal import read_forward
from interp.stream._inputs import Batch
from interp.stream._keep import check_keep, keep_hooks
from interp.stream._trace import ResidualTrace, capture_names

__all__ = ["trace_at"]


def trace_at(
    model: Model,
    batch: Batch,
    positions: Int[Tensor, " batch *k"],
    *,
    neuron_layers: Sequence[int] = (),
    stop_before_unembed: bool = False,
    keep: Sequence[str] = (),
) -> ResidualTrace:
    """A :class:`ResidualTrace` holding positions ``positions[b]`` of each prompt only.

    ``positions``: [batch] (the pos axis has length 1) or [batch, k]. With ``stop_before_unembed``
    (pre-norm decoders) the forward pass ends at the final norm — the full-vocabulary unembedding
    is never computed; otherwise the logits are read at the kept positions only. ``keep``:
    attention internals to keep (module docstring).
    """
    arch = model.arch
    keep = check_keep(keep)
    has_types = model.weights.W_type is not None
    names = capture_names(arch, neuron_layers=neuron_layers, has_types=has_types)
    b = batch.tokens.shape[0]
    rows = torch.arange(b, device=batch.tokens.device)[:, None]  # [b, 1]
    positions = positions.to(batch.tokens.device)
    pos2 = positions[:, None] if positions.ndim == 1 else positions  # [b, k]

    def at_pos(x: Tensor) -> Tensor:
        if x.shape[0] == 1 and b > 1:
            x = x.expand(b, *x.shape[1:])
        return x[rows, pos2].clone()  # [b, k, ...]

    def queries(x: Tensor) -> Tensor:  # a pattern [b, H, q, k] gathered on its query axis -> [b, H, k_kept, k]
        return x[rows, :, pos2].permute(0, 2, 1, 3).clone()

    reducers = {n: at_pos for n in names}
    for item, hooks in keep_hooks(model, keep).items():
        for n in hooks:  # q is kept as the scores use it (rotated), so it is gathered like the stream
            reducers[n] = queries if item == "patterns" else at_pos if item == "q" else (lambda x: x.clone())
    # pre-norm decoders with stop_before_unembed: the final norm's output is the walk's last tensor, and the
    # full-vocabulary unembedding is never computed
    stop = stop_before_unembed and arch.norm != "none" and arch.has_logits
    store, logits = read_forward(
        model, batch.tokens, batch.attention_mask, reducers, logits=False if stop else (lambda x: x[rows, pos2])
    )
    tokens = batch.tokens[rows, pos2]
    return ResidualTrace(
        arch=arch,
        tokens=tokens,
        attention_mask=torch.ones_like(tokens),
        str_tokens=None,
        activations=store,
        weights=model.weights,
        neuron_layers=tuple(neuron_layers),
        logits=logits,
    )
