"""Reading published dictionary formats into per-layer :class:`Transcoder` s.

Formats read (each tested on files written by that library's own save function):

* **circuit-tracer** (and interp's own cache): ``layer_{i}.safetensors`` with ``W_enc`` [F, d], ``W_dec`` [F, d],
  ``b_enc``, ``b_dec``, optional ``activation_function.threshold`` (JumpReLU) and ``W_skip``; optionally a
  ``config.yaml`` (``model_kind: transcoder_set``) listing the files under ``transcoders:``. A file whose
  safetensors metadata holds ``k`` (interp's trained transcoders) is TopK. Gemma Scope 2's keys (``w_enc``
  [d, F], ``w_dec``, ``threshold``, ``affine_skip_connection`` [d_in, d_out]) are read too.
* **circuit-tracer's cross-layer transcoders** (``model_kind: cross_layer_transcoder``; its
  ``CrossLayerTranscoder.to_safetensors``, also interp's cache of trained CLTs), read into one
  :class:`CrossLayerTranscoder`: per encoder layer i ``W_enc_{i}.safetensors`` (``W_enc_{i}`` [F, d],
  ``b_enc_{i}``, ``b_dec_{i}`` — the bias of layer i's *output* —, optional ``threshold_{i}``: JumpReLU
  pre·[pre > θ], as its JumpReLU computes it) and ``W_dec_{i}.safetensors`` (``W_dec_{i}`` [F, L − i, d]: layer i's
  features to the outputs of layers i..L−1), optional ``W_skip_{i}`` (circuit-tracer adds x_i W_skip_i: read
  transposed). A ``k`` in the encoder files' metadata (interp's trained CLTs) is TopK, a ``layer`` there the model
  layer. The config's ``feature_input_hook`` / ``feature_output_hook``, where given, must be the MLP's input and output
  (circuit-tracer's default ``hook_resid_mid``, the stream before the MLP's norm, is refused: interp's encoders read
  the MLP's input). ``to_safetensors`` writes no config: then the read point must be declared
  (``load_transcoders(..., input_hook="mlp.hook_in")``), else a ResultFormatError says how.
* **Gemma Scope 2's cross-layer transcoders** (``params_layer_{i}.safetensors`` with a 3-D ``w_dec``) are recognised
  and refused: their encoders read ``hook_resid_mid`` (the stream before the MLP's norm), not the MLP's input.
* **SAELens** (its ``save_model``; Gemma Scope 2 as SAELens loads it): a folder with ``cfg.json`` and
  ``sae_weights.safetensors`` (``W_enc`` [d, F], ``W_dec`` [F, d], ``b_enc``, ``b_dec``, ``threshold``,
  ``W_skip`` [d_out, d_in]) — one such folder, or a folder of them, one per layer. ``architecture``
  "transcoder" (ReLU), "skip_transcoder", "jumprelu_transcoder", "jumprelu_skip_transcoder"; the layer is read
  from ``metadata.hook_name`` (``blocks.{l}.…``), which must be the MLP's input and ``hook_name_out`` its output.
* **sparsify** (EleutherAI; its ``save_to_disk``): a checkpoint folder with one sub-folder per hookpoint
  (``layers.{l}.mlp``), each with ``cfg.json`` and ``sae.safetensors`` (``encoder.weight`` [F, d],
  ``encoder.bias``, ``W_dec``, ``b_dec``, ``W_skip``): TopK (ReLU then the k largest) with ``transcode: true``.

SAELens's JumpReLU is relu(pre)·[pre > θ] = pre·[pre > max(θ, 0)]: its thresholds are read clamped at 0.

**Residual-stream SAEs** (:func:`load_saes`, each an :class:`interp.features.SAE` with its layer and site):

* **SAELens**: ``architecture`` "standard" (ReLU), "topk", "jumprelu" on ``blocks.{l}.hook_resid_{pre|mid|post}``.
  A BatchTopK SAE is saved by SAELens for inference as "jumprelu" with its one global threshold θ in every feature
  (``metadata.training_architecture`` "batchtopk"): read as activation "batchtopk", relu(pre)·[pre > θ]; its
  training checkpoint ("batchtopk", ``topk_threshold``) too. ``apply_b_dec_to_input`` ((x − b_dec) W_enc) and
  ``rescale_acts_by_decoder_norm`` (pre·‖W_dec,i‖, f/‖W_dec,i‖ before decoding) are folded into W_enc, b_enc, W_dec.
* **sparsify** without ``transcode``: hookpoint ``layers.{l}`` (the stream after block l: resid_post); its encoder
  reads x − b_dec (folded into b_enc).
* **dictionary_learning** (its ``trainSAE`` output): ``ae.pt`` (a torch state dict, read with ``weights_only``) and
  ``config.json`` with ``trainer.dict_class`` "BatchTopKSAE": relu((x − b_dec) W_encᵀ + b_enc) kept above its scalar
  ``threshold`` — activation "batchtopk"; the site from ``submodule_name`` (``resid_post_layer_{l}``).

:func:`load_transcoders` refuses an SAE (and :func:`load_saes` a transcoder) with
:class:`interp.errors.UnsupportedOperationError` naming the other loader.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from interp.errors import ArgumentError, ResultFormatError, ShapeError, UnsupportedOperationError
from interp.dictionaries._sae import SAE, SAE_SITES, check_saes
from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder
from interp.models import Model, default_cache_dir

__all__ = ["FORMATS", "clt_files", "load_saes", "load_transcoders", "read_clt"]

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


def _read_ct_layer(path: Path, dtype: torch.dtype) -> Transcoder:
    """One circuit-tracer (or Gemma Scope 2, or interp cache) layer file."""
    t, meta = _tensors(path)
    if "w_enc" in t and "W_enc" not in t:  # Gemma Scope 2: w_enc [d, F], affine_skip_connection [d_in, d_out]
        _need(path, t, ("w_enc", "w_dec", "b_enc", "b_dec", "threshold"))
        skip = t.get("affine_skip_connection")
        return _make(
            path,
            dtype,
            W_enc=t["w_enc"].T,
            b_enc=t["b_enc"],
            W_dec=t["w_dec"],
            b_dec=t["b_dec"],
            W_skip=None if skip is None else skip.T,
            activation="jumprelu",
            threshold=t["threshold"],
        )
    _need(path, t, ("W_enc", "W_dec", "b_enc", "b_dec"))
    thr = t.get("activation_function.threshold")
    k = meta.get("k")
    if k is not None and thr is None:
        try:
            kk = int(k)
        except ValueError:
            raise ResultFormatError(f"path={str(path)!r}: metadata k={k!r} is not an int") from None
        ctx = meta.get("context_length")
        return _make(
            path,
            dtype,
            W_enc=t["W_enc"],
            b_enc=t["b_enc"],
            W_dec=t["W_dec"],
            b_dec=t["b_dec"],
            W_skip=t.get("W_skip"),
            activation="topk",
            k=kk,
            context_length=int(ctx) if ctx is not None and ctx.isdigit() else None,
        )
    return _make(
        path,
        dtype,
        W_enc=t["W_enc"],
        b_enc=t["b_enc"],
        W_dec=t["W_dec"],
        b_dec=t["b_dec"],
        W_skip=t.get("W_skip"),
        activation="relu" if thr is None else "jumprelu",
        threshold=None if thr is None else thr.reshape(-1),
    )


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
            raise UnsupportedOperationError(
                f"path={str(cfg)!r} has model_kind={kind!r}; interp reads circuit-tracer's "
                "'transcoder_set' and 'cross_layer_transcoder'"
            )
        listed = conf.get("transcoders") if isinstance(conf, dict) else None
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
                raise ResultFormatError(f"path={str(cfg)!r}: key 'transcoders' must be a list of file paths")
            files = [Path(p) if Path(p).is_absolute() else root / p for p in listed]
            return {i: _read_ct_layer(p, dtype) for i, p in enumerate(files)}
    layers = sorted(
        int(m.group(1))
        for p in root.glob("layer_*.safetensors")
        if (m := re.fullmatch(r"layer_(\d+)\.safetensors", p.name))
    )
    if not layers:
        return None
    return {l: _read_ct_layer(root / f"layer_{l}.safetensors", dtype) for l in layers}


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        conf = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ResultFormatError(f"path={str(path)!r} is not readable YAML ({e})") from None
    if not isinstance(conf, dict):
        raise ResultFormatError(f"path={str(path)!r} holds {type(conf).__name__}, not a mapping")
    return conf


def _is_clt(root: Path) -> bool:
    """A circuit-tracer cross-layer transcoder: config.yaml says so, or (no config) W_enc_0.safetensors is there."""
    cfg = root / "config.yaml"
    if cfg.is_file():
        return _yaml(cfg).get("model_kind") == "cross_layer_transcoder"
    return (root / "W_enc_0.safetensors").is_file()


def _gemma_scope_2_clt_files(root: Path) -> Optional[list[Path]]:
    """Gemma Scope 2's cross-layer transcoder files: ``params_layer_{i}.safetensors`` (its release's names) or
    ``layer_{i}.safetensors``, i = 0, 1, … while they exist, when the first one's ``w_dec`` is [F, L, d] (a per-layer
    Gemma Scope 2 transcoder's is [F, d]); None otherwise."""
    from safetensors import safe_open

    for stem in ("params_layer_", "layer_"):
        first = root / f"{stem}0.safetensors"
        if not first.is_file():
            continue
        try:
            with safe_open(str(first), framework="pt") as f:
                if "w_dec" not in f.keys() or len(f.get_slice("w_dec").get_shape()) != 3:
                    return None
        except Exception:  # an unreadable file: the per-layer readers say so
            return None
        files: list[Path] = []
        while (root / f"{stem}{len(files)}.safetensors").is_file():
            files.append(root / f"{stem}{len(files)}.safetensors")
        return files
    return None


