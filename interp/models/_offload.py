"""Models larger than memory: accelerate's placement (``device_map`` / ``max_memory`` / disk offload), and
weights read one layer at a time from wherever it put them.

accelerate places each block on an accelerator, the CPU or "disk" (transformers 5 reads a disk-offloaded
block straight from the checkpoint's safetensors shards). interp never holds the whole model: a block's big
matrices (``W_Q W_K W_V W_O W_in W_gate W_out``) are a :class:`LayerStack`, whose ``stack[l]`` brings block
l's parameters in (accelerate's ``align_module_device`` on each of its modules), converts them to TL layout
with the family's own reader (:func:`interp.models._families.weights_from_hf` narrowed to that layer) and
keeps only the last few layers read. The small per-layer tensors (biases, norm gains) and the embedding /
unembedding are read once at load. A sweep that walks the layers in order therefore reads each block
once per pass, and peak memory is what accelerate keeps resident plus a few blocks.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections import ChainMap, OrderedDict
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from interp.errors import ArgumentError, MemoryCapError, ModelLoadError, UnsupportedOperationError
from interp.models._arch import ArchInfo
from interp.models._families import weights_from_hf
from interp.models._weights import Weights, only_layers

__all__ = [
    "LayerStack",
    "Placement",
    "block_devices",
    "check_budget",
    "check_placement",
    "is_streamed",
    "per_layer",
    "streamed_weights",
]

#: The per-layer weights streamed (everything else is small and read once).
BIG = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_gate", "W_out")
_DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


class LayerStack:
    """A ``[n_layers, ...]`` weight read one layer at a time: ``stack[l]`` / ``stack[l, i, ...]`` call ``read(l)``
    (the last ``keep`` layers are kept). ``shape``, ``dtype``, ``device``, ``len`` and ``to`` work; any
    operation over every layer at once is refused with :class:`UnsupportedOperationError`."""

    def __init__(
        self,
        n: int,
        read: Callable[[int], Tensor],
        layer_shape: Sequence[int],
        dtype: torch.dtype,
        device: torch.device,
        *,
        keep: int = 2,
        name: str = "weights",
    ):
        self._n, self._read, self._keep, self._name = n, read, keep, name
        self.shape = torch.Size((n, *layer_shape))
        self.dtype, self.device = dtype, torch.device(device)
        self._cache: OrderedDict[int, Tensor] = OrderedDict()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self._n

    def _layer(self, l: Any) -> Tensor:
        if isinstance(l, Tensor) and l.numel() == 1:
            l = int(l)
        if not isinstance(l, int):
            self._refuse(f"indexing by {type(l).__name__}")
        l = l + self._n if l < 0 else l
        if not 0 <= l < self._n:
            raise IndexError(f"layer {l} of {self._n}")
        if l in self._cache:
            self._cache.move_to_end(l)
            return self._cache[l]
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors wherever it is first read (see ordinary)
            t = self._read(l)
        self._cache[l] = t
        while len(self._cache) > self._keep:
            self._cache.popitem(last=False)
        return t

    def __getitem__(self, idx: Any) -> Tensor:
        if isinstance(idx, tuple):
            return self._layer(idx[0])[idx[1:]] if len(idx) > 1 else self._layer(idx[0])
        return self._layer(idx)

    def to(self, device: Any = None, dtype: Any = None) -> "LayerStack":
        """The same stack with each layer moved/cast as it is read."""
        return LayerStack(
            self._n,
            lambda l: self[l].to(device=device, dtype=dtype),
            self.shape[1:],
            dtype or self.dtype,
            torch.device(device) if device is not None else self.device,
            keep=self._keep,
            name=self._name,
        )

    def _refuse(self, what: str) -> Any:
        raise UnsupportedOperationError(
            f"{self._name} {tuple(self.shape)} are streamed one layer at a time (the model was loaded with "
            f"device_map/max_memory/offload); {what} would need every layer at once. Analyses that walk the "
            "layers (attribution, patching, edge attribution) work; for weight-only maths over all layers load "
            "the model without device_map"
        )

    def _arithmetic(self, other: Any) -> Any:
        return self._refuse("arithmetic over the whole stack")

    # Python looks operators up on the type, not through __getattr__: without these, ``W * g`` raised a raw TypeError
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arithmetic
    __matmul__ = __rmatmul__ = __truediv__ = __rtruediv__ = _arithmetic

    def __neg__(self) -> Any:
        return self._refuse("arithmetic over the whole stack")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # private / protocol lookups (copy, pickle, hasattr probes) are plain misses
            raise AttributeError(name)
        return self._refuse(f".{name}")

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        flat = [x for a in [*args, *(kwargs or {}).values()] for x in (a if isinstance(a, (list, tuple)) else [a])]
        stack = next(a for a in flat if isinstance(a, LayerStack))
        return stack._refuse(f"torch.{getattr(func, '__name__', func)}")

    def __repr__(self) -> str:
        return f"LayerStack({self._name}, shape={tuple(self.shape)}, dtype={self.dtype}, streamed)"


def is_streamed(w: Weights) -> bool:
    """Whether ``w`` reads its blocks one layer at a time (a model loaded with ``device_map``)."""
    return isinstance(w.W_Q, LayerStack)


def per_layer(fn: Callable[..., Tensor], *stacks: Any) -> Any:
    """``fn`` over ``[n_layers, ...]`` stacks: applied once to the stacked tensors, or — when any is a
    :class:`LayerStack` — a LayerStack applying it to each layer's slices as that layer is read (``fn``
    must then treat the leading axis as optional, i.e. index dims from the end)."""
    streamed = [s for s in stacks if isinstance(s, LayerStack)]
    if not streamed:
        return fn(*stacks)
    first = streamed[0]
    meta = fn(*(torch.empty(s.shape[1:], dtype=s.dtype, device="meta") for s in stacks))
    return LayerStack(
        len(first), lambda l: fn(*(s[l] for s in stacks)), meta.shape, meta.dtype, first.device, name="fused weights"
    )


# ---------------------------------------------------------------- reading the blocks where accelerate put them


def _blocks(hf_model: torch.nn.Module, n_layers: int) -> tuple[torch.nn.ModuleList, str]:
    """The model's ModuleList of ``n_layers`` blocks and its state-dict prefix (e.g. ``model.layers.``)."""
    for name, m in hf_model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers:
            return m, f"{name}."
    raise ModelLoadError(f"found no list of {n_layers} blocks in {type(hf_model).__name__}")


