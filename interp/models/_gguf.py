"""GGUF -> dequantized safetensors cache.

The first load of a GGUF dequantizes it with ``transformers`` (tens of seconds); the result
is saved in Hugging Face format under ``cache_dir/<stem>-<size>-<sha256[:16]>/`` (the key is
the GGUF's size and sha256) so later loads take a few seconds (``benchmarks/bench_load.py``).
A :class:`GGUFSource` names the GGUF by that key and produces the file only when an entry has
to be written: a file on disk (hashed on every load, unless the package that installed it states
its sha256 in its wheel's RECORD, as a catalog model's does), or a GGUF split across packages whose
sha256 the package states (assembled into a scratch folder on the first load only).

Writes are atomic: a temporary folder, renamed into place once the weights, tokenizer and
manifest are complete. Every read is verified against the manifest before the weights are
used, in two tiers so that a cached load does not re-hash 540 MB each time:

* always: the weights file's size, and the sha256 of its safetensors header (every tensor's
  name, dtype, shape and byte range);
* if the file's mtime is the one recorded at write time: the sha256 of 64 evenly spaced
  64 KiB blocks (4 MiB); if the mtime differs (the file was rewritten, copied or touched):
  the sha256 of the whole file, recorded at write time.

This catches truncation, rewritten or replaced files and gross corruption; what it does not
catch is a silent bit flip outside the sampled blocks of a file whose mtime is untouched (disk
rot) — :func:`verify_entry` with ``full=True`` checks the whole-file sha256 for that. A
failing entry is rebuilt once, then reported as a :class:`~interp.errors.ModelLoadError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Optional

import torch

from interp._io import atomic_write
from interp.errors import ArgumentError, MemoryCapError, ModelLoadError
from interp.models._checkpoint import from_pretrained_complete
from interp.models._progress import cold_load, load_step

__all__ = [
    "GGUFSource",
    "file_sha256",
    "gguf_file_source",
    "load_entry_for_bridge",
    "load_gguf_cached",
    "load_gguf_source_cached",
    "scratch_folder",
    "verify_entry",
]

log = logging.getLogger(__name__)
_MANIFEST = "interp-manifest.json"
_WEIGHTS = "model.safetensors"
#: Entry layout version; entries written by another version are rebuilt. 3: tied weights are
#: stored under the input-embedding name (HF's convention, so loading initialises nothing);
#: the manifest records the header / sampled-block hashes and the mtime.
_FORMAT = 3
_SAMPLES, _SAMPLE_BYTES = 64, 1 << 16


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF known by its identity (the cache key) and a way to get the file when the cache needs it.

    ``stem``, ``size`` and ``sha256`` are the GGUF file's; ``provide(folder)`` is a context manager
    yielding the path of the GGUF, given a folder where it may write scratch files (a GGUF split
    across packages is assembled there, and removed on exit). A cached load never calls ``provide``.
    """

    stem: str
    size: int
    sha256: str
    provide: Callable[[Path], ContextManager[Path]]


def gguf_file_source(gguf: Path, *, sha256: Optional[str] = None) -> GGUFSource:
    """A GGUF file on disk, keyed by its size and sha256: ``sha256`` where the package that installed the file
    states it (a catalog model), else hashed on every load."""
    if not gguf.is_file():
        raise ModelLoadError(f"path={str(gguf)!r} is not a file")
    if sha256 is None:
        with load_step("hash the GGUF (its cache key)"):
            sha256 = file_sha256(gguf)
    return GGUFSource(gguf.stem, gguf.stat().st_size, sha256, lambda _folder: contextlib.nullcontext(gguf))


@contextlib.contextmanager
def scratch_folder(parent: Path) -> Iterator[Path]:
    """A fresh ``.tmp-`` folder inside ``parent``, removed with its contents on exit."""
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
        with load_step("dequantize the GGUF's weights"), _reader_bar_switchable():
            model = from_pretrained_complete(
                transformers.AutoModelForCausalLM, str(gguf.parent), gguf_file=gguf.name, dtype=dtype, shown=str(gguf)
            )
        with load_step("convert the GGUF's tokenizer"):
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except ModelLoadError:  # the file lacks tensors of its model (named)
        raise
    except Exception as e:  # transformers/gguf raise many types for a bad file
        raise ModelLoadError(
            f"path={str(gguf)!r} could not be read as a GGUF model ({type(e).__name__}: {e}); "
            "the file may be truncated or corrupt"
        ) from e
    return model, tokenizer


@contextlib.contextmanager
def _reader_bar_switchable() -> Iterator[None]:
    """transformers' GGUF reader draws its "Converting and de-quantizing GGUF tensors" bar with tqdm directly, past
    transformers' own progress-bar switch (``transformers.utils.logging.disable_progress_bar``, which a load turns
    off): for the read, the reader's ``tqdm`` is transformers' switchable one; restored after."""
    from transformers import modeling_gguf_pytorch_utils as reader
    from transformers.utils import logging as hf_logging

    own = getattr(reader, "tqdm", None)
    if own is None:  # a transformers whose reader has no such bar
        yield
        return
    reader.tqdm = hf_logging.tqdm
    try:
        yield
    finally:
        reader.tqdm = own


