"""Frozen per-layer weights in TransformerLens's layout, and the pieces every family's reader shares (each
family's own reader and writer is its file under ``interp/models/_families/``).

Row-vector convention (TL): a head's query is q = x W_Q + b_Q, its write is z W_O, so

    W_Q [n_layers, n_heads, d_model, d_head]     W_K, W_V [n_layers, n_kv_heads, d_model, d_head]
    W_O [n_layers, n_heads, d_head, d_model]     W_in [n_layers, d_model, d_mlp]
    W_out [n_layers, d_mlp, d_model]             W_U [d_model, d_vocab]

K and V keep their ``n_kv_heads`` (GQA is not expanded: query head h reads KV head
``arch.kv_head(h)``). Norm gains/biases are kept unfolded: these are the model's own weights,
not TransformerLens's folded "compatibility mode" ones. Tensors are detached copies, so
nothing here holds the model or its autograd graph.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any, Iterator, Optional

import einops
import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import UnsupportedOperationError
from interp.models._arch import ArchInfo

__all__ = [
    "Weights",
    "collect_layers",
    "detached",
    "embed_scale_of",
    "only_layers",
    "split_heads_in",
    "split_heads_out",
    "stack_layers",
]


@dataclass(frozen=True)
class Weights:
    """Stacked weights of one model (see module docstring for shapes). Optional ones are None."""

    W_E: Float[Tensor, "d_vocab d_model"]
    W_pos: Optional[Float[Tensor, "n_ctx d_model"]]
    W_type: Optional[Float[Tensor, "n_types d_model"]]
    W_Q: Float[Tensor, "n_layers n_heads d_model d_head"]
    W_K: Float[Tensor, "n_layers n_kv_heads d_model d_head"]
    W_V: Float[Tensor, "n_layers n_kv_heads d_model d_head"]
    W_O: Float[Tensor, "n_layers n_heads d_head d_model"]
    b_Q: Float[Tensor, "n_layers n_heads d_head"]
    b_K: Float[Tensor, "n_layers n_kv_heads d_head"]
    b_V: Float[Tensor, "n_layers n_kv_heads d_head"]
    b_O: Float[Tensor, "n_layers d_model"]
    W_in: Float[Tensor, "n_layers d_model d_mlp"]
    W_gate: Optional[Float[Tensor, "n_layers d_model d_mlp"]]
    b_in: Float[Tensor, "n_layers d_mlp"]
    W_out: Float[Tensor, "n_layers d_mlp d_model"]
    b_out: Float[Tensor, "n_layers d_model"]
    ln1_w: Float[Tensor, "n_layers d_model"]
    ln1_b: Float[Tensor, "n_layers d_model"]
    ln2_w: Float[Tensor, "n_layers d_model"]
    ln2_b: Float[Tensor, "n_layers d_model"]
    lnf_w: Optional[Float[Tensor, " d_model"]]
    lnf_b: Optional[Float[Tensor, " d_model"]]
    W_U: Optional[Float[Tensor, "d_model d_vocab"]]
    b_U: Optional[Float[Tensor, " d_vocab"]]
    ln_emb_w: Optional[Float[Tensor, " d_model"]] = None  # post-norm encoders' embedding norm
    ln_emb_b: Optional[Float[Tensor, " d_model"]] = None
    b_gate: Optional[Float[Tensor, "n_layers d_mlp"]] = None  # gated MLPs (zeros unless the gate has a bias)
    ln1_post_w: Optional[Float[Tensor, "n_layers d_model"]] = None  # sandwich norms: on the attention output
    ln2_post_w: Optional[Float[Tensor, "n_layers d_model"]] = None  # and on the MLP output (Gemma 2/3)
    # QK-norm gains: [n_layers, d_head] (scope "head": one gain shared by the heads) or [n_layers, n_heads,
    # d_head] / [n_layers, n_kv_heads, d_head] (scope "projection": the projection-wide gain split per head)
    q_norm_w: Optional[Float[Tensor, "n_layers *heads d_head"]] = None
    k_norm_w: Optional[Float[Tensor, "n_layers *heads d_head"]] = None
    # a mixture-of-experts MLP (Mixtral): the router and each expert's gated MLP (the dense W_in, W_gate, W_out
    # are then empty, d_mlp wide 0)
    W_router: Optional[Float[Tensor, "n_layers d_model n_experts"]] = None
    W_in_e: Optional[Float[Tensor, "n_layers n_experts d_model d_mlp"]] = None
    W_gate_e: Optional[Float[Tensor, "n_layers n_experts d_model d_mlp"]] = None
    W_out_e: Optional[Float[Tensor, "n_layers n_experts d_mlp d_model"]] = None

    def to(self, device: Any = None, dtype: Any = None) -> "Weights":
        """A copy with every tensor moved/cast."""
        moved: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            moved[f.name] = None if v is None else v.to(device=device, dtype=dtype)
        return Weights(**moved)

    def need(self, name: str) -> Tensor:
        """The weight ``name`` (e.g. ``"W_U"``, ``"lnf_w"``), or an UnsupportedOperationError naming it
        when this model has none (an encoder has no W_U, a norm-free model no final-norm gain)."""
        v = getattr(self, name)
        if v is None:
            raise UnsupportedOperationError(f"this model has no weights.{name}, which this operation needs")
        return v

    def with_updates(self, **updates: Any) -> "Weights":
        """A copy with some fields replaced (used by basis rotation)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(updates)
        return Weights(**values)


