"""GGUF -> dequantized safetensors cache.

The first load of a GGUF dequantizes it with ``transformers`` (tens of seconds); the result
is saved in Hugging Face format under ``cache_dir/<stem>-<size>-<sha256[:16]>/`` so later
loads take a few seconds. Writes are atomic (a temporary folder renamed into place once
complete) and reads are verified against the manifest (size and sha256 of the weights file);
a corrupt entry is rebuilt once, then reported.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from interp.errors import ModelLoadError

__all__ = ["load_gguf_cached", "file_sha256"]

log = logging.getLogger(__name__)
_MANIFEST = "interp-manifest.json"
_WEIGHTS = "model.safetensors"


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _read_gguf(gguf: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    import transformers

    try:
        import gguf  # noqa: F401  (transformers needs it; fail with our message if absent)
    except ImportError as e:  # pragma: no cover - gguf is a hard dependency
        raise ModelLoadError("reading a .gguf file needs the 'gguf' package: pip install gguf") from e
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=dtype
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as e:  # transformers/gguf raise many types for a bad file
        raise ModelLoadError(
            f"path={str(gguf)!r} could not be read as a GGUF model ({type(e).__name__}: {e}); "
            "the file may be truncated or corrupt"
        ) from e
    return model, tokenizer


def _verify(entry: Path) -> bool:
    try:
        manifest = json.loads((entry / _MANIFEST).read_text())
        weights = entry / _WEIGHTS
        return (
            weights.stat().st_size == manifest["weights_size"]
            and file_sha256(weights) == manifest["weights_sha256"]
        )
    except (OSError, ValueError, KeyError):
        return False


def _write_entry(gguf: Path, entry: Path, gguf_sha: str) -> None:
    model, tokenizer = _read_gguf(gguf, torch.float32)
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)  # ties embed/lm_head (safetensors save_model)
        tokenizer.save_pretrained(tmp)
        weights = tmp / _WEIGHTS
        manifest = {
            "gguf": gguf.name, "gguf_size": gguf.stat().st_size, "gguf_sha256": gguf_sha,
            "weights_size": weights.stat().st_size, "weights_sha256": file_sha256(weights),
        }
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1))
        if entry.exists():
            shutil.rmtree(entry)
        os.replace(tmp, entry)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_entry(entry: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(entry), dtype=dtype)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(entry))
    return model, tokenizer


def load_gguf_cached(gguf: Path, cache_dir: Path, dtype: torch.dtype) -> tuple[Any, Any, Path]:
    """The HF model and tokenizer of ``gguf``, through the safetensors cache; returns the entry path."""
    if not gguf.is_file():
        raise ModelLoadError(f"path={str(gguf)!r} is not a file")
    size = gguf.stat().st_size
    sha = file_sha256(gguf)
    entry = Path(cache_dir) / f"{gguf.stem}-{size}-{sha[:16]}"
    for attempt in (1, 2):
        if not _verify(entry):
            if entry.exists():
                log.warning("cache entry %s failed verification; rebuilding it", entry)
            else:
                log.info("dequantizing %s into the cache (first load only)", gguf.name)
            _write_entry(gguf, entry, sha)
        try:
            model, tokenizer = _load_entry(entry, dtype)
            return model, tokenizer, entry
        except Exception as e:
            if attempt == 2:
                raise ModelLoadError(
                    f"cache entry {str(entry)!r} for {gguf.name} could not be loaded after a rebuild "
                    f"({type(e).__name__}: {e}); delete it or pass another cache_dir"
                ) from e
            log.warning("cache entry %s could not be loaded (%s); rebuilding it", entry, e)
            shutil.rmtree(entry, ignore_errors=True)
    raise AssertionError("unreachable")  # pragma: no cover
