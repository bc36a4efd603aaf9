"""Device and dtype checks, and float64-exact RMSNorms: shared by HF loading and the native format."""

from __future__ import annotations

import types
from typing import Any, Union

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


#: RMSNorm classes whose forward rounds through float32 (HF Llama; transformer-lens's native one).
_FP32_RMSNORMS = ("LlamaRMSNorm", "NativeRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm", "Phi3RMSNorm", "Qwen3RMSNorm",
                  "Olmo2RMSNorm", "MixtralRMSNorm", "OlmoeRMSNorm")
_FP32_GEMMA_RMSNORMS = ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm")  # γ = 1 + w


def _rmsnorm_in_input_dtype(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """RMSNorm.forward without its float32 round trip: γ ⊙ x / sqrt(mean(x²) + ε) in x's dtype."""
    eps = self.variance_epsilon if hasattr(self, "variance_epsilon") else self.eps
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + eps))


def _gemma_rmsnorm_in_input_dtype(self: Any, x: torch.Tensor) -> torch.Tensor:
    """Gemma's RMSNorm.forward without its float32 round trip: (1 + w) ⊙ x / sqrt(mean(x²) + ε)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def full_precision_norms(hf_model: Any) -> None:
    """In float64, make RMSNorms compute in float64.

    HF's LlamaRMSNorm (and Qwen 2's, Mistral's, Phi-3's, OLMo 2's, Gemma's; transformer-lens's NativeRMSNorm, used by the toys) upcasts to
    float32 and casts back, so a float64 model would round every norm output to float32
    precision (measured: closure 1e-7 instead of 1e-16 on a tiny Llama), defeating the point of
    dtype=torch.float64 (checking a result at high precision). In float64 the norm is computed
    in float64 instead; other dtypes keep the original numerics.
    """
    for mod in hf_model.modules():
        if type(mod).__name__ in _FP32_RMSNORMS:
            mod.forward = types.MethodType(_rmsnorm_in_input_dtype, mod)
        elif type(mod).__name__ in _FP32_GEMMA_RMSNORMS:
            mod.forward = types.MethodType(_gemma_rmsnorm_in_input_dtype, mod)