def read_clt(root: Path, dtype: torch.dtype = torch.float32, input_hook: Optional[str] = None) -> CrossLayerTranscoder:
    """The cross-layer transcoder in folder ``root``, in circuit-tracer's layout (module docstring), as its
    ``load_clt`` reads it; ``layers`` from the files' ``layer`` metadata where every file has one, else 0..L−1.
    ``input_hook``: the encoders' read point where config.yaml does not declare it (:func:`load_transcoders`)."""
    # 1. the encoder files W_enc_0 .. W_enc_{L-1}; config.yaml's hooks (or input_hook): each MLP's input and output
    L = _clt_count(root)
    _check_clt_hooks(root, input_hook)
    # 2. the encoder files and their decoders, read
    W_enc, b_enc, b_dec, thr, W_dec, metas, skip = [], [], [], [], [], [], []
    for i in range(L):
        p = root / f"W_enc_{i}.safetensors"
        t, meta = _tensors(p)
        _need(p, t, (f"W_enc_{i}", f"b_enc_{i}", f"b_dec_{i}"))
        W_enc.append(t[f"W_enc_{i}"])
        b_enc.append(t[f"b_enc_{i}"])
        b_dec.append(t[f"b_dec_{i}"])
        thr.append(t.get(f"threshold_{i}"))
        skip.append(t.get(f"W_skip_{i}"))
        metas.append(meta)
        q = root / f"W_dec_{i}.safetensors"
        td, _ = _tensors(q)
        _need(q, td, (f"W_dec_{i}",))
        W_dec.append(td[f"W_dec_{i}"].to(dtype))
    # 3. one activation for every layer: thresholds in all files or none, equal shapes, one k
    if len({x is None for x in thr}) != 1:
        raise ResultFormatError(
            f"path={str(root)!r}: threshold_{{i}} is in some encoder files and not others "
            f"({[i for i, x in enumerate(thr) if x is not None]}): JumpReLU needs one per layer"
        )
    if len({x is None for x in skip}) != 1:
        raise ResultFormatError(
            f"path={str(root)!r}: W_skip_{{i}} is in some encoder files and not others "
            f"({[i for i, x in enumerate(skip) if x is not None]}): a skip CLT has one per layer"
        )
    shapes = {tuple(w.shape) for w in W_enc}
    if len(shapes) != 1:
        raise ResultFormatError(f"path={str(root)!r}: the encoders' W_enc_{{i}} shapes differ ({sorted(shapes)})")
    k = _clt_k(root, metas, thr[0] is not None)
    # 4. the transcoder, its layers and context length from the metadata
    ls = [m.get("layer", "") for m in metas]
    layers = tuple(int(x) for x in ls) if all(x.isdigit() for x in ls) else None
    ctx = metas[0].get("context_length")
    try:
        return _make(
            root,
            dtype,
            cls=CrossLayerTranscoder,
            W_enc=torch.stack(W_enc),
            b_enc=torch.stack(b_enc),
            W_dec=tuple(W_dec),
            b_dec=torch.stack(b_dec),
            W_skip=None if skip[0] is None else torch.stack([w.T for w in skip]),  # type: ignore[union-attr]  # x @ W_skip_i
            activation="topk" if k is not None else "relu" if thr[0] is None else "jumprelu",
            threshold=None if thr[0] is None else torch.stack([x.reshape(-1) for x in thr]),  # type: ignore[union-attr]
            k=k,
            context_length=int(ctx) if isinstance(ctx, str) and ctx.isdigit() else None,
            layers=layers,
        )
    except RuntimeError as e:  # torch.stack on unequal bias shapes
        raise ResultFormatError(f"path={str(root)!r}: the layers' biases have unequal shapes ({e})") from None