class _StateView(torch.nn.Module):
    """What :func:`weights_from_hf` reads of a model: its state dict (here a given mapping) and modules."""

    def __init__(self, hf_model: torch.nn.Module, sd: Mapping[str, Tensor]):
        super().__init__()
        self._sd, self._hf = sd, [hf_model]

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return dict(self._sd)

    def modules(self) -> Any:  # type: ignore[override]
        return self._hf[0].modules()


def _owners(module: torch.nn.Module, prefix: str) -> list[tuple[str, torch.nn.Module, str]]:
    """(state-dict key, owning module, attribute) of every parameter and buffer under ``module``: recorded before
    the bridge re-parents the modules, so a block's tensors are found (and aligned) by their owners."""
    out = []
    for mname, m in module.named_modules():
        for pname, _ in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
            out.append((f"{prefix}{mname + '.' if mname else ''}{pname}", m, pname))
    return out


class _BlockReader:
    """Block l's weights in TL layout (every per-layer field), read through accelerate's hooks."""

    def __init__(self, hf_model: torch.nn.Module, arch: ArchInfo, device: torch.device, keep: int = 2):
        self.hf, self.arch, self.device, self.keep = hf_model, arch, device, keep
        blocks, prefix = _blocks(hf_model, arch.n_layers)
        self.prefix = prefix
        self.block_owners = [_owners(b, f"{prefix}{l}.") for l, b in enumerate(blocks)]
        inside = {id(t) for b in blocks for t in [*b.parameters(), *b.buffers()]}
        self.global_owners = [
            (k, m, a)
            for k, m, a in _owners(hf_model, "")
            if not k.startswith(prefix) and id(getattr(m, a)) not in inside
        ]
        self.meta = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in hf_model.state_dict().items()}
        self._cache: OrderedDict[int, dict[str, Tensor]] = OrderedDict()

    def read(self, l: int, *, with_globals: bool = False) -> Weights:
        """A one-layer :class:`Weights` of block l (the globals real only ``with_globals``, else meta)."""
        from accelerate.utils import align_module_device  # type: ignore[import-untyped]

        owners = self.block_owners[l] + (self.global_owners if with_globals else [])
        with contextlib.ExitStack() as stack, torch.no_grad():
            seen: set[int] = set()
            for _, m, _ in owners:  # brings each offloaded module's tensors in (a no-op for resident ones)
                if id(m) not in seen:
                    seen.add(id(m))
                    stack.enter_context(align_module_device(m))
            real = {k: getattr(m, a) for k, m, a in owners}
            with only_layers(l):
                return weights_from_hf(_StateView(self.hf, ChainMap(real, self.meta)), self.arch)

    def layer(self, l: int) -> dict[str, Tensor]:
        if l in self._cache:
            self._cache.move_to_end(l)
            return self._cache[l]
        w = self.read(l)
        d = {
            f.name: ordinary(getattr(w, f.name)[0].to(self.device))
            for f in fields(w)
            if f.name in BIG and getattr(w, f.name) is not None
        }
        self._cache[l] = d
        while len(self._cache) > self.keep:
            self._cache.popitem(last=False)
        return d


