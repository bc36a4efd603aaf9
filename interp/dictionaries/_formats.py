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

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Union

import torch

from interp.errors import ArgumentError, ResultFormatError, ShapeError, UnsupportedOperationError
from interp.dictionaries._sae import SAE, SAE_SITES, check_saes
from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder
from interp.models import Model, default_cache_dir
from interp.dictionaries._formats_ct import _circuit_tracer, _is_clt, _gemma_scope_2_clt_files, read_clt, clt_files
from interp.dictionaries._formats_io import _MLP_IN, _reads
from interp.dictionaries._formats_libs import (
    _saelens_one,
    _saelens_sae,
    _sparsify_one,
    _sparsify_sae,
    _dictionary_learning_sae,
)

__all__ = ["FORMATS", "clt_files", "load_saes", "load_transcoders", "read_clt"]


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