def _reads(hook: Any, allowed: tuple[str, ...]) -> bool:
    """``hook`` names one of ``allowed`` (itself, or ``<prefix>.<allowed>``)."""
    return isinstance(hook, str) and any(hook == a or hook.endswith("." + a) for a in allowed)


def _check_clt_hooks(root: Path, input_hook: Optional[str]) -> None:
    """A CLT's read and write points are each layer's MLP input and output: config.yaml's ``feature_input_hook`` /
    ``feature_output_hook`` where it has them, ``input_hook`` (load_transcoders' argument) for the input where it
    does not. Another hook is an :class:`UnsupportedOperationError` naming it; no declared input hook (circuit-tracer's
    ``to_safetensors`` writes no config, and its default is ``hook_resid_mid``) a :class:`ResultFormatError` saying
    how to declare it; a config and ``input_hook`` that disagree an :class:`ArgumentError`."""
    cfg = root / "config.yaml"
    conf = _yaml(cfg) if cfg.is_file() else {}
    declared = conf.get("feature_input_hook")
    if input_hook is not None and declared is not None and input_hook != declared:
        raise ArgumentError(
            f"input_hook={input_hook!r} but {str(cfg)!r} declares feature_input_hook={declared!r}; leave input_hook "
            "None to use the config's"
        )
    hook_in = declared if declared is not None else input_hook
    for name, hook, allowed in (
        ("feature_input_hook" if declared is not None else "input_hook", hook_in, _MLP_IN),
        ("feature_output_hook", conf.get("feature_output_hook"), _MLP_OUT),  # circuit-tracer's default: hook_mlp_out
    ):
        if hook is None or _reads(hook, allowed):
            continue
        raise UnsupportedOperationError(
            ("" if name == "input_hook" else f"path={str(cfg)!r}: ")
            + f"{name}={hook!r}; interp's cross-layer transcoders read each layer's MLP input and write its output "
            f"({name} one of {list(allowed)})"
            + (
                " — hook_resid_mid is the stream before the MLP's norm, not what the MLP reads"
                if allowed is _MLP_IN
                else ""
            )
        )
    if hook_in is None:
        raise ResultFormatError(
            f"path={str(root)!r} holds a cross-layer transcoder in circuit-tracer's layout (W_enc_{{i}}, W_dec_{{i}}) "
            f"{'whose config.yaml names no feature_input_hook' if cfg.is_file() else 'with no config.yaml'}: its "
            "read point is not declared, and circuit-tracer's default for CLTs is hook_resid_mid (the stream before "
            "each MLP's norm), which interp's encoders do not read. If its encoders read each layer's MLP input, "
            "declare it: load_transcoders(path, input_hook='mlp.hook_in'), or a config.yaml with 'model_kind: "
            "cross_layer_transcoder', 'feature_input_hook: mlp.hook_in', 'feature_output_hook: mlp.hook_out'"
        )


def _clt_count(root: Path) -> int:
    """L: the number of consecutive encoder files W_enc_0 .. W_enc_{L-1} (none, or one past a gap, is a
    :class:`ResultFormatError`)."""
    L = 0
    while (root / f"W_enc_{L}.safetensors").is_file():
        L += 1
    if L == 0:
        raise ResultFormatError(
            f"path={str(root)!r} holds no W_enc_0.safetensors: a cross-layer transcoder in "
            "circuit-tracer's layout has W_enc_{i}.safetensors and W_dec_{i}.safetensors per layer"
        )
    stray = sorted(
        p.name
        for p in root.glob("W_enc_*.safetensors")
        if (m := re.fullmatch(r"W_enc_(\d+)\.safetensors", p.name)) and int(m.group(1)) >= L
    )
    if stray:
        raise ResultFormatError(
            f"path={str(root)!r} has {stray} but no W_enc_{L}.safetensors: encoder files must be "
            f"W_enc_0 .. W_enc_{{L-1}}"
        )
    return L


