"""Argument checks shared by every public function: each raises a typed error naming the argument,
the value it got and what is allowed; and :func:`shardable`, the one hand-off of a dataset-level function
called with ``cluster=`` (checked by :func:`check_cluster`) to that cluster's sharded sweep."""

from __future__ import annotations

import functools
import inspect
import operator
import warnings
from typing import Any, Callable, Iterable, Literal, Optional, TypeGuard, TypeVar, cast, overload

import numpy as np

from interp.errors import ArgumentError, UnsupportedOperationError

__all__ = [
    "is_index",
    "is_int",
    "is_real",
    "check_bool",
    "check_choice",
    "check_cluster",
    "check_finite_float",
    "check_index",
    "check_int",
    "check_int_min",
    "check_int_range",
    "check_positive_float",
    "check_positive_int",
    "shardable",
    "renamed",
    "keyword_only_since",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def is_int(value: Any) -> TypeGuard[int]:
    """A Python or numpy integer, not a bool (a type guard: where it holds, type checkers read ``value`` as an int)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> TypeGuard[float]:
    """A Python or numpy real number (int or float), not a bool (a type guard: read as a float where it holds)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def is_index(value: Any) -> bool:
    """An integer that can index a sequence (a Python or numpy int, a 0-d integer tensor: anything with
    ``__index__``), not a bool."""
    if isinstance(value, (bool, np.bool_)):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


@overload
def check_positive_int(name: str, value: Any, *, allow_none: Literal[False] = False) -> int: ...
@overload
def check_positive_int(name: str, value: Any, *, allow_none: bool) -> Optional[int]: ...


def check_positive_int(name: str, value: Any, *, allow_none: bool = False) -> Optional[int]:
    """``value`` if it is an int ≥ 1 (or None when ``allow_none``), else an :class:`ArgumentError`."""
    if value is None and allow_none:
        return None
    if not is_int(value) or value < 1:
        raise ArgumentError(f"{name}={value!r} must be a positive int" + (" or None" if allow_none else ""))
    return int(value)


def check_int_range(name: str, value: Any, low: int, high: int) -> int:
    """``value`` if it is an int with low ≤ value < high, else an :class:`ArgumentError`."""
    if not is_int(value) or not low <= value < high:
        raise ArgumentError(f"{name}={value!r} must be an int in [{low}, {high - 1}]")
    return int(value)


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """``value`` if it is one of ``allowed``, else an :class:`ArgumentError` listing them."""
    allowed = list(allowed)
    if not isinstance(value, (str, int, float, bool, type(None))) or value not in allowed:
        raise ArgumentError(f"{name}={value!r} must be one of {allowed}")
    return value


@overload
def check_bool(name: str, value: Any) -> bool: ...
@overload
def check_bool(name: str, value: Any, *, none: str) -> Optional[bool]: ...


def check_bool(name: str, value: Any, *, none: Optional[str] = None) -> Optional[bool]:
    """``value`` if it is a bool, else an :class:`ArgumentError`; with ``none`` (what None means, e.g. "automatic")
    None is allowed too."""
    if none is not None and value is None:
        return None
    if not isinstance(value, bool):
        raise ArgumentError(
            f"{name}={value!r} must be True or False"
            if none is None
            else f"{name}={value!r} must be True, False or None ({none})"
        )
    return value


def check_cluster(cluster: Any, out: Any) -> Any:
    """``cluster`` if it can run a sharded sweep (an ``interp.RayCluster``: it has ``sweep``), else an
    :class:`ArgumentError`; ``out=`` (the shards' folder) needs a cluster."""
    if cluster is None:
        raise ArgumentError(
            f"out={out!r} keeps the shards of a sharded sweep: pass cluster=interp.RayCluster(...) "
            "too, or leave out=None"
        )
    if not callable(getattr(cluster, "sweep", None)):
        raise ArgumentError(
            f"cluster={cluster!r:.80} must be None (in process) or an interp.RayCluster(workers=N | address=...)"
        )
    return cluster


def shardable(fn: _F) -> _F:
    """A dataset-level function ``fn(model, ..., *, cluster=None, out=None)`` that runs sharded when given a cluster:
    with ``cluster`` or ``out`` set, the call becomes ``check_cluster(cluster, out).sweep(fn.__name__, model, out=out,
    progress=..., **every other argument)`` (defaults filled in, so a shard's fingerprint names the whole call), and
    the cluster runs ``fn`` itself on each shard with ``cluster=None``; without them ``fn`` runs in process. The one
    re-dispatch of every sharded function. The cluster is any object with a ``sweep`` method (an
    ``interp.RayCluster``): nothing here imports Ray."""
    sig = inspect.signature(fn)
    for name in ("cluster", "out"):
        if sig.parameters.get(name, None) is None or sig.parameters[name].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"@shardable {fn.__name__} must take a keyword-only {name}= argument")

    @functools.wraps(fn)
    def _dispatch(*args: Any, **kwargs: Any) -> Any:  # private: error messages name fn, not this wrapper
        cluster, out = kwargs.get("cluster"), kwargs.get("out")
        if cluster is None and out is None:
            return fn(*args, **kwargs)
        call = sig.bind(*args, **kwargs)
        call.apply_defaults()
        rest = dict(call.arguments)
        model = rest.pop(next(iter(sig.parameters)))
        del rest["cluster"], rest["out"]
        if "progress" in rest:  # the driver's bar (None, "auto": shown)
            rest["progress"] = rest["progress"] is not False
        return check_cluster(cluster, out).sweep(fn.__name__, model, out=out, **rest)

    return cast(_F, _dispatch)


