"""A CPU-side guard for the common CUDA bug: a tensor made inside interp without ``device=``.

On a GPU such a tensor lands on the CPU and meets the model's CUDA tensors a few lines later (``Expected all tensors
to be on the same device``); on the CPU it silently works. :class:`HostTensorGuard` is a
:class:`torch.overrides.TorchFunctionMode` that watches every factory call (``torch.zeros``, ``torch.arange``,
``torch.tensor`` of Python data, …) made WITHOUT an explicit ``device=``: when the frame that made it is a module
under ``interp/`` it records ``file:line`` (and raises, unless ``raise_=False``). Calls from transformers,
transformer-lens or torch itself are not interp's frames and pass. ``*_like`` and ``Tensor.new_*`` follow their
input and are not factories here; an explicit ``device="cpu"`` says a host tensor is meant (and is allowed).

It also counts host synchronisations issued from interp's frames (``count_syncs=True``): :attr:`syncs` maps
``file:line`` to a count. A synchronisation is a read of a device value into Python — ``Tensor.item``,
``bool``/``float``/``int``/``index`` of a tensor, ``.tolist()``, ``torch.equal`` / ``allclose``, ``.numpy()`` /
``.cpu()`` / ``.to("cpu")`` of a tensor not on the CPU — or an op whose output shape depends on the data
(``nonzero``, ``unique``, ``masked_select``, one-argument ``where``, indexing by a boolean tensor,
``repeat_interleave`` without ``output_size``): on a GPU each waits for every queued kernel. On the CPU every tensor
is a host tensor, so the count is an upper bound (a host bookkeeping tensor's ``.tolist()`` is counted too). And it
counts host-to-device copies of Python data (``torch.tensor(list, device=d)``, blocking on a GPU) in :attr:`copies`.
"""

from __future__ import annotations

import collections
import os
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import interp

INTERP_DIR = os.path.dirname(os.path.abspath(interp.__file__)) + os.sep
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_HERE = os.path.abspath(__file__)

#: factory functions whose result lands on the default device unless given ``device=``
FACTORIES = frozenset(
    f
    for f in (
        torch.zeros,
        torch.ones,
        torch.empty,
        torch.full,
        torch.arange,
        torch.range,
        torch.eye,
        torch.linspace,
        torch.logspace,
        torch.rand,
        torch.randn,
        torch.randint,
        torch.randperm,
        torch.empty_strided,
        torch.scalar_tensor,
        torch.tril_indices,
        torch.triu_indices,
        torch.tensor,
        torch.as_tensor,
        torch.asarray,
        torch.bartlett_window,
        torch.hann_window,
        torch.hamming_window,
    )
    if f is not None
)
#: factories that copy their data's device when the data is a tensor
_DATA_FOLLOWS = frozenset({torch.tensor, torch.as_tensor, torch.asarray})
#: host synchronisations (a read of a device value into Python, or an op whose output shape depends on the data)
SYNCS = frozenset(
    {
        torch.Tensor.item,
        torch.Tensor.__bool__,
        torch.Tensor.__float__,
        torch.Tensor.__int__,
        torch.Tensor.__index__,
        torch.Tensor.tolist,
        torch.equal,
        torch.Tensor.equal,
        torch.allclose,
        torch.Tensor.allclose,
        torch.nonzero,
        torch.Tensor.nonzero,
        torch.argwhere,
        torch.Tensor.argwhere,
        torch.unique,
        torch.Tensor.unique,
        torch.unique_consecutive,
        torch.Tensor.unique_consecutive,
        torch.masked_select,
        torch.Tensor.masked_select,
    }
)
#: syncs only with some arguments (see :func:`_is_sync`)
_MAYBE = frozenset(
    {
        torch.Tensor.to,
        torch.Tensor.cpu,
        torch.Tensor.numpy,
        torch.where,
        torch.Tensor.__getitem__,
        torch.Tensor.__setitem__,
        torch.repeat_interleave,
        torch.Tensor.repeat_interleave,
    }
)


def _has_bool_index(idx: Any) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.ndim > 0 for i in items)