def _clt_k(root: Path, metas: list[dict[str, str]], has_threshold: bool) -> Optional[int]:
    """TopK's k from the encoder files' metadata (one int in every file, no threshold), None where none has one."""
    ks = {m.get("k") for m in metas}
    if ks == {None}:
        return None
    (kk,) = ks if len(ks) == 1 else (None,)
    if not (isinstance(kk, str) and kk.isdigit()) or has_threshold:
        raise ResultFormatError(
            f"path={str(root)!r}: metadata k={sorted(map(str, ks))} must be one int in every "
            "encoder file (TopK, no threshold)"
        )
    return int(kk)


def clt_files(clt: CrossLayerTranscoder) -> tuple[dict[str, tuple[dict[str, Tensor], dict[str, str]]], str]:
    """What circuit-tracer's layout holds for ``clt``: {file name: (tensors, safetensors metadata)} and the
    config.yaml text (:func:`read_clt` reads them back; circuit-tracer's ``load_clt`` reads the tensors — a TopK
    CLT's ``k`` is interp's metadata, which circuit-tracer ignores). W_skip is not written (circuit-tracer's CLT
    format has none): refused."""
    if clt.W_skip is not None:
        raise UnsupportedOperationError(
            "circuit-tracer's cross-layer transcoder files hold no skip weights: a CLT "
            "with W_skip cannot be written in its layout"
        )
    files: dict[str, tuple[dict[str, Tensor], dict[str, str]]] = {}
    for i, l in enumerate(clt.model_layers):
        enc = {f"W_enc_{i}": clt.W_enc[i], f"b_enc_{i}": clt.b_enc[i], f"b_dec_{i}": clt.b_dec[i]}
        if clt.threshold is not None and clt.activation == "jumprelu":
            enc[f"threshold_{i}"] = clt.threshold[i]
        elif clt.activation not in ("relu", "topk"):
            raise UnsupportedOperationError(
                f"activation={clt.activation!r}: circuit-tracer's CLT layout holds relu, jumprelu (and interp's topk)"
            )
        meta = (
            {"layer": str(l)}
            | ({"k": str(clt.k)} if clt.activation == "topk" else {})
            | ({} if clt.context_length is None else {"context_length": str(clt.context_length)})
        )
        files[f"W_enc_{i}.safetensors"] = ({n: v.detach().contiguous() for n, v in enc.items()}, meta)
        files[f"W_dec_{i}.safetensors"] = ({f"W_dec_{i}": clt.W_dec[i].detach().contiguous()}, {})
    config = "model_kind: cross_layer_transcoder\nfeature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
    return files, config


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


def _saelens_hook(cfg: dict[str, Any]) -> Any:
    meta = cfg.get("metadata") or {}
    return meta.get("hook_name", cfg.get("hook_name"))


def _saelens_context(cfg: dict[str, Any]) -> Optional[int]:
    """The training sequence length a SAELens config records (``context_size``), or None."""
    ctx = (cfg.get("metadata") or {}).get("context_size", cfg.get("context_size"))
    return ctx if isinstance(ctx, int) and ctx > 0 else None


def _saelens_one(d: Path, dtype: torch.dtype) -> tuple[int, Transcoder]:
    cfg = _cfg(d)
    arch = cfg.get("architecture", "standard")
    meta = cfg.get("metadata") or {}
    hook = _saelens_hook(cfg)
    if arch not in _SAELENS_TC:
        raise UnsupportedOperationError(
            f"path={str(d)!r} is a SAELens {arch!r} SAE on {hook!r}: it reconstructs its input, it is not a "
            f"transcoder (MLP input → MLP output; interp reads the SAELens architectures {sorted(_SAELENS_TC)}); "
            "load a residual-stream SAE with interp.features.load_saes"
        )
    if cfg.get("normalize_activations", "none") not in ("none", None) or cfg.get("apply_b_dec_to_input"):
        raise UnsupportedOperationError(
            f"path={str(d)!r}: normalize_activations="
            f"{cfg.get('normalize_activations')!r} / apply_b_dec_to_input is not read "
            "(interp reads transcoders on the raw MLP input)"
        )
    layer = _hook_layer(d, hook, _MLP_IN, "input")
    out_hook = meta.get("hook_name_out", cfg.get("hook_name_out"))
    if out_hook is not None and _hook_layer(d, out_hook, _MLP_OUT, "output") != layer:
        raise ResultFormatError(
            f"path={str(d)!r}: hook_name {hook!r} and hook_name_out {out_hook!r} name different layers"
        )
    p = d / "sae_weights.safetensors"
    t, _ = _tensors(p)
    _need(p, t, ("W_enc", "W_dec", "b_enc", "b_dec"))
    act = _SAELENS_TC[arch]
    if act == "jumprelu":
        _need(p, t, ("threshold",))
    if "skip" in arch:
        _need(p, t, ("W_skip",))
    return layer, _make(
        p,
        dtype,
        W_enc=t["W_enc"].T,
        b_enc=t["b_enc"],
        W_dec=t["W_dec"],
        b_dec=t["b_dec"],
        W_skip=t.get("W_skip"),
        activation=act,
        threshold=None if act != "jumprelu" else t["threshold"].reshape(-1).clamp_min(0),  # as for SAEs
        context_length=_saelens_context(cfg),
    )


