"""GGUF -> dequantized safetensors cache.

The first load of a GGUF dequantizes it with ``transformers`` (tens of seconds); the result
is saved in Hugging Face format under ``cache_dir/<stem>-<size>-<sha256[:16]>/`` so later
loads take a few seconds. Writes are atomic (a temporary folder renamed into place once
complete) and every read is verified against the manifest: the weights file's size and its
full sha256 (≈0.5 s for smollm2's 540 MB, a fraction of a cached load; see
``benchmarks/bench_load.py``). A corrupt entry is rebuilt once, then reported.
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
    """Hex sha256 of a file, read in 4 MiB blocks (``hashlib.file_digest`` needs Python 3.11)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _read_gguf(gguf: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    import transformers

    try:
        import gguf as _gguf_lib  # noqa: F401  (transformers needs it; name must not shadow the argument)
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


def _save_dequantized(model: Any, folder: Path) -> None:
    """Save a GGUF-loaded (already dequantized, float) HF model as a plain safetensors folder.

    ``save_pretrained`` refuses models loaded from GGUF (their config carries a
    ``quantization_config``), so the config is written without it. Tied tensors (embed /
    lm_head) are stored once, under the first name (the input embedding, as HF's own
    ``save_pretrained`` does), so loading finds every weight and initialises nothing.
    """
    import copy

    from safetensors.torch import save_file

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.save_pretrained(folder)
    tensors: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for key, t in model.state_dict().items():
        ident = (t.data_ptr(), tuple(t.shape))
        if ident in seen:  # a tied copy of a tensor already stored
            continue
        seen.add(ident)
        tensors[key] = t.detach().contiguous()
    save_file(tensors, str(folder / _WEIGHTS), metadata={"format": "pt"})


def _write_entry(gguf: Path, entry: Path, gguf_sha: str) -> None:
    """Dequantize ``gguf`` into a temporary folder beside ``entry``, then rename it into place.

    Readers never see a half-written entry: the folder only gets its final name once the
    weights, tokenizer and manifest (with the weights' size and sha256) are complete.
    """
    model, tokenizer = _read_gguf(gguf, torch.float32)  # ModelLoadError for a bad file
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError as e:
        raise ModelLoadError(
            f"cache_dir={str(entry.parent.parent)!r} is not writable ({e}); pass another cache_dir "
            "or set INTERP_CACHE to a writable folder"
        ) from e
    try:
        _save_dequantized(model, tmp)
        tokenizer.save_pretrained(tmp)
        weights = tmp / _WEIGHTS
        manifest = {
            "gguf": gguf.name, "gguf_size": gguf.stat().st_size, "gguf_sha256": gguf_sha,
            "weights_size": weights.stat().st_size, "weights_sha256": file_sha256(weights),
        }
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1))
        if entry.exists():
            shutil.rmtree(entry)
        try:
            os.replace(tmp, entry)
        except OSError:
            if not _verify(entry):  # not another process finishing the same entry first
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelLoadError(
            f"could not write the cache entry {str(entry)!r} ({type(e).__name__}: {e}); free some "
            "space, or pass another cache_dir / set INTERP_CACHE"
        ) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_entry(entry: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(entry), dtype=dtype, attn_implementation="eager")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(entry))
    return model, tokenizer


def load_gguf_cached(gguf: Path, cache_dir: Path, dtype: torch.dtype) -> tuple[Any, Any, Path]:
    """The HF model and tokenizer of ``gguf``, through the safetensors cache; returns the entry path.

    1. Key the entry by the GGUF's size and sha256.
    2. Verify the entry (manifest present; weights file size and sha256 as recorded); if it is
       missing or fails, dequantize the GGUF into a fresh entry.
    3. Load the entry. If that fails and the entry was not just rebuilt, rebuild it once and
       retry; a second failure is a :class:`ModelLoadError`.
    """
    if not gguf.is_file():
        raise ModelLoadError(f"path={str(gguf)!r} is not a file")
    size = gguf.stat().st_size
    sha = file_sha256(gguf)
    entry = Path(cache_dir) / f"{gguf.stem}-{size}-{sha[:16]}"
    rebuilt = False
    if not _verify(entry):
        if entry.exists():
            log.warning("cache entry %s failed verification; rebuilding it", entry)
        else:
            log.info("dequantizing %s into the cache (first load only)", gguf.name)
        _write_entry(gguf, entry, sha)
        rebuilt = True
    try:
        model, tokenizer = _load_entry(entry, dtype)
        return model, tokenizer, entry
    except Exception as e:
        if rebuilt:
            raise _unloadable(entry, gguf, e) from e
        log.warning("cache entry %s could not be loaded (%s); rebuilding it", entry, e)
    _write_entry(gguf, entry, sha)
    try:
        model, tokenizer = _load_entry(entry, dtype)
    except Exception as e:
        raise _unloadable(entry, gguf, e) from e
    return model, tokenizer, entry


def _unloadable(entry: Path, gguf: Path, e: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"cache entry {str(entry)!r} for {gguf.name} could not be loaded even after a rebuild "
        f"({type(e).__name__}: {e}); delete it or pass another cache_dir"
    )
