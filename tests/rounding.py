"""Comparing floats computed along two different paths (a saved trace vs the live one, a subset of
heads vs all heads, with and without a fix that should not touch them).

Two reduction orders round alike only by chance: which order a matmul uses depends on the CPU and on
the kernel torch picks (MKL's AVX-512 path, ``ATEN_CPU_CAPABILITY``, ``MKL_CBWR``), so such values
agree to rounding, not bit for bit. ``torch.equal`` is kept only where the same computation is
replayed on the same data (a round-tripped tensor, the same forward run twice).

The tolerance is derived from the dtype: ``ULPS`` units of its machine epsilon, relative to the
largest magnitude in the reference (float32: 1024·2⁻²³ ≈ 1.2e-4 of the scale; float64: ≈ 2.3e-13).
A real difference between the two paths (a wrong head, a lost term) is orders of magnitude larger.
"""

from __future__ import annotations

import torch

__all__ = ["ULPS", "assert_same_up_to_rounding", "rounding_tolerance"]

ULPS = 1024


def rounding_tolerance(ref: torch.Tensor) -> float:
    """ULPS · eps(dtype) · max|ref| (at least ULPS · eps for an all-zero reference)."""
    eps = torch.finfo(ref.dtype).eps
    scale = float(ref.detach().abs().nan_to_num(0.0).max()) if ref.numel() else 0.0
    return ULPS * eps * (scale if scale > 0.0 else 1.0)


def assert_same_up_to_rounding(actual: torch.Tensor, expected: torch.Tensor, msg: object = "") -> None:
    """Same shape, dtype and NaN pattern; values equal to :func:`rounding_tolerance` of ``expected``."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (msg, actual.shape, expected.shape)
    assert torch.equal(actual.isnan(), expected.isnan()), msg
    tol = rounding_tolerance(expected)
    diff = float((actual - expected).nan_to_num(0.0).abs().max()) if actual.numel() else 0.0
    assert diff <= tol, (
        f"{msg}: max |diff| {diff:.3g} > {tol:.3g} ({ULPS} ulps of {expected.dtype} at the tensor's scale)"
    )
