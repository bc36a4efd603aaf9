"""GGUF -> dequantized safetensors cache.

The first load of a GGUF dequantizes it with ``transformers`` (tens of seconds); the result
is saved in Hugging Face format under ``cache_dir/<stem>-<size>-<sha256[:16]>/`` so later
loads take a few seconds. Writes are atomic (a temporary folder renamed into place once
complete) and every read is verified against the manifest: the weights file's size, and its
full sha256, computed in a worker thread while the model loads (so the ≈0.5 s it takes for
smollm2's 540 MB mostly overlaps the load; see ``benchmarks/bench_load.py``). A model whose
file fails the check is discarded, never returned. A corrupt entry is rebuilt once, then reported.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import torch

from interp.errors import ModelLoadError

__all__ = ["load_gguf_cached", "file_sha256"]

log = logging.getLogger(__name__)
_MANIFEST = "interp-manifest.json"
_WEIGHTS = "model.safetensors"
#: Entry layout version; entries written by another version are rebuilt. 2: tied weights are
#: stored under the input-embedding name (HF's convention), so loading initialises nothing.
_FORMAT = 2


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


def _manifest(entry: Path) -> Optional[dict[str, Any]]:
    """The entry's manifest if it exists and the weights file has the recorded size, else None."""
    try:
        manifest = json.loads((entry / _MANIFEST).read_text())
        if manifest.get("format") != _FORMAT or (entry / _WEIGHTS).stat().st_size != manifest["weights_size"]:
            return None
        str(manifest["weights_sha256"])
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _verify(entry: Path) -> bool:
    """Full check of an entry: manifest, weights size and sha256."""
    manifest = _manifest(entry)
    return manifest is not None and file_sha256(entry / _WEIGHTS) == manifest["weights_sha256"]


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
            "format": _FORMAT, "gguf": gguf.name, "gguf_size": gguf.stat().st_size, "gguf_sha256": gguf_sha,
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


def _load_verified(entry: Path, dtype: torch.dtype) -> Optional[tuple[Any, Any]]:
    """Load the entry while a worker thread hashes its weights file; None if the hash is wrong.

    The sha256 of the weights (hashlib releases the GIL) overlaps the model load, so the full
    verification costs little wall time; a model whose file fails it is discarded, never returned.
    """
    manifest = _manifest(entry)
    if manifest is None:
        return None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="interp-verify") as pool:
        digest = pool.submit(file_sha256, entry / _WEIGHTS)
        try:
            loaded = _load_entry(entry, dtype)
        except Exception:
            if digest.result() != manifest["weights_sha256"]:
                return None  # corrupt weights: a verification failure, not a load failure
            raise
        if digest.result() != manifest["weights_sha256"]:
            return None
    return loaded


def load_gguf_cached(gguf: Path, cache_dir: Path, dtype: torch.dtype) -> tuple[Any, Any, Path]:
    """The HF model and tokenizer of ``gguf``, through the safetensors cache; returns the entry path.

    1. Key the entry by the GGUF's size and sha256.
    2. If the entry is missing, or its manifest / weights size is wrong, dequantize the GGUF
       into a fresh entry.
    3. Load the entry while verifying the weights' sha256 against the manifest.
    4. If that fails (hash or load) and the entry was not just rebuilt, rebuild it once and
       retry; a second failure is a :class:`ModelLoadError`.
    """
    if not gguf.is_file():
        raise ModelLoadError(f"path={str(gguf)!r} is not a file")
    size = gguf.stat().st_size
    sha = file_sha256(gguf)
    entry = Path(cache_dir) / f"{gguf.stem}-{size}-{sha[:16]}"
    rebuilt = False
    if _manifest(entry) is None:
        if entry.exists():
            log.warning("cache entry %s is incomplete, has the wrong size or an older format; rebuilding it", entry)
        else:
            log.info("dequantizing %s into the cache (first load only)", gguf.name)
        _write_entry(gguf, entry, sha)
        rebuilt = True
    for _ in range(2):  # the entry as found, then (at most once) rebuilt
        try:
            loaded = _load_verified(entry, dtype)
        except Exception as e:
            if rebuilt:
                raise _unloadable(entry, gguf, e) from e
            log.warning("cache entry %s could not be loaded (%s); rebuilding it", entry, e)
        else:
            if loaded is not None:
                return loaded[0], loaded[1], entry
            if rebuilt:
                raise ModelLoadError(
                    f"cache entry {str(entry)!r} for {gguf.name} fails its sha256 check even after a "
                    "rebuild; the disk or cache_dir may be faulty: delete it or pass another cache_dir"
                )
            log.warning("cache entry %s failed sha256 verification; rebuilding it", entry)
        _write_entry(gguf, entry, sha)
        rebuilt = True
    raise AssertionError("unreachable")  # pragma: no cover


def _unloadable(entry: Path, gguf: Path, e: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"cache entry {str(entry)!r} for {gguf.name} could not be loaded even after a rebuild "
        f"({type(e).__name__}: {e}); delete it or pass another cache_dir"
    )
