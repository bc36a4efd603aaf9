"""What every dictionary reader shares: the read points' hook names, a safetensors file's tensors and metadata, a
config file, a hook's layer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from interp.errors import ArgumentError, ResultFormatError, UnsupportedOperationError
from interp.dictionaries._transcoder import Transcoder

__all__ = [
    "_DL_SITE",
    "_LAYER",
    "_MLP_IN",
    "_MLP_OUT",
    "_RESID",
    "_SAELENS_SAE",
    "_SAELENS_TC",
    "_SPARSIFY_RESID",
    "_cfg",
    "_hook_layer",
    "_make",
    "_need",
    "_reads",
    "_tensors",
    "_yaml",
]

_LAYER = re.compile(r"(?:^|\.)(?:blocks|layers|h|layer)\.(\d+)(?:\.|$)")
_MLP_IN = ("ln2.hook_normalized", "hook_mlp_in", "mlp.hook_in")
_MLP_OUT = ("hook_mlp_out", "mlp.hook_out")
_SAELENS_TC = {
    "transcoder": "relu",
    "skip_transcoder": "relu",
    "jumprelu_transcoder": "jumprelu",
    "jumprelu_skip_transcoder": "jumprelu",
}
_SAELENS_SAE = {"standard": "relu", "topk": "topk", "jumprelu": "jumprelu", "batchtopk": "batchtopk"}
_RESID = re.compile(r"blocks\.(\d+)\.hook_resid_(pre|mid|post)")
_DL_SITE = re.compile(r"resid_(pre|mid|post)_layer_(\d+)")  # dictionary_learning's submodule_name
_SPARSIFY_RESID = re.compile(r"(?:.*\.)?(?:layers|h|blocks)\.(\d+)")  # a decoder layer's output: resid_post


def _tensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    from safetensors import safe_open

    if not path.is_file():
        raise ResultFormatError(f"path={str(path)!r}: the transcoder file does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except Exception as e:  # safetensors raises its own error types on bad headers
        raise ResultFormatError(f"path={str(path)!r} is not a readable safetensors file ({e})") from e


def _need(path: Path, t: dict[str, Tensor], keys: tuple[str, ...]) -> None:
    for k in keys:
        if k not in t:
            raise ResultFormatError(
                f"path={str(path)!r} has no key {k!r} (it holds {sorted(t)}); this format needs {list(keys)}"
            )


def _make(path: Path, dtype: torch.dtype, cls: Any = Transcoder, **kw: Any) -> Any:
    kw = {k: (v.to(dtype) if isinstance(v, Tensor) else v) for k, v in kw.items()}
    try:
        return cls(**kw)
    except ArgumentError as e:
        raise ResultFormatError(f"path={str(path)!r}: {e}") from None


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        conf = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ResultFormatError(f"path={str(path)!r} is not readable YAML ({e})") from None
    if not isinstance(conf, dict):
        raise ResultFormatError(f"path={str(path)!r} holds {type(conf).__name__}, not a mapping")
    return conf


def _reads(hook: Any, allowed: tuple[str, ...]) -> bool:
    """``hook`` names one of ``allowed`` (itself, or ``<prefix>.<allowed>``)."""
    return isinstance(hook, str) and any(hook == a or hook.endswith("." + a) for a in allowed)


def _hook_layer(path: Path, hook: Any, allowed: tuple[str, ...], what: str) -> int:
    if not isinstance(hook, str) or not (m := _LAYER.search(hook)):
        raise ResultFormatError(f"path={str(path)!r}: {what} hook {hook!r} names no layer (blocks.{{l}}.…)")
    if not any(hook.endswith(a) for a in allowed):
        raise UnsupportedOperationError(
            f"path={str(path)!r} reads or writes hook {hook!r}; a transcoder's {what} must be one of "
            f"{['blocks.{l}.' + a for a in allowed]}"
            + (
                ""
                if what == "output"
                else " (a dictionary on the residual stream is an SAE, not a "
                "transcoder: attribution graphs need transcoders)"
            )
        )
    return int(m.group(1))


def _cfg(d: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((d / "cfg.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ResultFormatError(f"path={str(d / 'cfg.json')!r} is not readable JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ResultFormatError(f"path={str(d / 'cfg.json')!r} holds {type(cfg).__name__}, not a JSON object")
    return cfg