def _resid_site(d: Path, hook: Any) -> tuple[int, str]:
    """(layer, site) of a residual-stream hook ``blocks.{l}.hook_resid_{pre|mid|post}``."""
    m = _RESID.fullmatch(hook) if isinstance(hook, str) else None
    if m is None:
        raise UnsupportedOperationError(
            f"path={str(d)!r} reads hook {hook!r}; interp reads SAEs of the residual stream "
            "(blocks.{l}.hook_resid_pre / hook_resid_mid / hook_resid_post)"
            + (
                " — this is an MLP transcoder's input: use load_transcoders"
                if isinstance(hook, str) and any(hook.endswith(a) for a in _MLP_IN)
                else ""
            )
        )
    return int(m.group(1)), "resid_" + m.group(2)


def _saelens_sae(d: Path, dtype: torch.dtype) -> SAE:
    """One SAELens SAE folder (its ``save_model`` / ``save_inference_model``), as SAELens's inference encodes it:
    (x − b_dec·[apply_b_dec_to_input]) W_enc + b_enc, scaled by ‖W_dec,i‖ when ``rescale_acts_by_decoder_norm`` —
    both folded into W_enc, b_enc and W_dec here, exactly."""
    cfg = _cfg(d)
    arch = cfg.get("architecture", "standard")
    hook = _saelens_hook(cfg)
    meta = cfg.get("metadata") or {}
    if arch in _SAELENS_TC:
        raise UnsupportedOperationError(
            f"path={str(d)!r} is a SAELens {arch!r} (MLP input → output), not an SAE of "
            "the residual stream: load it with interp.features.load_transcoders"
        )
    if arch not in _SAELENS_SAE:
        raise UnsupportedOperationError(
            f"path={str(d)!r}: SAELens architecture {arch!r} is not read; interp reads "
            f"the SAE architectures {sorted(_SAELENS_SAE)}"
        )
    if (
        cfg.get("normalize_activations", "none") not in ("none", None)
        or cfg.get("reshape_activations", "none") != "none"
    ):
        raise UnsupportedOperationError(
            f"path={str(d)!r}: normalize_activations={cfg.get('normalize_activations')!r}, "
            f"reshape_activations={cfg.get('reshape_activations')!r}: interp reads SAEs on "
            "the raw stream ('none')"
        )
    layer, site = _resid_site(d, hook)
    p = d / "sae_weights.safetensors"
    t, _ = _tensors(p)
    _need(p, t, ("W_enc", "W_dec", "b_enc", "b_dec"))
    W_enc, b_enc = t["W_enc"].T.double(), t["b_enc"].double()  # W_enc [F, d]
    W_dec, b_dec = t["W_dec"].double(), t["b_dec"].double()
    if cfg.get("apply_b_dec_to_input", True):  # SAELens's default: (x − b_dec) W_enc + b_enc
        b_enc = b_enc - W_enc @ b_dec
    if cfg.get("rescale_acts_by_decoder_norm", False):  # pre·‖W_dec,i‖ then f/‖W_dec,i‖ before decoding
        n = W_dec.norm(dim=-1)
        W_enc, b_enc, W_dec = W_enc * n[:, None], b_enc * n, W_dec / n[:, None]
    act, thr, k = _SAELENS_SAE[arch], None, None
    if act == "topk":
        k = cfg.get("k")
        if not isinstance(k, int):
            raise ResultFormatError(f"path={str(d / 'cfg.json')!r}: a 'topk' SAE needs an int k, got {k!r}")
    elif act == "batchtopk":  # a training checkpoint: the running threshold it keeps
        _need(p, t, ("topk_threshold",))
        thr = t["topk_threshold"].double().reshape(())
    else:
        if act == "jumprelu":
            _need(p, t, ("threshold",))
            thr = (
                t["threshold"].double().reshape(-1).clamp_min(0)
            )  # SAELens: relu(pre)·[pre > θ] = pre·[pre > max(θ, 0)]
            # SAELens saves a BatchTopK SAE for inference as JumpReLU with its one global θ in every feature
            if (
                meta.get("training_architecture") in ("batchtopk", "matryoshka_batchtopk")
                and thr.numel()
                and bool((thr == thr[0]).all())
                and float(thr[0]) >= 0
            ):
                act, thr = "batchtopk", thr[0].clone()
    return _make(
        p,
        dtype,
        cls=SAE,
        W_enc=W_enc,
        b_enc=b_enc,
        W_dec=W_dec,
        b_dec=b_dec,
        activation=act,
        threshold=thr,
        k=k,
        context_length=_saelens_context(cfg),
        layer=layer,
        site=site,
    )


def _sparsify_one(d: Path, dtype: torch.dtype) -> tuple[int, Transcoder]:
    cfg = _cfg(d)
    if not cfg.get("transcode", False):
        raise UnsupportedOperationError(
            f"path={str(d)!r} is a sparsify SAE on {d.name!r} (transcode: false): it "
            "reconstructs its input, it is not a transcoder; attribution graphs need "
            "transcoders trained with transcode=True on layers.{l}.mlp (load an SAE of "
            "the residual stream with interp.features.load_saes)"
        )
    if cfg.get("activation", "topk") != "topk":
        raise UnsupportedOperationError(
            f"path={str(d)!r}: activation={cfg.get('activation')!r}; interp reads sparsify's 'topk'"
        )
    m = _LAYER.search(d.name)
    if m is None or not d.name.endswith("mlp"):
        raise UnsupportedOperationError(f"path={str(d)!r}: hookpoint {d.name!r} is not an MLP (layers.{{l}}.mlp)")
    p = d / "sae.safetensors"
    t, _ = _tensors(p)
    _need(p, t, ("encoder.weight", "encoder.bias", "W_dec", "b_dec"))
    return int(m.group(1)), _make(
        p,
        dtype,
        W_enc=t["encoder.weight"],
        b_enc=t["encoder.bias"],
        W_dec=t["W_dec"],
        b_dec=t["b_dec"],
        W_skip=t.get("W_skip"),
        activation="topk",
        k=int(cfg["k"]),
    )


