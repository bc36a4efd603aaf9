"""Capture at transformer-lens's hook names, from one walk of the engine's forward.

``capture(model, batch, names)`` returns ``{hook name: activation}`` and the logits of one forward; every
analysis of the residual stream reads its tensors this way (:func:`interp.engine.internal.read_forward`: the
names it serves, and a function per name to shrink a tensor as it is produced). No hook is attached to the
bridge, so the user's own transformer-lens hooks on ``model.bridge`` neither see nor change these runs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional, Union

from torch import Tensor

from interp.engine.internal import read_forward
from interp.models import Model
from interp.stream._inputs import Batch, as_batch

__all__ = ["capture", "count_hooks"]

Reducer = Callable[[Tensor], Tensor]


def capture(
    model: Model,
    inputs: Union[Batch, str, list, Tensor],
    names: Iterable[str],
    *,
    reducers: Optional[Mapping[str, Reducer]] = None,
    logits: bool = True,
) -> tuple[dict[str, Tensor], Optional[Tensor]]:
    """One forward of ``inputs`` (as :func:`interp.trace` takes them, or a :class:`interp.models.Batch`):
    ``{hook_name: activation}`` for ``names`` and the logits [batch, pos, d_vocab] (None with ``logits=False``
    or for a model without an unembedding).

    ``reducers[name]`` (optional) shrinks an activation as it is captured (e.g. keep one position), so nothing
    larger than needed is held.
    """
    batch = inputs if isinstance(inputs, Batch) else as_batch(model, inputs)
    reducers = reducers or {}
    hooks = {n: reducers.get(n) for n in dict.fromkeys(names)}
    return read_forward(model, batch.tokens, batch.attention_mask, hooks, logits=logits)


def count_hooks(bridge: Any) -> int:
    """Number of forward/backward hooks currently attached to the bridge's hook points.

    ``hook_dict`` lists some hook points under two names (``blocks.0.hook_out`` is
    ``blocks.0.hook_resid_post``); each point is counted once.
    """
    total = 0
    for hp in {id(hp): hp for hp in bridge.hook_dict.values()}.values():
        total += len(getattr(hp, "_forward_hooks", {})) + len(getattr(hp, "_backward_hooks", {}))
        total += len(getattr(hp, "_forward_pre_hooks", {}))
    return total
