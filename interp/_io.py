"""Saving and loading results without pickle: tensors in safetensors, everything else as JSON.

A result is written as one ``.safetensors`` file whose header metadata holds the class name
and the non-tensor fields as JSON. Writes are atomic (temporary file + rename); a truncated
or foreign file raises :class:`~interp.errors.ResultFormatError` instead of a torch error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Type, TypeVar, Union

import pandas as pd
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from interp.errors import ExportError, ResultFormatError

__all__ = ["SaveLoadMixin", "atomic_write", "read_safetensors", "write_atomic", "write_safetensors"]

T = TypeVar("T", bound="SaveLoadMixin")
_FORMAT = "interp-result-v1"
_FRAME = "__dataframe__"


def _json_scalar(o: Any) -> Any:
    """numpy/torch scalars (e.g. a DataFrame's numpy.bool_) as Python values; anything else is refused."""
    if hasattr(o, "item") and getattr(o, "ndim", 0) == 0:
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def atomic_write(path: Path, write: Callable[[str], Any]) -> None:
    """Write ``path`` atomically, the one way interp writes files: ``write(tmp)`` fills a temporary file in
    ``path``'s folder (with the usual permissions, 0666 & ~umask), which then replaces ``path`` by os.replace;
    on any error the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".tmp-{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp creates 0600
        os.close(fd)
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` to ``path`` atomically (flushed to disk before the rename), or an ExportError naming the path."""

    def put(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    try:
        atomic_write(path, put)
    except OSError as e:
        raise ExportError(
            f"cannot write path={str(path)!r}: {e.strerror or e} (is {str(Path(path).parent)!r} writable?)"
        ) from e


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write ``tensors`` + ``metadata`` to ``path`` atomically (:func:`atomic_write`)."""
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def read_safetensors(path: Any, *, what: str) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """(path, metadata, tensors) of a saved file, or a ResultFormatError naming ``path`` (``what``: what
    the file should hold, for the message)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ResultFormatError(f"path={path!r} must be a str or os.PathLike naming a .safetensors file")
    path = Path(path)
    if not path.is_file():
        raise ResultFormatError(f"path={str(path)!r} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types on bad headers
        raise ResultFormatError(f"path={str(path)!r} is not a readable {what} ({e}); the file may be truncated") from e
    return path, meta, tensors


class SaveLoadMixin:
    """``result.save(path)`` / ``Result.load(path)`` for frozen dataclasses of tensors, JSON values and DataFrames."""

    def save(self, path: Union[str, os.PathLike]) -> Path:
        if not isinstance(path, (str, os.PathLike)):
            raise ExportError(f"path={path!r} must be a str or os.PathLike ending in .safetensors")
        path = Path(path)
        if path.suffix != ".safetensors":
            raise ExportError(f"path={str(path)!r} must end in .safetensors")
        tensors: dict[str, torch.Tensor] = {}
        meta: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                tensors[f.name] = v.detach().cpu().contiguous()
            elif isinstance(v, pd.DataFrame):
                split = v.to_dict(orient="split")  # Python floats: JSON keeps them bit-exact
                frame = {
                    "columns": [str(c) for c in split["columns"]],
                    "data": split["data"],
                    "dtypes": {str(c): str(t) for c, t in v.dtypes.items()},
                }
                meta[f.name] = {_FRAME: frame}
            else:
                meta[f.name] = v
        try:
            header = json.dumps(meta, default=_json_scalar)
        except TypeError as e:
            raise ExportError(f"{type(self).__name__} has a field that cannot be saved as JSON: {e}") from e
        if not path.parent.is_dir():
            raise ExportError(f"path={str(path)!r}: directory {str(path.parent)!r} does not exist")
        write_safetensors(path, tensors, {"format": _FORMAT, "class": type(self).__name__, "fields": header})
        return path

    @classmethod
    def load(cls: Type[T], path: Union[str, os.PathLike]) -> T:
        path, meta, tensors = read_safetensors(path, what="interp result")
        if meta.get("format") != _FORMAT or meta.get("class") != cls.__name__:
            raise ResultFormatError(
                f"path={str(path)!r} holds {meta.get('class', 'no interp result')!r}, not a {cls.__name__}"
            )
        try:
            fields = json.loads(meta["fields"])
        except (KeyError, TypeError, ValueError) as e:
            raise ResultFormatError(f"path={str(path)!r} has a damaged {cls.__name__} header (fields: {e!r})") from None
        if not isinstance(fields, dict):
            raise ResultFormatError(
                f"path={str(path)!r} has a damaged {cls.__name__} header (fields is not a JSON object)"
            )
        fields.update(tensors)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            v = fields.get(f.name)
            if isinstance(v, dict) and _FRAME in v:
                frame = v[_FRAME]
                fields[f.name] = pd.DataFrame(frame["data"], columns=frame["columns"]).astype(frame.get("dtypes", {}))
            elif isinstance(v, list) and str(f.type).startswith(("tuple", "Tuple")):
                fields[f.name] = tuple(v)  # JSON has no tuples
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        required = {
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = required - set(fields)  # a field added later with a default reads old files
        if missing:
            raise ResultFormatError(f"path={str(path)!r} lacks fields {sorted(missing)} of {cls.__name__}")
        try:
            return cls(**{k: v for k, v in fields.items() if k in names})
        except (TypeError, ValueError) as e:
            raise ResultFormatError(f"path={str(path)!r} does not hold a valid {cls.__name__} ({e})") from e
