"""circuit-tracer's files (also interp's cache): per-layer transcoders ``layer_{i}.safetensors`` [+ config.yaml] and
cross-layer transcoders ``W_enc_{i}`` / ``W_dec_{i}.safetensors`` (read, and written by :func:`clt_files`); Gemma
Scope 2's cross-layer files recognised (the layouts: :mod:`interp.dictionaries._formats`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from interp.errors import ArgumentError, ResultFormatError, UnsupportedOperationError
from interp.dictionaries._transcoder import CrossLayerTranscoder, Transcoder
from interp.dictionaries._formats_io import _MLP_IN, _MLP_OUT, _tensors, _need, _make, _yaml, _reads

__all__ = ["clt_files", "read_clt"]


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
