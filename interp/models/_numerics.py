"""Device and dtype checks, and float64-exact RMSNorms: shared by HF loading and the native format."""

from __future__ import annotations

import types
from typing import Any, Callable, Union

import torch

from interp.errors import ArgumentError

__all__ = ["check_device", "check_dtype", "full_precision_norms"]

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def check_device(device: Union[str, torch.device]) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ArgumentError(f"device={device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:0', 'mps'") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ArgumentError(f"device={device!r} cannot be honoured: torch.cuda.is_available() is False; use 'cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ArgumentError(f"device={device!r} cannot be honoured: only {torch.cuda.device_count()} CUDA devices")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ArgumentError(f"device={device!r} cannot be honoured: MPS is not available; use 'cpu'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ArgumentError(f"device={device!r} is not supported; use 'cpu', 'cuda[:N]' or 'mps'")
    return dev


def check_dtype(dtype: Any) -> torch.dtype:
    if dtype not in _DTYPES:
        raise ArgumentError(f"dtype={dtype!r} is not supported; use one of {[str(d) for d in _DTYPES]}")
    return dtype


def _rmsnorm_in_input_dtype(offset: float) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    """RMSNorm.forward without its float32 round trip: (offset + w) ⊙ x / sqrt(mean(x²) + ε) in x's dtype
    (offset 1 for Gemma's norms, whose gain is 1 + w)."""

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        eps = self.variance_epsilon if hasattr(self, "variance_epsilon") else self.eps
        gain = self.weight if offset == 0.0 else offset + self.weight
        return gain * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    return forward


def full_precision_norms(hf_model: Any, gain_offset: float = 0.0) -> None:
    """In float64, make RMSNorms compute in float64: every module whose class is an ``…RMSNorm`` (the Hugging Face
    naming; transformer-lens's NativeRMSNorm of the toys too), its gain ``gain_offset`` + w (the family's
    :class:`~interp.models._families._spec.Capabilities`: 1 for Gemma's).

    HF's RMSNorms (Llama's and every family's copy of it, Gemma's) upcast to float32 and cast back, so a float64 model
    would round every norm output to float32 precision (measured: closure 1e-7 instead of 1e-16 on a tiny Llama),
    defeating the point of dtype=torch.float64 (checking a result at high precision). In float64 the norm is computed in
    float64 instead; other dtypes keep the original numerics.
    """
    forward = _rmsnorm_in_input_dtype(gain_offset)
    for mod in hf_model.modules():
        if type(mod).__name__.endswith("RMSNorm") and isinstance(getattr(mod, "weight", None), torch.Tensor):
            mod.forward = types.MethodType(forward, mod)