def _is_sync(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``func(*args, **kwargs)`` reads device data on the host (see the module docstring)."""
    if func in SYNCS:
        return True
    if func not in _MAYBE:
        return False
    if func in (torch.Tensor.cpu, torch.Tensor.numpy):
        return args[0].device.type != "cpu"
    if func is torch.Tensor.to:  # .to("cpu") / .to(torch.device("cpu")) / .to(other_cpu_tensor) of a device tensor
        if args[0].device.type == "cpu":
            return False
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        if isinstance(target, torch.Tensor):
            target = target.device
        return isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"
    if func is torch.where:
        return len(args) + len(kwargs) == 1
    if func is torch.Tensor.__getitem__:
        return _has_bool_index(args[1])
    if func is torch.Tensor.__setitem__:  # t[mask] = tensor gathers the mask's indices; t[mask] = scalar does not
        return _has_bool_index(args[1]) and isinstance(args[2], torch.Tensor) and args[2].ndim > 0
    # repeat_interleave(t, repeats_tensor) sizes its output from the repeats unless told output_size
    repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    if func is torch.repeat_interleave and len(args) == 1 and "repeats" not in kwargs:
        repeats = args[0]
    return isinstance(repeats, torch.Tensor) and repeats.numel() > 1 and kwargs.get("output_size") is None


def _is_copy(func: Any, args: tuple, kwargs: dict) -> bool:
    """A tensor made from Python data on a device named by ``device=`` other than the literal "cpu" (host
    bookkeeping): one host-to-device copy on a GPU."""
    dev = kwargs.get("device")
    return func in _DATA_FOLLOWS and dev is not None and dev != "cpu" and _is_factory_without_device(func, args, {})


class StrayHostTensor(AssertionError):
    """A tensor made inside interp without ``device=`` (it would be on the CPU beside a CUDA model)."""


def _caller() -> tuple[str, int]:
    """The innermost frame outside torch and this file: (filename, line)."""
    f = sys._getframe(2)
    while f is not None:
        name = os.path.abspath(f.f_code.co_filename)
        if not name.startswith(TORCH_DIR) and name != _HERE:
            return name, f.f_lineno
        f = f.f_back
    return "", 0


def _is_factory_without_device(func: Any, args: tuple, kwargs: dict) -> bool:
    if func not in FACTORIES:
        return False
    if kwargs.get("device") is not None:
        return False
    if (
        func in _DATA_FOLLOWS
        and args
        and (
            isinstance(args[0], torch.Tensor)
            or (isinstance(args[0], (list, tuple)) and args[0] and all(isinstance(a, torch.Tensor) for a in args[0]))
        )
    ):
        return False  # torch.tensor(t) / as_tensor(t): on t's device
    return True


class HostTensorGuard(TorchFunctionMode):
    """Record (and by default raise on) factory calls without ``device=`` from interp's modules; count syncs."""

    def __init__(self, *, raise_: bool = True, count_syncs: bool = False) -> None:
        super().__init__()
        self.raise_ = raise_
        self.count_syncs = count_syncs
        self.violations: collections.Counter[str] = collections.Counter()
        self.syncs: collections.Counter[str] = collections.Counter()
        self.copies: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if _is_factory_without_device(func, args, kwargs):
            file, line = _caller()
            if file.startswith(INTERP_DIR):
                where = f"{os.path.relpath(file, os.path.dirname(INTERP_DIR.rstrip(os.sep)))}:{line}"
                self.violations[where] += 1
                if self.raise_:
                    raise StrayHostTensor(
                        f"{getattr(func, '__name__', func)}() without device= at {where}: on a GPU "
                        "this tensor is on the CPU; pass device= (the model's or the input's)"
                    )
        elif self.count_syncs and (_is_sync(func, args, kwargs) or _is_copy(func, args, kwargs)):
            file, line = _caller()
            if file.startswith(INTERP_DIR):
                where = f"{os.path.relpath(file, os.path.dirname(INTERP_DIR.rstrip(os.sep)))}:{line}"
                (self.syncs if _is_sync(func, args, kwargs) else self.copies)[where] += 1
        return func(*args, **kwargs)
