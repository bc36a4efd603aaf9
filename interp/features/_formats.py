"""Reading published dictionary formats into per-layer :class:`Transcoder` s.

Formats read (each tested on files written by that library's own save function):

* **circuit-tracer** (and interp's own cache): ``layer_{i}.safetensors`` with ``W_enc`` [F, d], ``W_dec`` [F, d],
  ``b_enc``, ``b_dec``, optional ``activation_function.threshold`` (JumpReLU) and ``W_skip``; optionally a
  ``config.yaml`` (``model_kind: transcoder_set``) listing the files under ``transcoders:``. A file whose
  safetensors metadata holds ``k`` (interp's trained transcoders) is TopK. Gemma Scope 2's keys (``w_enc``
  [d, F], ``w_dec``, ``threshold``, ``affine_skip_connection`` [d_in, d_out]) are read too.
* **SAELens** (its ``save_model``; Gemma Scope 2 as SAELens loads it): a folder with ``cfg.json`` and
  ``sae_weights.safetensors`` (``W_enc`` [d, F], ``W_dec`` [F, d], ``b_enc``, ``b_dec``, ``threshold``,
  ``W_skip`` [d_out, d_in]) — one such folder, or a folder of them, one per layer. ``architecture``
  "transcoder" (ReLU), "skip_transcoder", "jumprelu_transcoder", "jumprelu_skip_transcoder"; the layer is read
  from ``metadata.hook_name`` (``blocks.{l}.…``), which must be the MLP's input and ``hook_name_out`` its output.
* **sparsify** (EleutherAI; its ``save_to_disk``): a checkpoint folder with one sub-folder per hookpoint
  (``layers.{l}.mlp``), each with ``cfg.json`` and ``sae.safetensors`` (``encoder.weight`` [F, d],
  ``encoder.bias``, ``W_dec``, ``b_dec``, ``W_skip``): TopK (ReLU then the k largest) with ``transcode: true``.

A residual-stream SAE (SAELens ``standard`` / ``topk`` / ``jumprelu`` on ``hook_resid_*``, a sparsify coder
without ``transcode``) reconstructs its input, not an MLP's output: it is not a transcoder, and is refused
with :class:`interp.errors.UnsupportedOperationError`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from interp.errors import ArgumentError, ResultFormatError, ShapeError, UnsupportedOperationError
from interp.features._transcoder import Transcoder
from interp.models import Model, default_cache_dir

__all__ = ["FORMATS", "load_transcoders"]

#: the dictionary formats :func:`load_transcoders` reads
FORMATS = ("circuit-tracer (layer_{i}.safetensors [+ config.yaml]; also interp's cache)",
           "SAELens / Gemma Scope 2 (cfg.json + sae_weights.safetensors, one folder per layer)",
           "sparsify (one folder per hookpoint layers.{l}.mlp with cfg.json + sae.safetensors)")

_LAYER = re.compile(r"(?:^|\.)(?:blocks|layers|h|layer)\.(\d+)(?:\.|$)")
_MLP_IN = ("ln2.hook_normalized", "hook_mlp_in", "mlp.hook_in")
_MLP_OUT = ("hook_mlp_out", "mlp.hook_out")
_SAELENS_TC = {"transcoder": "relu", "skip_transcoder": "relu", "jumprelu_transcoder": "jumprelu",
               "jumprelu_skip_transcoder": "jumprelu"}


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
            raise ResultFormatError(f"path={str(path)!r} has no key {k!r} (it holds {sorted(t)}); this format needs "
                                    f"{list(keys)}")


def _make(path: Path, dtype: torch.dtype, **kw: Any) -> Transcoder:
    kw = {k: (v.to(dtype) if isinstance(v, Tensor) else v) for k, v in kw.items()}
    try:
        return Transcoder(**kw)
    except ArgumentError as e:
        raise ResultFormatError(f"path={str(path)!r}: {e}") from None


def _read_ct_layer(path: Path, dtype: torch.dtype) -> Transcoder:
    """One circuit-tracer (or Gemma Scope 2, or interp cache) layer file."""
    t, meta = _tensors(path)
    if "w_enc" in t and "W_enc" not in t:  # Gemma Scope 2: w_enc [d, F], affine_skip_connection [d_in, d_out]
        _need(path, t, ("w_enc", "w_dec", "b_enc", "b_dec", "threshold"))
        skip = t.get("affine_skip_connection")
        return _make(path, dtype, W_enc=t["w_enc"].T, b_enc=t["b_enc"], W_dec=t["w_dec"], b_dec=t["b_dec"],
                     W_skip=None if skip is None else skip.T, activation="jumprelu", threshold=t["threshold"])
    _need(path, t, ("W_enc", "W_dec", "b_enc", "b_dec"))
    thr = t.get("activation_function.threshold")
    k = meta.get("k")
    if k is not None and thr is None:
        try:
            kk = int(k)
        except ValueError:
            raise ResultFormatError(f"path={str(path)!r}: metadata k={k!r} is not an int") from None
        ctx = meta.get("context_length")
        return _make(path, dtype, W_enc=t["W_enc"], b_enc=t["b_enc"], W_dec=t["W_dec"], b_dec=t["b_dec"],
                     W_skip=t.get("W_skip"), activation="topk", k=kk,
                     context_length=int(ctx) if ctx is not None and ctx.isdigit() else None)
    return _make(path, dtype, W_enc=t["W_enc"], b_enc=t["b_enc"], W_dec=t["W_dec"], b_dec=t["b_dec"],
                 W_skip=t.get("W_skip"), activation="relu" if thr is None else "jumprelu",
                 threshold=None if thr is None else thr.reshape(-1))


def _circuit_tracer(root: Path, dtype: torch.dtype) -> Optional[dict[int, Transcoder]]:
    files: list[Path] = []
    cfg = root / "config.yaml"
    if cfg.is_file():
        import yaml

        try:
            conf = yaml.safe_load(cfg.read_text()) or {}
        except yaml.YAMLError as e:
            raise ResultFormatError(f"path={str(cfg)!r} is not valid YAML ({e})") from None
        kind = conf.get("model_kind") if isinstance(conf, dict) else None
        if kind not in (None, "transcoder_set"):
            raise UnsupportedOperationError(f"path={str(cfg)!r} has model_kind={kind!r}; interp reads per-layer "
                                            "transcoders (model_kind 'transcoder_set'), not cross-layer ones")
        listed = conf.get("transcoders") if isinstance(conf, dict) else None
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
                raise ResultFormatError(f"path={str(cfg)!r}: key 'transcoders' must be a list of file paths")
            files = [Path(p) if Path(p).is_absolute() else root / p for p in listed]
            return {i: _read_ct_layer(p, dtype) for i, p in enumerate(files)}
    layers = sorted(int(m.group(1)) for p in root.glob("layer_*.safetensors")
                    if (m := re.fullmatch(r"layer_(\d+)\.safetensors", p.name)))
    if not layers:
        return None
    return {l: _read_ct_layer(root / f"layer_{l}.safetensors", dtype) for l in layers}


def _hook_layer(path: Path, hook: Any, allowed: tuple[str, ...], what: str) -> int:
    if not isinstance(hook, str) or not (m := _LAYER.search(hook)):
        raise ResultFormatError(f"path={str(path)!r}: {what} hook {hook!r} names no layer (blocks.{{l}}.…)")
    if not any(hook.endswith(a) for a in allowed):
        raise UnsupportedOperationError(
            f"path={str(path)!r} reads or writes hook {hook!r}; a transcoder's {what} must be one of "
            f"{['blocks.{l}.' + a for a in allowed]}" + ("" if what == "output" else
                                                         " (a dictionary on the residual stream is an SAE, not a "
                                                         "transcoder: attribution graphs need transcoders)"))
    return int(m.group(1))


def _saelens_one(d: Path, dtype: torch.dtype) -> tuple[int, Transcoder]:
    try:
        cfg = json.loads((d / "cfg.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ResultFormatError(f"path={str(d / 'cfg.json')!r} is not readable JSON ({e})") from None
    arch = cfg.get("architecture", "standard")
    meta = cfg.get("metadata") or {}
    hook = meta.get("hook_name", cfg.get("hook_name"))
    if arch not in _SAELENS_TC:
        raise UnsupportedOperationError(
            f"path={str(d)!r} is a SAELens {arch!r} SAE on {hook!r}: it reconstructs its input, it is not a "
            f"transcoder (MLP input → MLP output); interp reads the SAELens architectures {sorted(_SAELENS_TC)}")
    if cfg.get("normalize_activations", "none") not in ("none", None) or cfg.get("apply_b_dec_to_input"):
        raise UnsupportedOperationError(f"path={str(d)!r}: normalize_activations="
                                        f"{cfg.get('normalize_activations')!r} / apply_b_dec_to_input is not read "
                                        "(interp reads transcoders on the raw MLP input)")
    layer = _hook_layer(d, hook, _MLP_IN, "input")
    out_hook = meta.get("hook_name_out", cfg.get("hook_name_out"))
    if out_hook is not None and _hook_layer(d, out_hook, _MLP_OUT, "output") != layer:
        raise ResultFormatError(f"path={str(d)!r}: hook_name {hook!r} and hook_name_out {out_hook!r} name different layers")
    p = d / "sae_weights.safetensors"
    t, _ = _tensors(p)
    _need(p, t, ("W_enc", "W_dec", "b_enc", "b_dec"))
    act = _SAELENS_TC[arch]
    if act == "jumprelu":
        _need(p, t, ("threshold",))
    if "skip" in arch:
        _need(p, t, ("W_skip",))
    ctx = meta.get("context_size", cfg.get("context_size"))  # the training sequence length, where recorded
    return layer, _make(p, dtype, W_enc=t["W_enc"].T, b_enc=t["b_enc"], W_dec=t["W_dec"], b_dec=t["b_dec"],
                        W_skip=t.get("W_skip"), activation=act,
                        threshold=None if act != "jumprelu" else t["threshold"].reshape(-1),
                        context_length=ctx if isinstance(ctx, int) and ctx > 0 else None)


def _sparsify_one(d: Path, dtype: torch.dtype) -> tuple[int, Transcoder]:
    try:
        cfg = json.loads((d / "cfg.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ResultFormatError(f"path={str(d / 'cfg.json')!r} is not readable JSON ({e})") from None
    if not cfg.get("transcode", False):
        raise UnsupportedOperationError(f"path={str(d)!r} is a sparsify SAE on {d.name!r} (transcode: false): it "
                                        "reconstructs its input, it is not a transcoder; attribution graphs need "
                                        "transcoders trained with transcode=True on layers.{l}.mlp")
    if cfg.get("activation", "topk") != "topk":
        raise UnsupportedOperationError(f"path={str(d)!r}: activation={cfg.get('activation')!r}; interp reads "
                                        "sparsify's 'topk'")
    m = _LAYER.search(d.name)
    if m is None or not d.name.endswith("mlp"):
        raise UnsupportedOperationError(f"path={str(d)!r}: hookpoint {d.name!r} is not an MLP (layers.{{l}}.mlp)")
    p = d / "sae.safetensors"
    t, _ = _tensors(p)
    _need(p, t, ("encoder.weight", "encoder.bias", "W_dec", "b_dec"))
    return int(m.group(1)), _make(p, dtype, W_enc=t["encoder.weight"], b_enc=t["encoder.bias"], W_dec=t["W_dec"],
                                  b_dec=t["b_dec"], W_skip=t.get("W_skip"), activation="topk", k=int(cfg["k"]))


def _collect(root: Path, dtype: torch.dtype) -> Optional[dict[int, Transcoder]]:
    """SAELens or sparsify: the folder itself, or its sub-folders, each holding a cfg.json."""
    dirs = [root] if (root / "cfg.json").is_file() else sorted(p for p in root.iterdir() if (p / "cfg.json").is_file())
    if not dirs:
        return None
    out: dict[int, Transcoder] = {}
    for d in dirs:
        if (d / "sae_weights.safetensors").is_file():
            l, tc = _saelens_one(d, dtype)
        elif (d / "sae.safetensors").is_file():
            l, tc = _sparsify_one(d, dtype)
        else:
            raise ResultFormatError(f"path={str(d)!r} has a cfg.json but neither sae_weights.safetensors (SAELens) "
                                    "nor sae.safetensors (sparsify)")
        if l in out:
            raise ResultFormatError(f"path={str(root)!r} holds two dictionaries for layer {l}")
        out[l] = tc
    return out


def _resolve(source: Union[str, os.PathLike], model: Optional[Model]) -> Path:
    p = Path(source)
    if p.exists() or isinstance(source, os.PathLike) or os.sep in str(source) or model is None:
        return p
    cached = default_cache_dir() / "transcoders" / model.name / str(source)  # a name in interp's cache
    return cached if cached.is_dir() else p


def load_transcoders(source: Union[str, os.PathLike], model: Optional[Model] = None, *,
                     dtype: torch.dtype = torch.float32) -> list[Transcoder]:
    """The per-layer transcoders in ``source``, in layer order (the formats: module docstring and :data:`FORMATS`).

    ``source`` is a directory in circuit-tracer's, SAELens's (Gemma Scope 2) or sparsify's layout, or — with
    ``model`` — the name of a trained set in interp's cache (``<cache>/transcoders/<model>/<name>``). With
    ``model`` the set must cover every layer with the model's d_model (else :class:`interp.errors.ShapeError`
    naming the layer). An unreadable format raises :class:`interp.errors.ResultFormatError` listing the formats
    read; a residual SAE or a cross-layer transcoder, :class:`interp.errors.UnsupportedOperationError`.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentError(f"source={source!r} must be a directory path or a cached name (str or os.PathLike)")
    if model is not None and not isinstance(model, Model):
        raise ArgumentError(f"model={model!r} must be an interp Model (from interp.load_model) or None")
    root = _resolve(source, model)
    if not root.is_dir():
        raise ResultFormatError(f"source={str(source)!r} is not a directory of transcoders"
                                + ("" if model is None else f" nor a name in {str(default_cache_dir() / 'transcoders' / model.name)!r}"))
    found = _circuit_tracer(root, dtype)
    if found is None:
        found = _collect(root, dtype)
    if not found:
        raise ResultFormatError(f"source={str(root)!r} holds no layer_0.safetensors (and no config.yaml listing "
                                f"transcoders), no cfg.json: interp reads {list(FORMATS)}")
    layers = sorted(found)
    if model is not None:
        L, d = model.arch.n_layers, model.arch.d_model
        missing = [l for l in range(L) if l not in found]
        extra = [l for l in layers if l >= L]
        if extra:
            raise ShapeError(f"source={str(root)!r} has transcoders for layers {extra}; model {model.name!r} has {L} layers")
        if missing:
            raise ShapeError(f"source={str(root)!r} has no transcoder for layers {missing} of model {model.name!r} "
                             f"({L} layers; attribution graphs need one per layer)")
        for l in layers:
            if found[l].d_model != d:
                raise ShapeError(f"source={str(root)!r}: the layer-{l} transcoder has d_model={found[l].d_model}; "
                                 f"model {model.name!r} has d_model={d}")
    elif layers != list(range(len(layers))):
        raise ResultFormatError(f"source={str(root)!r} has transcoders for layers {layers}, not 0..{len(layers) - 1}: "
                                "pass model= to check them against the model")
    return [found[l] for l in layers]
