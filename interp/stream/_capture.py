"""One forward pass through the bridge with temporary capture hooks.

Hooks are added with ``bridge.hooks(...)`` (a context manager that removes exactly the handles
it added in a ``finally`` block), so no hook of ours survives an exception or a
KeyboardInterrupt raised inside the forward pass, and hooks the user attached are left alone.
Capture hooks return their input unchanged, so outputs are bitwise those of a plain run.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

import torch
from torch import Tensor

from interp.models import Model
from interp.stream._inputs import Batch

__all__ = ["capture", "run_forward", "count_hooks"]

Reducer = Callable[[Tensor], Tensor]


def _capture_fn(store: dict[str, Tensor], key: str, reduce: Optional[Reducer]) -> Callable:
    def hook(x: Tensor, hook: Any = None) -> Tensor:
        v = x.detach()
        store[key] = reduce(v) if reduce is not None else v
        return x

    return hook


def run_forward(model: Model, batch: Batch, fwd_hooks: list, **kwargs: Any) -> Any:
    """``bridge(tokens)`` with temporary hooks; the attention mask is always passed."""
    bridge = model.bridge
    with torch.inference_mode(), bridge.hooks(fwd_hooks=fwd_hooks):
        return bridge(batch.tokens, attention_mask=batch.attention_mask, **kwargs)


def capture(
    model: Model,
    batch: Batch,
    names: Iterable[str],
    *,
    reducers: Optional[Mapping[str, Reducer]] = None,
    **kwargs: Any,
) -> tuple[dict[str, Tensor], Any]:
    """Run once, returning ``{hook_name: activation}`` for ``names`` and the forward's output.

    ``reducers[name]`` (optional) shrinks an activation as it is captured (e.g. keep one
    position), so nothing larger than needed is held.
    """
    store: dict[str, Tensor] = {}
    reducers = reducers or {}
    hooks = [(n, _capture_fn(store, n, reducers.get(n))) for n in dict.fromkeys(names)]
    out = run_forward(model, batch, hooks, **kwargs)
    return store, out


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