def _header_sha256(path: Path) -> str:
    """sha256 of a safetensors file's header (8-byte length + JSON of names, dtypes, shapes, offsets)."""
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n < 1 << 27:
            raise ValueError(f"{path} has no valid safetensors header")
        header = f.read(n)
    if len(header) != n:
        raise ValueError(f"{path} is truncated inside its header")
    return hashlib.sha256(head + header).hexdigest()


def _sample_sha256(path: Path) -> str:
    """sha256 of ``_SAMPLES`` evenly spaced ``_SAMPLE_BYTES`` blocks (first and last included)."""
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for i in range(_SAMPLES):
            f.seek(max(size - _SAMPLE_BYTES, 0) * i // (_SAMPLES - 1))
            h.update(f.read(_SAMPLE_BYTES))
    return h.hexdigest()


def _fingerprint(weights: Path) -> dict[str, Any]:
    """What the manifest records about the weights file (computed once, at write time)."""
    return {
        "weights_size": weights.stat().st_size,
        "weights_mtime_ns": weights.stat().st_mtime_ns,
        "weights_header_sha256": _header_sha256(weights),
        "weights_sample_sha256": _sample_sha256(weights),
        "weights_sha256": file_sha256(weights),
    }


def _manifest(entry: Path) -> Optional[dict[str, Any]]:
    """The entry's manifest if it is of this format and complete, else None."""
    try:
        manifest = json.loads((entry / _MANIFEST).read_text())
        keys = ("weights_size", "weights_mtime_ns", "weights_header_sha256", "weights_sample_sha256", "weights_sha256")
        if manifest.get("format") != _FORMAT or any(k not in manifest for k in keys):
            return None
        return manifest
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def verify_entry(entry: Path, *, full: bool = False) -> bool:
    """Whether a cache entry's weights file matches its manifest (see the module docstring).

    ``full=True`` always hashes the whole file (slower than the sampled check; benchmarks/bench_load.py).
    """
    manifest = _manifest(entry)
    if manifest is None:
        return False
    weights = entry / _WEIGHTS
    try:
        stat = weights.stat()
        if stat.st_size != manifest["weights_size"] or _header_sha256(weights) != manifest["weights_header_sha256"]:
            return False
        if not full and stat.st_mtime_ns == manifest["weights_mtime_ns"]:
            return _sample_sha256(weights) == manifest["weights_sample_sha256"]
        if file_sha256(weights) != manifest["weights_sha256"]:
            return False
    except (OSError, ValueError):
        return False
    if stat.st_mtime_ns != manifest["weights_mtime_ns"]:  # copied/touched but intact: remember
        _rewrite_manifest(entry, dict(manifest, weights_mtime_ns=stat.st_mtime_ns))
    return True


def _rewrite_manifest(entry: Path, manifest: dict[str, Any]) -> None:
    """Atomically replace the manifest (best effort: a read-only cache just stays on the slow path)."""
    try:
        atomic_write(entry / _MANIFEST, lambda tmp: Path(tmp).write_text(json.dumps(manifest, indent=1)))
    except OSError as e:
        log.debug("could not update the manifest of %s: %s", entry, e)


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


def _write_entry(source: GGUFSource, entry: Path) -> None:
    """Dequantize the source's GGUF into a temporary folder beside ``entry``, then rename it into place.

    Readers never see a half-written entry: the folder only gets its final name once the
    weights, tokenizer and manifest (with the weights' size and sha256) are complete.
    """
    try:
        with source.provide(entry.parent) as gguf:
            model, tokenizer = _read_gguf(gguf, torch.float32)  # ModelLoadError for a bad file
    except OSError as e:
        raise ModelLoadError(
            f"the GGUF {source.stem}.gguf could not be written into cache_dir={str(entry.parent.parent)!r} "
            f"({type(e).__name__}: {e}); free some space, or pass another cache_dir / set INTERP_CACHE"
        ) from e
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError as e:
        raise ModelLoadError(
            f"cache_dir={str(entry.parent.parent)!r} is not writable ({e}); pass another cache_dir "
            "or set INTERP_CACHE to a writable folder"
        ) from e
    try:
        with load_step("write the cache entry (safetensors, tokenizer)"):
            _save_dequantized(model, tmp)
            tokenizer.save_pretrained(tmp)
        del model
        try:
            with load_step("hash the cache entry (sha256)"):
                fingerprint = _fingerprint(tmp / _WEIGHTS)  # the rename below keeps the file's mtime
        except ValueError as e:
            raise ModelLoadError(
                f"the weights just written for cache entry {str(entry)!r} are not valid safetensors "
                f"({e}); the disk or cache_dir may be faulty: pass another cache_dir or set INTERP_CACHE"
            ) from e
        manifest = {
            "format": _FORMAT,
            "gguf": f"{source.stem}.gguf",
            "gguf_size": source.size,
            "gguf_sha256": source.sha256,
            **fingerprint,
        }
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1))
        if entry.exists():
            shutil.rmtree(entry)
        try:
            os.replace(tmp, entry)
        except OSError:
            if not verify_entry(entry):  # not another process finishing the same entry first
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


