"""Sharding a dataset-level call: the model's reloadable source, contiguous prompt shards, a fingerprint.

A sweep over P prompt pairs is cut into contiguous shards [s_0, s_1), [s_1, s_2), ...; each shard is the
same call on the rows of its prompts: the clean / corrupt inputs (a list of strings or an int tensor
[batch, pos]) and every per-prompt field of the metric (``answer``, ``wrong``, ``token``, ``pos`` given one
per prompt) are sliced to the shard. Workers load the model themselves from :func:`model_source`, so no
weight ever travels through Ray's object store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from interp.errors import ArgumentError, UnsupportedOperationError
from interp.models import Model, list_models

__all__ = ["model_source", "n_prompts", "shard_bounds", "take", "take_metric", "take_args", "input_keys", "fingerprint"]


def model_source(model: Model) -> str:
    """What ``interp.load_model`` takes to rebuild ``model`` in a worker: its catalog name, its local HF
    folder or ``.gguf`` file, or its hub id. A model built in memory (from an HF module, rotated, a random
    toy) has none: an :class:`UnsupportedOperationError` says what to pass instead."""
    src = str(model.source or "")
    for entry in list_models():
        if entry.name == model.name:
            try:
                if str(entry.path()) == src:
                    return entry.name
            except Exception:  # a catalog entry whose package is not installed: not this model's source
                pass
    if src.startswith("hub:") and src[4:] == model.name:
        return model.name
    path = Path(src) if src else None
    if (
        path is not None
        and path.is_absolute()
        and path.exists()
        and (path.suffix == ".gguf" or (path.is_dir() and (path / "config.json").is_file()))
    ):
        return src
    raise UnsupportedOperationError(
        f"cluster=: model {model.name!r} has no source a worker can reload (source={src!r}); workers load the "
        "model themselves and never receive weights through the object store. Load it with interp.load_model("
        "<catalog name | local HF folder | .gguf file | hub id>), or save it to a folder (e.g. HF save_pretrained) "
        "and load that, then pass cluster=; or run with cluster=None"
    )


def n_prompts(clean: Any, arg: str = "clean") -> int:
    """The number of prompts of an input: 1 for a string, the length of a list, the rows of a tensor."""
    if isinstance(clean, str):
        return 1
    if isinstance(clean, Tensor):
        return 1 if clean.ndim == 1 else int(clean.shape[0])
    if isinstance(clean, (list, tuple)) and clean and isinstance(clean[0], int):
        return 1  # one prompt's ids
    if isinstance(clean, (list, tuple)):
        return len(clean)
    raise ArgumentError(
        f"{arg}={clean!r:.80}: with cluster=, give a string, a list of strings or an int tensor [batch, pos]"
    )


def shard_bounds(n: int, n_shards: int) -> list[tuple[int, int]]:
    """``n_shards`` (at most ``n``) contiguous [start, stop) ranges covering range(n), sizes differing by ≤ 1."""
    k = max(1, min(n, n_shards))
    q, r = divmod(n, k)
    out, s = [], 0
    for i in range(k):
        e = s + q + (1 if i < r else 0)
        out.append((s, e))
        s = e
    return out


def take(x: Any, start: int, stop: int) -> Any:
    """Rows [start, stop) of an input (None stays None; a single prompt is its own only shard)."""
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, Tensor):
        return x if x.ndim == 1 else x[start:stop]
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], int):
        return x
    return list(x[start:stop])


def _per_prompt_field(name: str, v: Any, n: int, multi: bool) -> bool:
    if name not in ("answer", "wrong", "token", "pos") or n <= 1 or isinstance(v, (str, int)):
        return False
    if isinstance(v, Tensor):
        return v.ndim == (2 if multi else 1) and int(v.shape[0]) == n
    if isinstance(v, list):
        return len(v) == n
    if isinstance(v, tuple):
        return not multi and len(v) == n
    return False


def take_metric(metric: Any, n: int, start: int, stop: int) -> Any:
    """``metric`` for prompts [start, stop): its per-prompt fields (one entry per prompt) sliced."""
    if not dataclasses.is_dataclass(metric) or isinstance(metric, type):
        return metric
    multi = bool(getattr(metric, "multi_token", False))
    changes = {}
    for f in dataclasses.fields(metric):
        v = getattr(metric, f.name)
        if _per_prompt_field(f.name, v, n, multi):
            changes[f.name] = v[start:stop] if isinstance(v, Tensor) else type(v)(v[start:stop])
    return dataclasses.replace(metric, **changes) if changes else metric


def input_keys(fn: str) -> tuple[str, ...]:
    """The arguments of ``fn`` that hold one row per prompt (the first one counts the prompts)."""
    return {"attribute_logits": ("inputs",), "aggregate_graphs": ("prompts",)}.get(fn, ("clean", "corrupt"))


def take_args(fn: str, args: dict[str, Any], n: int, start: int, stop: int) -> dict[str, Any]:
    """``fn``'s arguments for prompts [start, stop): the inputs' rows, the metric's per-prompt fields, and for
    ``attribute_logits`` a per-prompt ``answer`` / ``wrong`` / ``pos`` (keys starting with "_" are the driver's
    own notes, not arguments); for ``aggregate_graphs`` a per-prompt ``target`` / ``wrong``."""
    keys = input_keys(fn)
    out = {k: (take(v, start, stop) if k in keys else v) for k, v in args.items() if not k.startswith("_")}
    if "metric" in args:
        out["metric"] = take_metric(args["metric"], n, start, stop)
    if fn == "attribute_logits":
        multi = bool(args.get("multi_token", False))
        for k in ("answer", "wrong", "pos"):
            v: Any = args.get(k)
            if _per_prompt_field(k, v, n, multi) or (k == "wrong" and isinstance(v, list) and len(v) == n > 1):
                out[k] = v[start:stop] if isinstance(v, Tensor) else type(v)(v[start:stop])
    if fn == "aggregate_graphs":  # a target / wrong token per prompt (a list, a tuple or a 1-d tensor of n)
        for k in ("target", "wrong"):
            v = args.get(k)
            if n > 1 and (isinstance(v, (list, tuple)) or (isinstance(v, Tensor) and v.ndim == 1)) and len(v) == n:
                out[k] = v[start:stop] if isinstance(v, Tensor) else type(v)(v[start:stop])
    return out


def _canon(x: Any) -> Any:
    if isinstance(x, Tensor):
        t = x.detach().cpu().contiguous()
        return {
            "tensor": hashlib.sha256(
                t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes()
            ).hexdigest(),
            "shape": list(t.shape),
            "dtype": str(t.dtype),
        }
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, (list, tuple)):
        return [_canon(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"class": type(x).__qualname__, **{f.name: _canon(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if callable(x):
        return f"{getattr(x, '__module__', '?')}.{getattr(x, '__qualname__', type(x).__qualname__)}"
    return repr(x)


def fingerprint(fn: str, source: str, dtype: Any, args: dict[str, Any], extra: Optional[dict] = None) -> str:
    """A sha256 of everything that determines a sweep's shards (function, model source and dtype, arguments)."""
    blob = json.dumps(
        {"fn": fn, "source": source, "dtype": str(dtype), "args": _canon(args), **(extra or {})}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()
