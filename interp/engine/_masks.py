"""The attention masks of a forward, kept per key mask: which keys each query may attend (padding, causality,
a sliding window), built once per (mask, offset, length, window) — an explicit cache the engine owns."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from interp.engine._rotary import allowed_keys

__all__ = ["KeyMasks"]


class KeyMasks:
    """The masks a model's forward uses (``causal``: queries see no later key), each built once and kept while
    its key mask lives (keyed by the mask's address, shape and in-place version; :meth:`clear` forgets them)."""

    def __init__(self, causal: bool):
        self.causal = causal
        self._allowed: dict[tuple, Optional[Tensor]] = {}
        self._full: dict[tuple, tuple[Tensor, int]] = {}  # mask -> leading all-real columns (:meth:`_unpadded`)

    def clear(self) -> None:
        """Forget every kept mask (a later call may reuse an address)."""
        self._allowed.clear()
        self._full.clear()

    def allowed(self, mask: Tensor, prompt: Tensor, t0: int, T: int, window: int = 0) -> Optional[Tensor]:
        """The attention mask [R | 1, 1, T, N] (True = may attend), or None when nothing is masked.
        With a sliding ``window`` w a query at t sees keys t−w+1…t only (a patched row's keys too)."""
        N = t0 + T
        full = N <= self._unpadded(mask)
        key = (mask.data_ptr(), tuple(mask.shape), version(mask), t0, T, window)
        if key not in self._allowed:
            if len(self._allowed) > 8:  # a sweep uses one mask per window size
                self._allowed.clear()
            with torch.inference_mode(False):  # ordinary tensors: a gradient pass may save them for backward
                self._allowed[key] = self._mask(mask, t0, T, full, window)
        allowed = self._allowed[key]
        if allowed is None:
            return None
        return allowed[:, None] if full else allowed[prompt][:, None]

    def _unpadded(self, mask: Tensor) -> int:
        """How many leading positions of the key mask [P, n] are real tokens in every prompt: one read of the
        device per mask and call (not one per layer), kept with the mask itself so its address cannot be reused
        by another tensor while the count is kept; a mask changed in place is read again (its version)."""
        key = (mask.data_ptr(), tuple(mask.shape), version(mask))
        if key not in self._full:
            if len(self._full) > 8:
                self._full.clear()
                self._allowed.clear()  # their keys are addresses of the masks held here
            real = mask.bool().all(0).int()  # [n] 1 where every prompt has a real token
            self._full[key] = (mask, int(real.cumprod(0).sum()))
        return self._full[key][1]

    def _mask(self, mask: Tensor, t0: int, T: int, full: bool, window: int) -> Optional[Tensor]:
        """:meth:`allowed` before the rows are picked: [P | 1, T, N] (None: nothing masked)."""
        N = t0 + T
        allowed: Optional[Tensor] = (
            mask[:, None, :N].bool() if not full else torch.ones(1, 1, N, dtype=torch.bool, device=mask.device)
        )
        if self.causal or window:
            allowed = allowed & allowed_keys(T, N, causal=self.causal, window=window, device=mask.device)  # type: ignore[operator]
        elif full:
            allowed = None
        return allowed


def version(t: Tensor) -> int:
    """``t``'s in-place version counter (an inference tensor has none: −1)."""
    return -1 if t.is_inference() else t._version
