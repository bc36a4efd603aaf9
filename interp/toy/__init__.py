"""Toy attention-only transformers: build, train, load, and the shipped weights.

See :mod:`interp.toy._model` for how the toys map onto interp's ArchInfo / Weights records,
:mod:`interp.toy._data` for the synthetic data, and :mod:`interp.toy.train` for the recipe that
reproduces ``weights/attn-only-1l`` and ``weights/attn-only-2l`` (catalog ``toy-attn-only-1l``/``-2l``).
"""

from interp.toy._config import ToyConfig
from interp.toy._data import random_tokens, repeated_tokens, span_copy_batch
from interp.toy._model import build_toy, load_toy, save_toy

__all__ = [
    "ToyConfig", "build_toy", "load_toy", "random_tokens", "repeated_tokens", "save_toy", "span_copy_batch",
]
