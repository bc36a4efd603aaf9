"""generate refuses, before running, what the model's context or the free memory cannot hold — a generation past
them ran until killed (``max_new_tokens=10**9``; 40,000 tokens past Gemma 3's 32,768-token context)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from interp.errors import ArgumentError, MemoryCapError
from interp.features import generate
from tiny_models import tiny_model


@pytest.mark.parametrize("family", ["llama", "gpt2"])  # rotary (no learned positions) and learned positions
def test_past_the_context_is_refused_before_running(family):
    m = tiny_model(family)
    prompt = "w1 w2 w3"
    n = m.to_tokens(prompt).shape[1]
    generate(m, prompt, None, [], max_new_tokens=m.arch.n_ctx - n)  # exactly the context: runs
    for steps in (m.arch.n_ctx - n + 1, 10**9):
        t0 = time.perf_counter()
        with pytest.raises(ArgumentError, match=rf"max_new_tokens={steps}.*context|max_new_tokens={steps}.*positions"):
            generate(m, prompt, None, [], max_new_tokens=steps)
        assert time.perf_counter() - t0 < 5  # refused up front, not after generating


def test_more_than_free_memory_is_refused_before_running(monkeypatch):
    import psutil

    m = tiny_model("llama")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=100))
    with pytest.raises(MemoryCapError, match=r"max_new_tokens=4.*GiB.*free"):
        generate(m, "w1 w2 w3", None, [], max_new_tokens=4)
