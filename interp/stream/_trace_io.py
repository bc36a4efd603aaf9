"""Saving and loading a ResidualTrace: one ``.safetensors`` file, tensors plus JSON, no pickle.

A trace is its token ids, attention mask, captured activations (or, for a projection-mode trace,
the decompositions it computed) and the weights a decomposition reads. The file keeps exactly
those weights — W_O, b_O, b_out, W_out (neuron layers only) and every norm's γ and β — not the
embeddings, unembedding or q/k/v/MLP-input weights, so a loaded trace decomposes every read and
resid point as the original did (to float rounding: the stored tensors are bit for bit the same, the
summation order of a matmul depends on the kernel), while its ``weights`` hold None in the other fields.

Layout: tensors ``tokens``, ``attention_mask``, ``logits``, ``project_onto``, ``act/<hook name>``,
``w/<weight name>``, ``proj/<i>/<field>``; header metadata ``format`` = "interp-trace-v1" and
``fields`` (JSON: the architecture, str_tokens, neuron layers, kept hooks, projected reads' labels).
Writes are atomic (temporary file + rename); a foreign or truncated file raises
:class:`~interp.errors.ResultFormatError`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Union

import torch

from interp._io import read_safetensors, write_safetensors
from interp.errors import ExportError, ResultFormatError
from interp.models import ArchInfo, Weights
from interp.stream._decomposition import Decomposition

__all__ = ["save_trace", "load_trace", "DECOMPOSE_WEIGHTS"]

_FORMAT = "interp-trace-v1"
#: the Weights fields a decomposition reads (W_out only for neuron layers)
DECOMPOSE_WEIGHTS = (
    "W_O",
    "b_O",
    "b_out",
    "W_out",
    "ln1_w",
    "ln1_b",
    "ln2_w",
    "ln2_b",
    "lnf_w",
    "lnf_b",
    "ln_emb_w",
    "ln_emb_b",
    "ln1_post_w",
    "ln2_post_w",
)  # the last two: sandwich norms' output gains


def _put(tensors: dict[str, torch.Tensor], key: str, t: torch.Tensor, seen: set) -> None:
    t = t.detach().cpu().contiguous()
    ptr = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else None
    if ptr is not None and ptr in seen:  # safetensors refuses tensors that share memory
        t = t.clone()
    elif ptr is not None:
        seen.add(ptr)
    tensors[key] = t


def save_trace(tr: Any, path: Union[str, os.PathLike]) -> Path:
    """Write ``tr`` to ``path`` (a ``.safetensors`` file; see the module docstring)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ExportError(f"path={path!r} must be a str or os.PathLike ending in .safetensors")
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ExportError(f"path={str(path)!r} must end in .safetensors")
    if not path.parent.is_dir():
        raise ExportError(f"path={str(path)!r}: directory {str(path.parent)!r} does not exist")
    tensors: dict[str, torch.Tensor] = {}
    seen: set = set()
    _put(tensors, "tokens", tr.tokens, seen)
    _put(tensors, "attention_mask", tr.attention_mask, seen)
    for name in ("logits", "project_onto"):
        v = getattr(tr, name)
        if v is not None:
            _put(tensors, name, torch.as_tensor(v), seen)
    for hook, act in tr.activations.items():
        _put(tensors, f"act/{hook}", act, seen)
    saved = []
    for name in DECOMPOSE_WEIGHTS:
        v = getattr(tr.weights, name)
        if v is None or (name == "W_out" and not tr.neuron_layers):
            continue
        _put(tensors, f"w/{name}", v, seen)
        saved.append(name)
    projected = None
    if tr.projected is not None:
        projected = []
        for i, (read, dec) in enumerate(tr.projected.items()):
            meta = {}
            for f in dataclasses.fields(dec):
                v = getattr(dec, f.name)
                if isinstance(v, torch.Tensor):
                    _put(tensors, f"proj/{i}/{f.name}", v, seen)
                else:
                    meta[f.name] = v
            projected.append({"read": read, "fields": meta})
    fields = {
        "arch": tr.arch.to_dict(),
        "str_tokens": tr.str_tokens,
        "neuron_layers": list(tr.neuron_layers),
        "has_types": tr.has_types,
        "kept": tr.kept,
        "weights": saved,
        "projected": projected,
    }
    try:
        header = json.dumps(fields)
    except TypeError as e:
        raise ExportError(f"this ResidualTrace has a field that cannot be saved as JSON: {e}") from e
    write_safetensors(path, tensors, {"format": _FORMAT, "class": "ResidualTrace", "fields": header})
    return path


def load_trace(cls: type, path: Union[str, os.PathLike]) -> Any:
    """Read a trace written by :func:`save_trace`."""
    path, meta, tensors = read_safetensors(path, what="interp trace")
    if meta.get("format") != _FORMAT:
        raise ResultFormatError(
            f"path={str(path)!r} holds {meta.get('class', 'no interp trace')!r}, not a "
            "ResidualTrace (saved with ResidualTrace.save)"
        )
    try:
        fields = json.loads(meta["fields"])
        arch_fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields["arch"].items()}
        arch = ArchInfo(**arch_fields)
        # only what decompose reads is saved
        blank: dict[str, Any] = {f.name: None for f in dataclasses.fields(Weights)}
        weights = Weights(**blank).with_updates(**{name: tensors[f"w/{name}"] for name in fields["weights"]})
        projected = None
        if fields["projected"] is not None:
            projected = {}
            for i, p in enumerate(fields["projected"]):
                own = {k.split("/", 2)[2]: v for k, v in tensors.items() if k.startswith(f"proj/{i}/")}
                projected[p["read"]] = Decomposition(**p["fields"], **own)
        return cls(
            arch=arch,
            tokens=tensors["tokens"],
            attention_mask=tensors["attention_mask"],
            str_tokens=fields["str_tokens"],
            activations={k[4:]: v for k, v in tensors.items() if k.startswith("act/")},
            weights=weights,
            neuron_layers=tuple(fields["neuron_layers"]),
            project_onto=tensors.get("project_onto"),
            logits=tensors.get("logits"),
            projected=projected,
            has_types=fields["has_types"],
            kept=fields["kept"],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ResultFormatError(
            f"path={str(path)!r} has a damaged ResidualTrace header or lacks a tensor ({e!r})"
        ) from None
