"""The chunk budget (interp.engine._budget): the floor on the CPU, an eighth of the free memory on a GPU that has
more; and the analyses size their chunks from it (EAP's prompts, the patching sweep's rows)."""

from __future__ import annotations

import torch

from interp.causal.internal import default_batch_size
from interp.engine.internal import chunk_bytes
from tiny_models import tiny_model


def test_cpu_budget_is_the_floor():
    assert chunk_bytes(torch.device("cpu"), 256e6) == 256e6


def test_gpu_budget_is_an_eighth_of_the_free_memory_above_the_floor(monkeypatch):
    free = {"bytes": 80e9}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 141e9))
    assert chunk_bytes(torch.device("cuda"), 1e9) == 80e9 / 8
    free["bytes"] = 4e9  # a nearly full card: never below the floor
    assert chunk_bytes(torch.device("cuda"), 1e9) == 1e9


def test_patch_rows_per_chunk_follow_the_budget(monkeypatch):
    m = tiny_model("llama")
    on_cpu = default_batch_size(m, 16)
    import interp.causal._patch as P

    monkeypatch.setattr(P, "chunk_bytes", lambda device, floor: 4 * floor)
    assert default_batch_size(m, 16) in range(4 * on_cpu - 3, 4 * on_cpu + 1)