def streamed_weights(hf_model: torch.nn.Module, arch: ArchInfo) -> Weights:
    """The :class:`Weights` of a model placed by accelerate: the big per-layer matrices as :class:`LayerStack`
    (read on demand, block by block), everything else read once (each block is read once here for it)."""
    release_freed_memory()
    device = execution_device(hf_model)
    reader = _BlockReader(hf_model, arch, device)
    small: dict[str, list[Tensor]] = {}
    glob: dict[str, Any] = {}
    shapes: dict[str, tuple[torch.Size, torch.dtype]] = {}
    for l in range(arch.n_layers):
        w = reader.read(l, with_globals=l == 0)
        for f in fields(w):
            v = getattr(w, f.name)
            if v is None:
                continue
            if f.name in _GLOBALS:
                if l == 0:
                    glob[f.name] = ordinary(v.to(device))
                    if f.name == "W_U":
                        _share_embedding(glob, reader)
            elif f.name in BIG:
                shapes.setdefault(f.name, (v.shape[1:], v.dtype))
            else:
                small.setdefault(f.name, []).append(ordinary(v[0].to(device)))
    out: dict[str, Any] = {k: torch.stack(v) for k, v in small.items()}
    for name, (shape, dtype) in shapes.items():
        out[name] = LayerStack(arch.n_layers, functools.partial(_field, reader, name), shape, dtype, device, name=name)
    for f in fields(Weights):
        out[f.name] = glob.get(f.name) if f.name in _GLOBALS else out.get(f.name)
    meta = [k for k, v in glob.items() if v is not None and v.device.type == "meta"]
    if meta:
        raise ModelLoadError(f"weights {meta} could not be read from where accelerate placed them")
    release_freed_memory()
    return Weights(**out)


def ordinary(t: Tensor) -> Tensor:
    """``t`` as an ordinary tensor outside autograd's graph, as an in-memory model's weights are. accelerate reads
    disk-offloaded weights back under ``torch.inference_mode()``, and a resident block's tensor is the module's own
    ``Parameter`` (``requires_grad=True``): an activation captured under inference mode meeting either in a
    default-grad-mode product raises ("Inference tensors cannot be saved for backward"). An inference tensor is
    cloned outside inference mode (same values); any other is detached (no copy)."""
    if not t.is_inference():
        return t.detach()
    with torch.inference_mode(False):
        return t.clone()


def _field(reader: "_BlockReader", name: str, l: int) -> Tensor:
    return reader.layer(l)[name]


