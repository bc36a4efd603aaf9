"""Every tensor of a result, with its path: the one walk the device tests use."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import torch


def tensors(obj: Any, path: str = "result") -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor of a result: dataclass fields, dicts, lists and tuples, recursively (not a
    model's ``Weights``)."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type) and type(obj).__name__ != "Weights":
        for f in dataclasses.fields(obj):
            yield from tensors(getattr(obj, f.name, None), f"{path}.{f.name}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors(v, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors(v, f"{path}[{i}]")