def _load_entry(entry: Path, dtype: torch.dtype, *, bos: bool = False) -> tuple[Any, Any]:
    """The entry's HF model and tokenizer. ``bos``: the tokenizer made to prepend its BOS token where it has one
    (``add_bos_token=True``), as transformer-lens's bridge wants it — given one that does not, the bridge loads the
    tokenizer a second time with that option (a tenth of a cached load)."""
    import transformers

    model = from_pretrained_complete(
        transformers.AutoModelForCausalLM, str(entry), dtype=dtype, attn_implementation="eager"
    )
    tokenizer, config = None, entry / "tokenizer_config.json"
    if bos and config.is_file() and json.loads(config.read_text()).get("bos_token") is not None:
        with contextlib.suppress(ValueError):  # a BOS the post-processor cannot express: as the bridge, keep it off
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(entry), add_bos_token=True)
    if tokenizer is None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(entry))
    return model, tokenizer


def load_entry_for_bridge(entry: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    """:func:`_load_entry` with the tokenizer the bridge keeps (``bos=True``): what :func:`interp.load_model` loads."""
    return _load_entry(entry, dtype, bos=True)


def load_gguf_cached(
    gguf: Path,
    cache_dir: Path,
    dtype: torch.dtype,
    loader: Optional[Callable[[Path, torch.dtype], tuple[Any, Any]]] = None,
    *,
    sha256: Optional[str] = None,
) -> tuple[Any, Any, Path]:
    """The HF model and tokenizer of the GGUF file ``gguf``, through the safetensors cache.

    Keyed by the file's size and sha256 (:func:`gguf_file_source`; ``sha256`` where its package states it); see
    :func:`load_gguf_source_cached`.
    """
    return load_gguf_source_cached(gguf_file_source(gguf, sha256=sha256), cache_dir, dtype, loader)


def load_gguf_source_cached(
    source: GGUFSource,
    cache_dir: Path,
    dtype: torch.dtype,
    loader: Optional[Callable[[Path, torch.dtype], tuple[Any, Any]]] = None,
) -> tuple[Any, Any, Path]:
    """The HF model and tokenizer of a GGUF, through the safetensors cache; returns the entry path.
    ``loader(entry, dtype)`` loads the entry (default: in memory; :func:`interp.load_model` passes
    one that places it with accelerate).

    1. Key the entry ``<stem>-<size>-<sha256[:16]>`` by the source's identity.
    2. Verify the entry (module docstring); if it is missing or fails, get the GGUF from the
       source and dequantize it into a fresh entry (the only time the GGUF is read).
    3. Load the entry. If that fails and the entry was not just rebuilt, rebuild it once and
       retry; a second failure is a :class:`ModelLoadError`.

    The loaded config names the model class in ``architectures`` (a GGUF's config has none).
    """
    entry = Path(cache_dir) / f"{source.stem}-{source.size}-{source.sha256[:16]}"
    rebuilt = False
    with load_step("verify the cache entry"):
        ok = verify_entry(entry)
    if not ok:
        cold_load()
        if entry.exists():
            log.warning(
                "cache entry %s failed verification (corrupt, incomplete or an older format); rebuilding it", entry
            )
        else:
            log.info("dequantizing %s.gguf into the cache (first load only)", source.stem)
        _write_entry(source, entry)
        rebuilt = True
    try:
        with load_step("load the Hugging Face model"):
            model, tokenizer = (loader or _load_entry)(entry, dtype)
        return model, tokenizer, entry
    except (ArgumentError, MemoryCapError):  # the loader refused its arguments: the entry is not at fault
        raise
    except Exception as e:
        if rebuilt:
            raise _unloadable(entry, source, e) from e
        log.warning("cache entry %s could not be loaded (%s); rebuilding it", entry, e)
    _write_entry(source, entry)
    try:
        with load_step("load the Hugging Face model"):
            model, tokenizer = (loader or _load_entry)(entry, dtype)
    except Exception as e:
        raise _unloadable(entry, source, e) from e
    return model, tokenizer, entry


def _unloadable(entry: Path, source: GGUFSource, e: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"cache entry {str(entry)!r} for {source.stem}.gguf could not be loaded even after a rebuild "
        f"({type(e).__name__}: {e}); delete it or pass another cache_dir"
    )
