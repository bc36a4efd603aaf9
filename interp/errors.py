"""The exceptions interp raises for bad input.

Every error a user can trigger by passing something wrong is an :class:`InterpError`
subclass whose message names the argument, the value it got and what is allowed.
They also subclass the builtin exception a Python user would expect (``ValueError``,
``FileNotFoundError``...), so generic handlers keep working.
"""

from __future__ import annotations

__all__ = [
    "InterpError",
    "ArgumentError",
    "LabelError",
    "ShapeError",
    "ModelNotFoundError",
    "ModelLoadError",
    "OfflineError",
    "MissingPackageError",
    "UnsupportedArchitectureError",
    "UnsupportedOperationError",
    "MemoryCapError",
    "ExportError",
    "ResultFormatError",
]


class InterpError(Exception):
    """Base class of every error interp raises for bad input."""


class ArgumentError(InterpError, ValueError):
    """An argument has a value that is not allowed (out of range, wrong type, empty...)."""


class LabelError(ArgumentError, KeyError):
    """A read/write label or hook name that does not exist; the message lists valid ones."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ShapeError(ArgumentError):
    """A tensor argument has the wrong shape, dtype or device."""


class ModelNotFoundError(InterpError, FileNotFoundError):
    """A model name or path that is neither in the catalog nor on disk."""


class ModelLoadError(InterpError, RuntimeError):
    """A model file exists but cannot be read (truncated, corrupt, wrong format)."""


class OfflineError(InterpError, ConnectionError):
    """A hub id was requested but the hub cannot be reached."""


class MissingPackageError(InterpError, ImportError):
    """A catalog model's package is not installed; the message gives the pip command."""


class UnsupportedArchitectureError(InterpError, NotImplementedError):
    """The model's architecture is not one of the supported families."""


class UnsupportedOperationError(InterpError, TypeError):
    """The operation does not apply to this model (e.g. logits of an encoder without a head)."""


class MemoryCapError(InterpError, MemoryError):
    """Materialising the requested tensor would exceed the memory cap."""


class ExportError(InterpError, OSError):
    """A figure or result cannot be written to the requested path."""


class ResultFormatError(InterpError, ValueError):
    """A saved result file that is missing, truncated, or holds another kind of result."""