def _sparsify_sae(d: Path, dtype: torch.dtype) -> SAE:
    """One sparsify coder without ``transcode`` on a decoder layer's output (hookpoint ``layers.{l}``: the stream
    after block l, resid_post). sparsify encodes x − b_dec: folded into b_enc here, exactly."""
    cfg = _cfg(d)
    if cfg.get("transcode", False):
        raise UnsupportedOperationError(
            f"path={str(d)!r} is a sparsify transcoder (transcode: true), not an SAE of "
            "the residual stream: load it with interp.features.load_transcoders"
        )
    if cfg.get("activation", "topk") != "topk":
        raise UnsupportedOperationError(
            f"path={str(d)!r}: activation={cfg.get('activation')!r}; interp reads sparsify's 'topk'"
        )
    m = _SPARSIFY_RESID.fullmatch(d.name)
    if m is None:
        raise UnsupportedOperationError(
            f"path={str(d)!r}: hookpoint {d.name!r} is not a decoder layer's output "
            "(layers.{l}: the residual stream after block l)"
        )
    p = d / "sae.safetensors"
    t, _ = _tensors(p)
    _need(p, t, ("encoder.weight", "encoder.bias", "W_dec", "b_dec"))
    if "W_skip" in t:
        raise UnsupportedOperationError(f"path={str(p)!r} has W_skip: a skip term belongs to a transcoder, not an SAE")
    W_enc, b_dec = t["encoder.weight"].double(), t["b_dec"].double()
    return _make(
        p,
        dtype,
        cls=SAE,
        W_enc=W_enc,
        b_enc=t["encoder.bias"].double() - W_enc @ b_dec,
        W_dec=t["W_dec"],
        b_dec=b_dec,
        activation="topk",
        k=int(cfg["k"]),
        layer=int(m.group(1)),
        site="resid_post",
    )


