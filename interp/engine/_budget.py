"""How many bytes one chunk of a batched analysis may hold: the rows per chunk of the patching sweep and the prompts
per chunk of edge attribution are sized from it.

On the CPU a chunk holds ``floor`` bytes (what each analysis names: its activations stay near it). On a GPU, where
each chunk is a walk over the layers whose kernels are small (launch-bound), the budget is an eighth of the device's
free memory when that is more: an H200 at Llama-3.2-1B's config ran EAP in 8 one-prompt chunks at the 1 GB floor
(32× a forward) and the all-heads patch in ~90 chunks at 256 MB. Chunking by prompts or variants is exact, so the
budget changes the time and the peak memory, never the values.
"""

from __future__ import annotations

import torch

__all__ = ["chunk_bytes"]

#: the share of a GPU's free memory one chunk may take
GPU_SHARE = 1 / 8


def chunk_bytes(device: torch.device, floor: float) -> float:
    """``floor`` on the CPU; on a CUDA device max(``floor``, :data:`GPU_SHARE` × its free memory)."""
    if device.type != "cuda":
        return floor
    free, _total = torch.cuda.mem_get_info(device)
    return max(floor, GPU_SHARE * free)
