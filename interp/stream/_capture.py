"""One forward on the engine, keeping activations named by transformer-lens's hook names.

The forward is :class:`interp.engine.Engine`'s (the same one every patching, effect and edge analysis runs);
the names are mapped to its sites in one place (:func:`interp.engine.capture_site`). No hook is attached to the
model's transformer-lens bridge: hooks a user added there stay attached and fire in the user's own bridge calls,
but they do not change what interp captures. ``count_hooks`` counts the hooks on a bridge.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

from torch import Tensor

from interp.engine import Engine
from interp.models import Model
from interp.stream._inputs import Batch

__all__ = ["capture", "count_hooks"]

Reducer = Callable[[Tensor], Tensor]


def capture(
    model: Model,
    batch: Batch,
    names: Iterable[str],
    *,
    reducers: Optional[Mapping[str, Reducer]] = None,
    logits: bool = True,
) -> tuple[dict[str, Tensor], Optional[Tensor]]:
    """Run once, returning ``{hook_name: activation}`` for ``names`` and the logits (None without an
    unembedding, or when ``logits`` is False: the pass then ends after the last layer a name needs).

    ``reducers[name]`` (optional) shrinks an activation as its layer produces it (e.g. keep one
    position), so nothing larger than needed is held.
    """
    return Engine.of(model).capture(batch.tokens, batch.attention_mask, names, reducers=reducers, logits=logits)


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
