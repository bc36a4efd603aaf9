"""Toy attention-only transformers: build, train, load, probe, and the shipped weights.

The native model format (build, load, save; ``ToyConfig``) lives in :mod:`interp.models`
(``interp.models._native`` documents how the toys map onto interp's ArchInfo / Weights records)
and is re-exported here; this package holds the training recipe, the data and the probes. See
:mod:`interp.toy._data` for the synthetic data, :mod:`interp.toy._probes` for the induction
probes and :mod:`interp.toy.train` for the recipe that reproduces ``weights/attn-only-1l`` and
``weights/attn-only-2l`` (catalog ``toy-attn-only-1l`` / ``toy-attn-only-2l``). The training
entry points (``train_toy``, ``Recipe``) live in :mod:`interp.toy.train`, which is also the
``python -m interp.toy.train`` script.
"""

from interp.models import ToyConfig, build_toy, load_toy, save_toy
from interp.toy._data import random_tokens, repeated_tokens, span_copy_batch
from interp.toy._probes import attention_patterns, probe_report
from interp.toy._skip_trigrams import skip_trigrams

__all__ = [
    "ToyConfig",
    "attention_patterns",
    "build_toy",
    "load_toy",
    "probe_report",
    "random_tokens",
    "repeated_tokens",
    "save_toy",
    "skip_trigrams",
    "span_copy_batch",
]