def _dictionary_learning_sae(d: Path, dtype: torch.dtype) -> SAE:
    """One dictionary_learning trainer folder (``ae.pt``: the state dict; ``config.json``: {"trainer": ...}) holding
    a BatchTopKSAE, as its encode runs at inference: relu((x − b_dec) W_encᵀ + b_enc) kept where it exceeds the
    scalar ``threshold`` (b_dec folded into b_enc here)."""
    try:
        conf = json.loads((d / "config.json").read_text())["trainer"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ResultFormatError(
            f"path={str(d / 'config.json')!r} is not a dictionary_learning config with a 'trainer' object ({e!r})"
        ) from None
    if conf.get("dict_class") != "BatchTopKSAE":
        raise UnsupportedOperationError(
            f"path={str(d)!r}: dictionary_learning dict_class={conf.get('dict_class')!r}; "
            "interp reads its 'BatchTopKSAE'"
        )
    layer, sub = conf.get("layer"), conf.get("submodule_name")
    m = _DL_SITE.fullmatch(sub) if isinstance(sub, str) else None
    if not isinstance(layer, int) or (sub is not None and (m is None or int(m.group(2)) != layer)):
        raise UnsupportedOperationError(
            f"path={str(d)!r}: layer={layer!r}, submodule_name={sub!r}; interp reads "
            "dictionary_learning SAEs of a layer's residual stream (submodule_name "
            "'resid_post_layer_{l}', or none: the layer's output)"
        )
    p = d / "ae.pt"
    try:
        t = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises its own (unpickling) errors on a bad file
        raise ResultFormatError(f"path={str(p)!r} is not a readable state dict ({e})") from None
    if not isinstance(t, dict):
        raise ResultFormatError(f"path={str(p)!r} holds {type(t).__name__}, not a state dict")
    _need(p, t, ("encoder.weight", "encoder.bias", "decoder.weight", "b_dec", "threshold"))
    W_enc, b_dec = t["encoder.weight"].double(), t["b_dec"].double()
    return _make(
        p,
        dtype,
        cls=SAE,
        W_enc=W_enc,
        b_enc=t["encoder.bias"].double() - W_enc @ b_dec,
        W_dec=t["decoder.weight"].T,
        b_dec=b_dec,
        activation="batchtopk",
        threshold=t["threshold"].double().reshape(()),
        layer=layer,
        site="resid_post" if m is None else "resid_" + m.group(1),
    )


@dataclass(frozen=True)
class _Format:
    """One dictionary format: its name, the files that mark it, what its dictionaries read, how a folder is
    recognised (``marks``: None for a whole directory's layout, recognised by :func:`load_transcoders` itself), and
    its readers — ``transcoder`` (a folder → (layer, Transcoder); it refuses an SAE) and ``sae`` (a folder → SAE; it
    refuses a transcoder), None where the format holds no such dictionaries."""

    name: str
    files: str
    reads: str
    marks: Optional[Callable[[Path], bool]] = None
    transcoder: Optional[Callable[[Path, torch.dtype], tuple[int, Transcoder]]] = None
    sae: Optional[Callable[[Path, torch.dtype], SAE]] = None


def _has(*names: str) -> Callable[[Path], bool]:
    return lambda d: all((d / n).is_file() for n in names)


#: every format read, in the order a folder is recognised
_TABLE = (
    _Format(
        "circuit-tracer",
        "layer_{i}.safetensors [+ config.yaml]; also interp's cache",
        "each layer's MLP input (transcoders)",
    ),
    _Format(
        "circuit-tracer cross-layer transcoder",
        "W_enc_{i}.safetensors + W_dec_{i}.safetensors [+ config.yaml model_kind: cross_layer_transcoder]; also "
        "interp's cache",
        "each layer's MLP input (the config's feature_input_hook, or input_hook=)",
    ),
    _Format(
        "SAELens / Gemma Scope 2",
        "cfg.json + sae_weights.safetensors, one folder per layer",
        "the MLP input (transcoder architectures) or the residual stream (SAE ones), by metadata.hook_name",
        _has("cfg.json", "sae_weights.safetensors"),
        lambda d, dt: _saelens_one(d, dt),
        lambda d, dt: _saelens_sae(d, dt),
    ),
    _Format(
        "sparsify",
        "one folder per hookpoint layers.{l}.mlp with cfg.json + sae.safetensors",
        "the MLP input (transcode: true) or the stream after the block (layers.{l})",
        _has("cfg.json", "sae.safetensors"),
        lambda d, dt: _sparsify_one(d, dt),
        lambda d, dt: _sparsify_sae(d, dt),
    ),
    _Format(
        "dictionary_learning",
        "ae.pt + config.json",
        "the residual stream (BatchTopKSAE, by submodule_name)",
        lambda d: _has("ae.pt", "config.json")(d) and not (d / "cfg.json").is_file(),
        None,
        lambda d, dt: _dictionary_learning_sae(d, dt),
    ),
)

#: the dictionary formats :func:`load_transcoders` reads
FORMATS = tuple(f"{f.name} ({f.files})" for f in _TABLE if f.sae is None or f.transcoder is not None)


def _detect(d: Path) -> _Format:
    """The format of the folder ``d`` (one dictionary): the first entry of :data:`_TABLE` whose files it holds; a
    folder with a cfg.json and no weights file is a :class:`ResultFormatError` naming the files looked for."""
    for f in _TABLE:
        if f.marks is not None and f.marks(d):
            return f
    raise ResultFormatError(
        f"path={str(d)!r} has a cfg.json but neither sae_weights.safetensors (SAELens) nor sae.safetensors (sparsify)"
    )


def _cfg_dirs(root: Path) -> list[Path]:
    """The folder itself if it holds a cfg.json, else its sub-folders that do."""
    return [root] if (root / "cfg.json").is_file() else sorted(p for p in root.iterdir() if (p / "cfg.json").is_file())


def _collect(root: Path, dtype: torch.dtype) -> Optional[dict[int, Transcoder]]:
    """SAELens or sparsify: the folder itself, or its sub-folders, each holding a cfg.json."""
    dirs = _cfg_dirs(root)
    if not dirs:
        return None
    out: dict[int, Transcoder] = {}
    for d in dirs:
        read = _detect(d).transcoder
        assert read is not None  # every format a cfg.json marks reads transcoders
        l, tc = read(d, dtype)
        if l in out:
            raise ResultFormatError(f"path={str(root)!r} holds two dictionaries for layer {l}")
        out[l] = tc
    return out


def _resolve(source: Union[str, os.PathLike], model: Optional[Model], cache_dir: Optional[Path]) -> Path:
    p = Path(source)
    if p.exists() or isinstance(source, os.PathLike) or os.sep in str(source) or model is None:
        return p
    cached = _runs(model, cache_dir) / str(source)  # a name in interp's cache
    return cached if cached.is_dir() else p


def _runs(model: Model, cache_dir: Optional[Path]) -> Path:
    """``<cache>/transcoders/<model>``, as train_transcoders names it."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model.name)
    return (cache_dir if cache_dir is not None else default_cache_dir()) / "transcoders" / safe


def load_transcoders(
    source: Union[str, os.PathLike],
    model: Optional[Model] = None,
    *,
    dtype: torch.dtype = torch.float32,
    input_hook: Optional[str] = None,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
) -> Union[list[Transcoder], CrossLayerTranscoder]:
    """The per-layer transcoders in ``source``, in layer order, each knowing its layer — or, for circuit-tracer's
    cross-layer format, one :class:`CrossLayerTranscoder` (the formats: module docstring and :data:`FORMATS`).

    ``source`` is a directory in circuit-tracer's (per-layer or cross-layer), SAELens's (Gemma Scope 2) or
    sparsify's layout, or — with ``model`` — the name of a trained set in interp's cache
    (``<cache_dir>/transcoders/<model>/<name>``, ``cache_dir`` as given to train_transcoders). A set of some layers
    loads as such (a partial set: evaluation, contexts and interventions at its layers; an attribution graph asks
    for every layer and names the missing ones). With ``model`` its layers and d_model must be the model's (else
    :class:`interp.errors.ShapeError` naming the layer); a CLT's encoders must be the model's layers 0..L−1. An
    unreadable format raises :class:`interp.errors.ResultFormatError` listing the formats read; a residual SAE or a
    CLT that reads another hook than the MLP's input, :class:`interp.errors.UnsupportedOperationError`.

    ``input_hook`` declares where a cross-layer transcoder's encoders read when its folder does not say
    (circuit-tracer's ``to_safetensors`` writes no config.yaml, and circuit-tracer's default read point for CLTs is
    ``hook_resid_mid``, the stream before each MLP's norm, which interp's encoders do not read): ``"mlp.hook_in"``
    (or ``"hook_mlp_in"``, ``"ln2.hook_normalized"``) — each layer's MLP input. Without it such a folder is a
    ResultFormatError saying so; a config.yaml with ``feature_input_hook`` declares it too (an ``input_hook`` that
    disagrees is an ArgumentError).
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentError(f"source={source!r} must be a directory path or a cached name (str or os.PathLike)")
    if input_hook is not None and not (isinstance(input_hook, str) and _reads(input_hook, _MLP_IN)):
        raise UnsupportedOperationError(
            f"input_hook={input_hook!r} must be None (declared by the files) or each layer's MLP input, one of "
            f"{list(_MLP_IN)}: interp's transcoders read the MLP's input"
            + (" — hook_resid_mid is the stream before the MLP's norm" if input_hook == "hook_resid_mid" else "")
        )
    if model is not None and not isinstance(model, Model):
        raise ArgumentError(f"model={model!r} must be an interp Model (from interp.load_model) or None")
    cache = None if cache_dir is None else Path(cache_dir)
    root = _resolve(source, model, cache)
    if not root.is_dir():
        raise ResultFormatError(
            f"source={str(source)!r} is not a directory of transcoders"
            + ("" if model is None else f" nor a name in {str(_runs(model, cache))!r}")
        )
    if _is_clt(root):
        return _check_clt(read_clt(root, dtype, input_hook), model, root)
    if _gemma_scope_2_clt_files(root) is not None:
        raise UnsupportedOperationError(
            f"source={str(root)!r} holds Gemma Scope 2 cross-layer transcoders (params_layer_{{i}}.safetensors, w_dec "
            "[F, L, d]); their encoders read hook_resid_mid, the stream before each MLP's norm (circuit-tracer loads "
            "them with feature_input_hook='hook_resid_mid'), and interp's cross-layer transcoders read each layer's "
            "MLP input, so reading them would give wrong features; use a CLT whose encoders read the MLP input "
            "(circuit-tracer's format with mlp hooks) or train one with train_transcoders(..., cross_layer=True)"
        )
    found = _circuit_tracer(root, dtype)
    if found is None:
        found = _collect(root, dtype)
    if not found:
        raise ResultFormatError(
            f"source={str(root)!r} holds no layer_0.safetensors (and no config.yaml listing "
            f"transcoders), no cfg.json: interp reads {list(FORMATS)}"
        )
    layers = sorted(found)
    if model is not None:
        L, d = model.arch.n_layers, model.arch.d_model
        extra = [l for l in layers if l >= L]
        if extra:
            raise ShapeError(
                f"source={str(root)!r} has transcoders for layers {extra}; model {model.name!r} has {L} layers"
            )
        for l in layers:
            if found[l].d_model != d:
                raise ShapeError(
                    f"source={str(root)!r}: the layer-{l} transcoder has d_model={found[l].d_model}; "
                    f"model {model.name!r} has d_model={d}"
                )
    return [replace(found[l], layer=l) for l in layers]  # each knows its layer (checked where it is used)


