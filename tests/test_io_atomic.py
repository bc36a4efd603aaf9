"""The one atomic write (interp._io.atomic_write): every file interp writes goes through it."""

from __future__ import annotations

import os
import pathlib
import re

import pytest

from interp._io import atomic_write, write_atomic
from interp.errors import ExportError


def test_atomic_write_replaces_or_leaves_untouched(tmp_path):
    p = tmp_path / "f.json"
    p.write_text("old")

    def fail(tmp: str) -> None:
        pathlib.Path(tmp).write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(p, fail)
    assert p.read_text() == "old" and [q.name for q in tmp_path.iterdir()] == ["f.json"]  # no temporary left
    atomic_write(p, lambda tmp: pathlib.Path(tmp).write_text("new"))
    assert p.read_text() == "new" and [q.name for q in tmp_path.iterdir()] == ["f.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask  # the usual permissions, not mkstemp's 0600


def test_write_atomic_names_the_path_it_cannot_write():
    with pytest.raises(ExportError, match="cannot write path='/proc/interp-x.html'"):
        write_atomic(pathlib.Path("/proc/interp-x.html"), b"x")


def test_no_other_module_writes_through_its_own_temporary_file():
    """One implementation: no module but interp/_io.py pairs a temporary file with os.replace (a folder renamed into
    place, as the GGUF cache entry is, is another operation)."""
    root = pathlib.Path(__file__).resolve().parents[1] / "interp"
    hits = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "_io.py" and re.search(r"tempfile\.mkstemp|NamedTemporaryFile", p.read_text())
    ]
    assert not hits, hits