def detached(x: Tensor) -> Tensor:
    """A copy of ``x`` that shares neither storage nor autograd graph with the model."""
    return x.detach().clone()


def split_heads_in(w: Tensor, n: int) -> Tensor:
    """HF Linear weight [n*d_head, d_model] (y = x Wᵀ) -> TL [n, d_model, d_head]."""
    return einops.rearrange(w, "(n h) m -> n m h", n=n)


def split_heads_out(w: Tensor, n: int) -> Tensor:
    """HF Linear weight [d_model, n*d_head] -> TL W_O [n, d_head, d_model]."""
    return einops.rearrange(w, "m (n h) -> n h m", n=n)


def embed_scale_of(hf_model: torch.nn.Module, arch: ArchInfo) -> Tensor:
    """The factor the embedding module multiplies by: its ``embed_scale`` buffer where it keeps one (Gemma
    stores √d_model as a float32 tensor, so a float64 model scales by the float32-rounded value), else
    ``arch.embed_scale``."""
    for m in hf_model.modules():
        scale = getattr(m, "embed_scale", None)
        if isinstance(scale, Tensor):
            return scale.detach()
    return torch.tensor(arch.embed_scale)


def stack_layers(views: list[Tensor]) -> Tensor:
    """A new contiguous [n_layers, ...] tensor holding a copy of each per-layer view (one streamed block,
    read under :func:`only_layers`, is its view as it is: the engines only read it).

    Each layer is copied once, straight into place (no clone-then-stack): the (often
    transposed) views are rearranged by the copy itself. This is most of a cached load's
    weight-reading time on a 30-layer model, so it matters.
    """
    first = views[0]
    if len(views) == 1 and _ONLY_LAYERS.get() is not None:  # one block of a streamed model: read-only, no copy
        return first.unsqueeze(0)
    out = torch.empty((len(views), *first.shape), dtype=first.dtype, device=first.device)
    if out.device.type == "cpu":
        # numpy's copy is single-threaded: torch's intra-op-parallel copy of many small strided
        # views costs a thread synchronisation per layer, which on a busy 2-core machine made
        # this step ~10x slower (measured: 4.5 s -> 0.6 s for smollm2's 30 layers).
        dst = _as_numpy(out)
        for i, v in enumerate(views):
            np.copyto(dst[i], _as_numpy(v))
    else:
        for i, v in enumerate(views):
            out[i].copy_(v)
    return out


def _as_numpy(t: Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor (bfloat16, which numpy lacks, as its int16 bit pattern)."""
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


#: The layers a reader collects: all of them, unless :func:`only_layers` narrows it (a streamed model reads
#: one layer at a time, through the same readers).
_ONLY_LAYERS: ContextVar[Optional[tuple[int, ...]]] = ContextVar("interp_only_layers", default=None)


@contextmanager
def only_layers(*layers: int) -> Iterator[None]:
    """Within this context the family readers stack only ``layers`` (the others are never read)."""
    token = _ONLY_LAYERS.set(tuple(layers))
    try:
        yield
    finally:
        _ONLY_LAYERS.reset(token)


def collect_layers(n_layers: int, fn) -> dict[str, list[Tensor]]:
    """``fn(layer)``'s tensors for every layer (or those :func:`only_layers` names), gathered by name."""
    out: dict[str, list[Tensor]] = {}
    only = _ONLY_LAYERS.get()
    for layer in range(n_layers) if only is None else only:
        for k, v in fn(layer).items():
            out.setdefault(k, []).append(v)
    return out
