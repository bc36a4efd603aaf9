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

from typing import Any

from interp.models import ToyConfig, build_toy, load_toy, save_toy
from interp.toy._data import random_tokens, repeated_tokens, span_copy_batch
from interp.toy._probes import logits_and_patterns, probe_report
from interp.toy._skip_trigrams import skip_trigrams

__all__ = [
    "ToyConfig",
    "build_toy",
    "load_toy",
    "logits_and_patterns",
    "probe_report",
    "random_tokens",
    "repeated_tokens",
    "save_toy",
    "skip_trigrams",
    "span_copy_batch",
]

#: Deprecated names -> the names they became (kept, with a DeprecationWarning on each use, for one release):
#: ``attention_patterns`` is :func:`interp.stream.attention_patterns`'s name, a different function.
_RENAMED = {"attention_patterns": "logits_and_patterns"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        from interp._validate import renamed

        return renamed(f"interp.toy.{name}", f"interp.toy.{_RENAMED[name]}", globals()[_RENAMED[name]])
    raise AttributeError(f"module 'interp.toy' has no attribute {name!r}")
