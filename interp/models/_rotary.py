"""The rotary tables of a loaded model: cos and sin of every position, in the layout its ArchInfo says.

RoPE rotates each pair of query/key coordinates by the angle t·θ_i of the position t:

    (x_a, x_b) ↦ (x_a cos tθ_i − x_b sin tθ_i,  x_b cos tθ_i + x_a sin tθ_i)

with the pairs either the two halves of the first ``rotary_dim`` coordinates (Hugging Face's Llama, NeoX,
Qwen, Mistral, Gemma, Phi-3: ``rotate_half``) or adjacent coordinates (2i, 2i+1) (GPT-J, the toys:
``ArchInfo.rotary_interleaved``). The tables are read from the model's own module — its θ, scaling and
partial factor included — never recomputed (:func:`interp.engine.internal.apply_rotary` applies them): halves layout
``[cos θ_0…θ_{r/2−1} | same]``, adjacent layout ``[cos θ_0, cos θ_0, cos θ_1, …]``. This is the one place that knows
where each family keeps them.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor

from interp.errors import UnsupportedArchitectureError

__all__ = ["rotary_table_index", "rotary_tables"]


def rotary_tables(model: Any, n: int, layer: int = 0) -> tuple[Tensor, Tensor]:
    """(cos, sin) [n, rotary_dim] for positions 0…n−1 of ``model`` (an interp Model) at ``layer``, on its device
    and dtype (Gemma 3 keeps one table per layer type: θ = 10⁴ on its sliding layers, 10⁶ on its global ones)."""
    hf = model.bridge.original_model
    dev, dt = model.device, model.dtype
    mods = {type(m).__name__: m for m in hf.modules()}
    if "NativeRotary" in mods:  # the toys: adjacent pairs, tables cached by the module
        cos, sin = mods["NativeRotary"].cos_cached[:n], mods["NativeRotary"].sin_cached[:n]
    elif "GPTJAttention" in mods:  # GPT-J: one buffer [max_pos, rotary_dim] = [sin | cos] per frequency
        table = mods["GPTJAttention"].embed_positions[:n]
        sin_h, cos_h = table.chunk(2, dim=-1)
        cos, sin = cos_h.repeat_interleave(2, dim=-1), sin_h.repeat_interleave(2, dim=-1)
    else:
        rot = [m for name, m in mods.items() if name.endswith("RotaryEmbedding")]
        if not rot:
            raise UnsupportedArchitectureError(f"model {model.name!r} is rotary but has no rotary module")
        x = torch.zeros(1, n, model.arch.d_model, device=dev, dtype=dt)
        types: Any = getattr(getattr(hf, "config", None), "layer_types", None)
        by_type = types is not None and "layer_type" in inspect.signature(rot[0].forward).parameters
        with torch.no_grad():
            if by_type:
                cos, sin = rot[0](x, torch.arange(n, device=dev)[None], layer_type=types[layer])
            else:
                cos, sin = rot[0](x, torch.arange(n, device=dev)[None])
        cos, sin = cos[0], sin[0]
    return cos.to(dev, dt), sin.to(dev, dt)


def rotary_table_index(model: Any) -> list[int]:
    """Which rotary table each layer of ``model`` uses: all 0, unless the model keeps one table per layer type
    (Gemma 3: its sliding and global layers), then the index of the layer's type — layers with one index share
    :func:`rotary_tables`' output."""
    types = getattr(getattr(getattr(model.bridge, "original_model", None), "config", None), "layer_types", None)
    L = model.arch.n_layers
    return [0] * L if not types else [sorted(set(types)).index(t) for t in types]
