"""The model's own activations by transformer-lens's bridge hooks: a reference independent of interp's engine.

interp's captures (``interp.stream.capture``) read the engine's forward; tests that check the engine against the
model itself read the bridge here: one forward of the bridge under ``torch.inference_mode()`` with temporary
hooks (removed on exit) that keep their input, the attention mask passed.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

__all__ = ["capture"]


def capture(model: Any, batch: Any, names: Iterable[str]) -> tuple[dict[str, torch.Tensor], Any]:
    """``({hook name: activation}, the bridge's output)`` of one bridge forward of ``batch``."""
    store: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(x: torch.Tensor, hook: Any = None) -> torch.Tensor:
            store[name] = x.detach()
            return x

        return hook

    bridge = model.bridge
    with torch.inference_mode(), bridge.hooks(fwd_hooks=[(n, keep(n)) for n in dict.fromkeys(names)]):
        out = bridge(batch.tokens, attention_mask=batch.attention_mask)
    return store, out