def _share_embedding(glob: dict[str, Any], reader: "_BlockReader") -> None:
    """No second copy of the (often largest) embedding: W_E is the module's own tensor when it is resident
    and equal, and W_U a transposed view of W_E when the unembedding is tied (equal values)."""
    W_E = glob.get("W_E")
    if W_E is None:
        return
    for _, m, a in reader.global_owners:
        t = getattr(m, a)
        if t.device == W_E.device and t.shape == W_E.shape and t.dtype == W_E.dtype and torch.equal(t, W_E):
            glob["W_E"] = W_E = t.detach()
            break
    W_U = glob.get("W_U")
    if W_U is not None and W_U.shape == W_E.T.shape and torch.equal(W_U, W_E.T):
        glob["W_U"] = W_E.T


def release_freed_memory() -> None:
    """Ask glibc to hand freed blocks back to the OS and to serve large buffers (a streamed layer) from mmap,
    so that the resident size follows what is live (no-op off glibc)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: buffers ≥ 1 MiB are mmapped, unmapped when freed
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


#: Fields that are not per layer.
_GLOBALS = ("W_E", "W_pos", "W_type", "lnf_w", "lnf_b", "W_U", "b_U", "ln_emb_w", "ln_emb_b")


def block_devices(hf_model: torch.nn.Module, n_layers: int) -> tuple[str, ...]:
    """Where accelerate placed each block ("cpu", "disk", "cuda:N"): the device-map entry naming the block or the
    nearest module above it; () for a model it did not place."""
    dev_map = getattr(hf_model, "hf_device_map", None) or {}
    if not dev_map:
        return ()
    _, prefix = _blocks(hf_model, n_layers)

    def where(path: str) -> str:
        owner = max((k for k in dev_map if k == "" or path == k or path.startswith(f"{k}.")), key=len, default=None)
        v = "cpu" if owner is None else dev_map[owner]
        return f"cuda:{v}" if isinstance(v, int) else str(v)

    return tuple(where(f"{prefix}{l}") for l in range(n_layers))


def execution_device(hf_model: torch.nn.Module) -> torch.device:
    """Where the first block computes (the engine runs there; its inputs are moved there)."""
    dev_map = getattr(hf_model, "hf_device_map", None) or {}
    for v in dev_map.values():
        if v not in ("disk", "cpu"):
            return torch.device(v if isinstance(v, str) else f"cuda:{v}")
    return torch.device("cpu")


# ---------------------------------------------------------------- the load-time arguments, checked first


class Placement:
    """``device_map`` / ``max_memory`` / ``offload_folder`` as accepted by :func:`check_placement`."""

    def __init__(self, device_map: Any, max_memory: Optional[dict[Any, int]], offload_folder: Optional[str]):
        self.device_map, self.max_memory, self.offload_folder = device_map, max_memory, offload_folder

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device_map": self.device_map}
        if self.max_memory is not None:
            out["max_memory"] = self.max_memory
        if self.offload_folder is not None:
            out["offload_folder"] = self.offload_folder
        return out


def _check_map_device(key: str, value: Any) -> None:
    # a GPU index is a Python int (accelerate takes the map as given: not a bool, not a numpy int)
    ok = value in ("cpu", "disk") or type(value) is int and value >= 0
    if isinstance(value, (str, torch.device)) and not ok:
        try:
            ok = torch.device(value).type in ("cuda", "mps", "xpu", "cpu")
        except (RuntimeError, TypeError):
            ok = False
    if not ok:
        raise ArgumentError(
            f"device_map[{key!r}]={value!r} is not a device; use 'cpu', 'disk', a GPU index (0, 1, ...) or 'cuda:N'"
        )
    dev = torch.device(f"cuda:{value}") if type(value) is int else None
    if isinstance(value, str) and value not in ("cpu", "disk"):
        dev = torch.device(value)
    if (
        dev is not None
        and dev.type == "cuda"
        and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count())
    ):
        raise ArgumentError(
            f"device_map[{key!r}]={value!r} cannot be honoured: "
            f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} CUDA devices here"
        )


def check_placement(device_map: Any, max_memory: Any, offload_folder: Any) -> Optional[Placement]:
    """Validate the placement arguments of :func:`interp.load_model` (None when none is given)."""
    if device_map is None:
        for arg, v in (("max_memory", max_memory), ("offload_folder", offload_folder)):
            if v is not None:
                raise ArgumentError(
                    f"{arg}={v!r} needs device_map (e.g. device_map='auto'): accelerate places "
                    "the blocks within max_memory only when it is asked to place them"
                )
        return None
    if isinstance(device_map, str):
        if device_map not in _DEVICE_MAPS:
            raise ArgumentError(
                f"device_map={device_map!r} is not one of {list(_DEVICE_MAPS)} or a dict {{module name: device}}"
            )
    elif isinstance(device_map, dict):
        if not device_map:
            raise ArgumentError("device_map={} places nothing; give {module name: device} for every block, or 'auto'")
        for k, v in device_map.items():
            if not isinstance(k, str):
                raise ArgumentError(f"device_map key {k!r} must be a module name (a string, '' for the whole model)")
            _check_map_device(k, v)
    else:
        raise ArgumentError(
            f"device_map={device_map!r} must be 'auto', 'balanced', 'balanced_low_0', "
            "'sequential' or a dict {module name: device}"
        )
    budget: Optional[dict[Any, int]] = None
    if max_memory is not None:
        if not isinstance(max_memory, dict) or not max_memory:
            raise ArgumentError(f"max_memory={max_memory!r} must be a dict {{device: size}}, e.g. {{'cpu': '2GB'}}")
        from accelerate.utils import convert_file_size_to_int

        budget = {}
        for k, v in max_memory.items():
            if k != "disk":
                _check_map_device(str(k), k)
            try:
                size = int(convert_file_size_to_int(v))
            except (ValueError, TypeError) as e:
                raise ArgumentError(
                    f"max_memory[{k!r}]={v!r} is not a size; use bytes (int) or a string like '200MB', '2GiB'"
                ) from e
            if size < 0:
                raise ArgumentError(f"max_memory[{k!r}]={v!r} is negative")
            budget[k] = size
    folder: Optional[str] = None
    if offload_folder is not None:
        if not isinstance(offload_folder, (str, os.PathLike)):
            raise ArgumentError(f"offload_folder={offload_folder!r} must be a folder path")
        p = Path(offload_folder).expanduser()
        if p.exists() and not p.is_dir():
            raise ArgumentError(f"offload_folder={str(offload_folder)!r} exists and is not a folder")
        folder = str(p)
    return Placement(device_map, budget, folder)


def _size(n: int) -> str:
    """A byte count as MiB (KiB below one MiB, so a small block does not read "0 MiB")."""
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{math.ceil(n / 2**10)} KiB"


def check_budget(
    placement: Placement, source: Union[str, Path], config: Any, dtype: torch.dtype, model_class: Any
) -> None:
    """Refuse a ``max_memory`` whose every device is smaller than one block (nothing could run), and a source
    with no safetensors files to offload from; both before any weight is read."""
    src = Path(source)
    if src.is_dir() and not any(src.glob("*.safetensors")):
        raise ModelLoadError(
            f"{str(source)!r} has no *.safetensors files: accelerate offloads a model by reading its blocks from "
            "the checkpoint's safetensors shards. Save it once with "
            "model.save_pretrained(folder, safe_serialization=True) (or load it in memory, without device_map)"
        )
    if placement.max_memory is None:
        return
    from accelerate import init_empty_weights  # type: ignore[import-untyped]
    from accelerate.utils import compute_module_sizes

    with init_empty_weights():  # an Auto class builds from a config; a model class (BERT's) is called with it
        make = getattr(model_class, "from_config", None)
        empty = make(config, dtype=dtype) if make is not None else model_class(config)
    blocks, prefix = _blocks(empty, config.num_hidden_layers)
    sizes = compute_module_sizes(empty, dtype=dtype)
    block = max(int(sizes[f"{prefix}{i}"]) for i in range(len(blocks)))
    room = {k: v for k, v in placement.max_memory.items() if k != "disk"}
    if room and max(room.values()) < block:
        raise MemoryCapError(
            f"max_memory={ {k: v for k, v in placement.max_memory.items()} } (bytes): no device can hold even one "
            f"block of this model ({_size(block)} in {str(dtype).replace('torch.', '')}), which it must "
            f"to run it; allow at least {_size(block)} on one device (more is faster)"
        )
