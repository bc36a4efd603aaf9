"""Rotating the residual stream's basis: a new, exactly equivalent model.

Elhage et al. 2021 §"Residual stream … no privileged basis",
docs/math.md §12. With x ↦ x R (row convention, R orthogonal), every weight that touches the
stream changes so that the computation is the same:

    writes:  W_E → W_E R,  W_pos → W_pos R,  W_O → W_O R,  W_out → W_out R,  b_O → b_O R,  b_out → b_out R
    reads:   W → Rᵀ diag(γ) W,   b → b + β W      (γ, β: the gain and bias of the norm in front)
    norms:   γ → 1, β → 0;   unembedding: W_U → Rᵀ diag(γ_f) W_U, b_U → b_U + β_f W_U

Algorithm:

1. Check R: [d_model, d_model], finite, RᵀR = I (to ``atol``).
2. Check the norm. RMSNorm(x R) = x R / rms(x R) and rms(x R) = rms(x): any orthogonal R works once
   the gains are folded (a per-coordinate gain does not commute with R). LayerNorm also centres,
   x ↦ x P with P = I − 11ᵀ/d; (x R) P = (x P) R for all x iff R maps the all-ones vector to
   itself, R·1 = 1 — otherwise the rotated model centres along the wrong direction, so such R
   are refused. Post-norm models (BERT) are refused: their norm's gain multiplies the residual
   stream itself, and diag(γ) R ≠ R diag(γ).
3. Fold the gains and biases, rotate (float64), and build a fresh Hugging Face module of the same
   class (tied embeddings untied: W_U ≠ W_Eᵀ after folding γ_f; an unembedding bias is added when
   β_f ≠ 0) from the new weights, wrapped in a new TransformerBridge. The returned Model carries
   these weights, so its bridge's logits equal the original model's (≤1e-4 in float32).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any, Optional

import torch
from torch import Tensor

from interp._validate import check_int, check_int_min, check_positive_float
from interp.circuits._common import check_model, check_data
from interp.errors import ArgumentError, ShapeError, UnsupportedOperationError
from interp.models import Model, Weights, model_from_hf_unchecked
from interp.models.internal import hf_state_from_weights, hf_writable, is_streamed

__all__ = ["rotate_residual", "random_rotation"]

log = logging.getLogger(__name__)


def random_rotation(
    d_model: int, *, fix_ones: bool = False, seed: int = 0, dtype: torch.dtype = torch.float64
) -> Tensor:
    """A random orthogonal [d_model, d_model] matrix (Haar, seeded); ``fix_ones=True`` makes R·1 = 1
    (a rotation of the hyperplane orthogonal to 1, as LayerNorm models need)."""
    check_int_min("d_model", d_model, 2)
    check_int("seed", seed)
    g = torch.Generator().manual_seed(seed)
    n = d_model - 1 if fix_ones else d_model
    Q, Rr = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64, device="cpu"))
    Q = Q * torch.sign(torch.diagonal(Rr))  # Haar measure
    if fix_ones:
        # Householder H swaps u = 1/sqrt(d) and e_1; R = H (1 ⊕ Q) H fixes u and rotates its complement
        u = torch.full((d_model,), d_model**-0.5, dtype=torch.float64, device="cpu")
        v = u.clone()
        v[0] -= 1.0
        H = torch.eye(d_model, dtype=torch.float64, device="cpu") - 2 * torch.outer(v, v) / (v @ v)
        Q = H @ torch.block_diag(torch.ones(1, 1, dtype=torch.float64, device="cpu"), Q) @ H
    return Q.to(dtype)


def _check_R(model: Model, R: Any, atol: float) -> Tensor:
    d = model.arch.d_model
    if not isinstance(R, Tensor):
        raise ShapeError(f"R must be a torch.Tensor [d_model, d_model] = [{d}, {d}], got {type(R).__name__}")
    check_data(R, name="R")
    if R.shape != (d, d):
        raise ShapeError(f"R has shape {tuple(R.shape)}; it must be [d_model, d_model] = [{d}, {d}]")
    if not R.is_floating_point() or not bool(torch.isfinite(R).all()):
        raise ArgumentError("R must be a finite float matrix")
    R64 = R.detach().to("cpu", torch.float64)
    err = float((R64.T @ R64 - torch.eye(d, dtype=torch.float64, device="cpu")).abs().max())
    if err > atol:
        raise ArgumentError(
            f"R is not orthogonal: max |RᵀR − I| = {err:.3g} > atol={atol}; a basis rotation must preserve "
            "lengths (use e.g. torch.linalg.qr(M).Q or interp.circuits.random_rotation)"
        )
    return R64


def _check_model(model: Any, R64: Tensor, atol: float) -> None:
    a = model.arch
    if model.block.normed_stream:
        raise UnsupportedOperationError(
            f"rotate_residual supports pre-norm models; model {model.name!r} is post-norm: the norm's gain "
            "multiplies the residual stream itself, and diag(γ) R ≠ R diag(γ), so no rotated model is exactly "
            "equivalent"
        )
    if not hf_writable(a):
        raise UnsupportedOperationError(
            f"rotate_residual builds a Hugging Face module from the rotated weights; model {model.name!r} "
            f"(family {a.family!r}) has no TL -> Hugging Face weight map"
        )
    if a.norm == "layernorm":
        ones = torch.ones(a.d_model, dtype=torch.float64, device=R64.device)
        dev = float((R64 @ ones - ones).abs().max())
        if dev > atol * a.d_model**0.5:
            raise ArgumentError(
                f"R·1 ≠ 1 (max deviation {dev:.3g}) but model {model.name!r} uses LayerNorm: LayerNorm subtracts "
                "each vector's mean, i.e. projects out the all-ones direction 1, and that centring commutes with "
                "the rotation only if R maps 1 to itself (R·1 = 1). Use an R that fixes 1, e.g. "
                "interp.circuits.random_rotation(d_model, fix_ones=True); RMSNorm models accept any orthogonal R"
            )


def rotated_weights(model: Model, R64: Tensor) -> Weights:
    """The rotated, gain-folded Weights (float64 maths, cast back to the model's dtype)."""
    w = model.weights.to(dtype=torch.float64, device="cpu")
    Rt = R64.T
    ln = model.arch.norm == "layernorm"

    def read(W: Tensor, b: Optional[Tensor], gamma: Tensor, beta: Tensor, eq: str) -> tuple[Tensor, Optional[Tensor]]:
        # W [..., d, k] with gamma [..., d]: Rᵀ diag(γ) W, and b + β W
        Wf = Rt @ (gamma[..., :, None] * W)
        if b is None:
            return Wf, None
        return Wf, b + (torch.einsum(eq, beta, W) if ln else 0)

    g1, b1 = w.ln1_w[:, None, :], w.ln1_b
    W_Q, b_Q = read(w.W_Q, w.b_Q, g1, b1, "ld,lhdk->lhk")
    W_K, b_K = read(w.W_K, w.b_K, g1, b1, "ld,lhdk->lhk")
    W_V, b_V = read(w.W_V, w.b_V, g1, b1, "ld,lhdk->lhk")
    W_in, b_in = read(w.W_in, w.b_in, w.ln2_w, w.ln2_b, "ld,ldm->lm")
    W_gate, b_gate = (None, w.b_gate) if w.W_gate is None else read(w.W_gate, w.b_gate, w.ln2_w, w.ln2_b, "ld,ldm->lm")
    lnf_w, W_U0 = w.lnf_w, w.W_U
    if lnf_w is None or W_U0 is None:
        raise UnsupportedOperationError(
            f"rotate_residual needs a final norm and an unembedding; model "
            f"{model.name!r} lacks {'the final norm' if lnf_w is None else 'W_U'}"
        )
    lnf_b = w.lnf_b if w.lnf_b is not None else torch.zeros_like(lnf_w)
    b_U0 = w.b_U if w.b_U is not None else torch.zeros(W_U0.shape[1], dtype=W_U0.dtype, device=W_U0.device)
    W_U = Rt @ (lnf_w[:, None] * W_U0)
    b_U = b_U0 + (lnf_b @ W_U0 if ln else 0)
    ones, zeros = torch.ones_like(w.ln1_w), torch.zeros_like(w.ln1_b)
    new = w.with_updates(
        W_E=w.W_E @ R64,
        W_pos=None if w.W_pos is None else w.W_pos @ R64,
        W_Q=W_Q,
        W_K=W_K,
        W_V=W_V,
        b_Q=b_Q,
        b_K=b_K,
        b_V=b_V,
        W_O=w.W_O @ R64,
        b_O=w.b_O @ R64,
        W_in=W_in,
        b_in=b_in,
        W_gate=W_gate,
        b_gate=b_gate,
        W_out=w.W_out @ R64,
        b_out=w.b_out @ R64,
        ln1_w=ones,
        ln1_b=zeros,
        ln2_w=ones.clone(),
        ln2_b=zeros.clone(),
        lnf_w=torch.ones_like(lnf_w),
        lnf_b=torch.zeros_like(lnf_b),
        W_U=W_U,
        b_U=b_U,
    )
    return new.to(device=model.device, dtype=model.dtype)


def _build_hf(model: Model, w: Any) -> Any:
    """A fresh HF module of the model's class holding the rotated weights ``w``."""
    hf_old = model.bridge.original_model
    config = copy.deepcopy(hf_old.config)
    config.tie_word_embeddings = False  # W_U = Rᵀ diag(γ_f) W_Eᵀ... no longer W_E'ᵀ
    hf = type(hf_old)(config).to(dtype=model.dtype)
    values, head_name = hf_state_from_weights(w, model.arch)
    sd = hf.state_dict()
    params = dict(hf.named_parameters())
    if "lm_head.weight" not in params and "embed_out.weight" in params:
        values["embed_out.weight"], head_name = values.pop("lm_head.weight"), "embed_out"
    for k, v in values.items():
        if k in params:
            sd[k] = v.detach().contiguous().to(sd[k].dtype)
        elif bool((v != 0).any()):
            raise UnsupportedOperationError(
                f"the rotated model needs a nonzero {k} that this HF model class has no parameter for"
            )
    missing = sorted(set(params) - set(values))
    if missing:
        raise UnsupportedOperationError(
            f"rotate_residual cannot write HF parameters {missing[:5]} of {type(hf_old).__name__}"
        )
    hf.load_state_dict(sd, strict=True)
    log.debug("rotate_residual: built a fresh %s with untied embeddings (W_U = Rᵀ diag(γ_f) W_U)", type(hf).__name__)
    if bool((w.b_U != 0).any()):
        old = getattr(hf, head_name)
        if old.bias is None:  # fold β_f W_U into an unembedding bias the HF class lacks
            new = torch.nn.Linear(old.in_features, old.out_features, bias=True, dtype=old.weight.dtype)
            with torch.no_grad():
                new.weight.copy_(old.weight)
                new.bias.copy_(w.b_U.to(old.weight.dtype))
            setattr(hf, head_name, new)
            log.debug("rotate_residual: %s gets a bias β_f W_U (the final LayerNorm's bias, folded)", head_name)
    return hf.eval()


def rotate_residual(model: Model, R: Tensor, *, atol: float = 1e-5, name: Optional[str] = None) -> Model:
    """A new Model whose residual stream is the original's times R (x ↦ x R), computing the same logits.

    RMSNorm models accept any orthogonal R; LayerNorm models only R with R·1 = 1 (ArgumentError,
    explaining why, otherwise); post-norm models are refused (UnsupportedOperationError). The new
    Model's weights have every norm gain folded (γ = 1, β = 0) and its bridge runs a fresh HF
    module holding them. Composition and copying scores (fold_norms=True) and DLA are unchanged.
    """
    check_model(model)
    check_positive_float("atol", atol)
    if is_streamed(model.weights):
        raise UnsupportedOperationError(
            f"rotate_residual: model {model.name!r} is placed by accelerate (device_map/offload) and read one block "
            "at a time, while a rotated model is a new model holding every rotated weight in memory; load it without "
            "device_map to rotate it"
        )
    R64 = _check_R(model, R, float(atol))
    _check_model(model, R64, float(atol))
    new_name = name or f"{model.name}-rotated"
    # ordinary tensors even under a caller's inference_mode(): the new Model outlives it, and a later gradient
    # analysis (attribution patching, EAP) saves its weights for backward
    with torch.inference_mode(False), torch.no_grad():
        w = rotated_weights(model, R64)
        hf = _build_hf(model, w)
        rotated = model_from_hf_unchecked(
            hf,
            model.tokenizer,
            name=new_name,
            device=model.device,
            dtype=model.dtype,
            has_unembed=model.arch.has_unembed,
            source=f"rotate_residual({model.name})",
        )
    return dataclasses.replace(rotated, weights=w, arch=dataclasses.replace(model.arch, name=new_name))