def check_positive_float(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite real > 0, else an :class:`ArgumentError`."""
    if not is_real(value) or not 0 < value < float("inf"):
        raise ArgumentError(f"{name}={value!r} must be a finite number > 0")
    return float(value)


def check_int(name: str, value: Any) -> int:
    """``value`` if it is an int (not a bool), else an :class:`ArgumentError`."""
    if not is_int(value):
        raise ArgumentError(f"{name}={value!r} must be an int")
    return int(value)


def check_int_min(name: str, value: Any, low: int) -> int:
    """``value`` if it is an int ≥ ``low``, else an :class:`ArgumentError`."""
    if not is_int(value) or value < low:
        raise ArgumentError(f"{name}={value!r} must be an int >= {low}")
    return int(value)


def check_index(name: str, value: Any, size: int, *, what: str) -> int:
    """``value`` (an int in [−size, size), Python-style negative indices allowed) normalised to [0, size);
    ``what`` names the axis in the message ("prompts", "positions")."""
    if not is_int(value):
        raise ArgumentError(f"{name}={value!r} must be an int")
    v = int(value)
    if not -size <= v < size:
        raise ArgumentError(f"{name}={v} is out of range for {size} {what} (allowed: {-size}..{size - 1})")
    return v % size


def check_finite_float(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite real number, else an :class:`ArgumentError`."""
    if not is_real(value) or not np.isfinite(value):
        raise ArgumentError(f"{name}={value!r} must be a finite number")
    return float(value)


def check_not_inference_mode(owner: str) -> None:
    """Refuse a call that takes gradients inside ``torch.inference_mode()``: every tensor made there is an inference
    tensor, which autograd cannot save for backward (``torch.no_grad()`` and ``set_grad_enabled(False)`` are fine:
    the gradient methods turn gradients on for themselves)."""
    import torch

    if torch.is_inference_mode_enabled():
        raise UnsupportedOperationError(
            f"{owner} takes gradients: call it outside torch.inference_mode() (under torch.no_grad() it runs)"
        )


def renamed(old: str, new: str, value: Any) -> Any:
    """``value``, the object now called ``new``, asked for by its deprecated name ``old`` (a module ``__getattr__``'s
    answer): a DeprecationWarning pointing at the caller. The old names are kept for one release."""
    warnings.warn(
        f"{old} is deprecated: it is now {new} (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    return value


def keyword_only_since(n_positional: int, *names: str) -> Callable[[_F], _F]:
    """A function whose parameters ``names`` became keyword-only: for one release they are still accepted positionally
    after its first ``n_positional`` arguments, with a DeprecationWarning. ``inspect.signature`` (and the type
    checker) see the keyword-only signature."""

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            extra = args[n_positional:]
            if extra:
                if len(extra) > len(names):
                    raise TypeError(
                        f"{fn.__name__}() takes {n_positional + len(names)} positional arguments but {len(args)} were "
                        f"given"
                    )
                moved = names[: len(extra)]
                for name, value in zip(moved, extra):
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got multiple values for argument {name!r}")
                    kwargs[name] = value
                warnings.warn(
                    f"{fn.__name__}(): passing {', '.join(moved)} positionally is deprecated; pass "
                    f"{', '.join(f'{n}=' for n in moved)} (positional use goes in the next release)",
                    DeprecationWarning,
                    stacklevel=2,
                )
            return fn(*args[:n_positional], **kwargs)

        return cast(_F, wrapper)

    return decorate
