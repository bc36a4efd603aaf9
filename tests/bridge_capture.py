"""The bridge's own forward with transformer-lens capture hooks: the reference the engine's captures are checked
against (interp's analyses read the engine's forward; this is the model's, through ``model.bridge``)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

import torch
from torch import Tensor


def capture(
    model: Any, batch: Any, names: Iterable[str], *, reducers: Optional[Mapping[str, Callable]] = None
) -> tuple[dict[str, Tensor], Any]:
    """One ``model.bridge`` forward of ``batch`` (tokens, attention mask): {hook name: activation} and its output."""
    store: dict[str, Tensor] = {}
    reducers = reducers or {}

    def keep(name: str) -> Callable:
        def hook(x: Tensor, hook: Any = None) -> Tensor:
            v = x.detach()
            store[name] = reducers[name](v) if name in reducers else v
            return x

        return hook

    bridge = model.bridge
    with torch.inference_mode(), bridge.hooks(fwd_hooks=[(n, keep(n)) for n in dict.fromkeys(names)]):
        out = bridge(batch.tokens, attention_mask=batch.attention_mask)
    return store, out