def _check_clt(clt: CrossLayerTranscoder, model: Optional[Model], root: Path) -> CrossLayerTranscoder:
    """With ``model``: one encoder per model layer (each knowing it), the model's d_model. The result knows its
    layers (0..L−1 where the files do not say)."""
    layers = clt.model_layers
    if model is not None:
        L, d = model.arch.n_layers, model.arch.d_model
        if layers != tuple(range(L)):
            raise ShapeError(
                f"source={str(root)!r} is a cross-layer transcoder of layers {list(layers)}; model "
                f"{model.name!r} has {L} layers (attribution graphs need an encoder at each, 0..{L - 1})"
            )
        if clt.d_model != d:
            raise ShapeError(
                f"source={str(root)!r}: the cross-layer transcoder has d_model={clt.d_model}; model "
                f"{model.name!r} has d_model={d}"
            )
    return replace(clt, layers=layers)


def load_saes(
    source: Union[str, os.PathLike], model: Optional[Model] = None, *, dtype: torch.dtype = torch.float32
) -> list[SAE]:
    """The residual-stream SAEs in ``source``, ordered by (layer, site): each an :class:`interp.features.SAE` that
    knows its ``layer`` and ``site`` (resid_pre / resid_mid / resid_post, from the library's hook name).

    ``source``: a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``; architectures "standard" (ReLU),
    "topk", "jumprelu", and "batchtopk" — as SAELens saves it for inference, JumpReLU with one global θ, read as
    activation "batchtopk", or its training checkpoint with ``topk_threshold``), a sparsify coder without
    ``transcode`` (hookpoint ``layers.{l}``: resid_post), a dictionary_learning BatchTopKSAE (``ae.pt`` +
    ``config.json``; ``submodule_name`` ``resid_post_layer_{l}``), or a folder of such folders. Each is read as its
    library's inference code computes it (``apply_b_dec_to_input``, ``rescale_acts_by_decoder_norm`` and sparsify's
    x − b_dec folded into the weights). With ``model``, each SAE's layer and d_model must fit it
    (:class:`interp.errors.ShapeError` naming the SAE). A transcoder found there raises
    :class:`interp.errors.UnsupportedOperationError` (read it with :func:`load_transcoders`).
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentError(f"source={source!r} must be a directory path (str or os.PathLike)")
    if model is not None and not isinstance(model, Model):
        raise ArgumentError(f"model={model!r} must be an interp Model (from interp.load_model) or None")
    root = Path(source)
    if not root.is_dir():
        raise ResultFormatError(f"source={str(source)!r} is not a directory of SAEs")
    dl = _has("ae.pt", "config.json")
    dirs = [root] if dl(root) else _cfg_dirs(root) + sorted(p for p in root.iterdir() if p.is_dir() and dl(p))
    if not dirs:
        raise ResultFormatError(
            f"source={str(root)!r} holds no cfg.json nor ae.pt: interp reads SAEs in SAELens's "
            "layout (cfg.json + sae_weights.safetensors), sparsify's (cfg.json + sae.safetensors) "
            "and dictionary_learning's (ae.pt + config.json), one folder or a folder of them"
        )
    out: list[SAE] = []
    for d in dirs:
        read = _detect(d).sae
        assert read is not None  # every format a folder is recognised by reads SAEs
        out.append(read(d, dtype))
    out.sort(key=lambda s: (s.layer, SAE_SITES.index(s.site)))
    for a, b in zip(out, out[1:]):
        if (a.layer, a.site) == (b.layer, b.site):
            raise ResultFormatError(f"source={str(root)!r} holds two SAEs for layer {a.layer} {a.site}")
    if model is not None:
        check_saes(model, out, f"source={str(root)!r}: SAE")
    return out
