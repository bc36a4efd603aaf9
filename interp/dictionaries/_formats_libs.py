"""SAELens's, sparsify's and dictionary_learning's folders: one dictionary each, a transcoder or a residual-stream
SAE as its config says (the layouts: :mod:`interp.dictionaries._formats`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import torch

from interp.errors import ResultFormatError, UnsupportedOperationError
from interp.dictionaries._sae import SAE
from interp.dictionaries._transcoder import Transcoder
from interp.dictionaries._formats_io import (
    _LAYER,
    _MLP_IN,
    _MLP_OUT,
    _SAELENS_TC,
    _SAELENS_SAE,
    _RESID,
    _DL_SITE,
    _SPARSIFY_RESID,
    _tensors,
    _need,
    _make,
    _hook_layer,
    _cfg,
)

__all__ = ["_dictionary_learning_sae", "_saelens_one", "_saelens_sae", "_sparsify_one", "_sparsify_sae"]


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
