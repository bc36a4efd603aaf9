"""A single attention head as a tensor product: h(x) = (A ⊗ W_O W_V) · x.

Elhage et al. 2021 ("A Mathematical Framework for Transformer Circuits", §"Attention heads as
tensor products"), docs/math.md §8. With the attention pattern A [pos, pos] frozen, a head is
linear in its input. In the row-major (transformer-lens) layout X [pos, d_model]:

    head_out = A (X W_V + 1 b_V) W_O  =  A X W_V W_O  +  1 (b_V W_O)          (rows of A sum to 1)

and with the paper's column-vector convention (W = (W_V W_O)ᵀ, X_c = Xᵀ, column-major vec):

    vec(head_out_c) = (A ⊗ W) vec(X_c) = vec(W X_c Aᵀ),

i.e. the Kronecker matrix ``torch.kron(A, W)`` [pos·d_model, pos·d_model] acting on
``X.flatten()`` (row-major flatten of [pos, d_model] == column-major vec of Xᵀ) gives
``head_out.flatten()``. ``.matrix()`` builds it only within a memory cap; ``.apply`` never does.

The weights are the head's raw weights (no norm folding): ``apply`` takes the head's actual input,
the normalised residual stream the attention reads (``blocks.{l}.ln1.hook_out`` for pre-norm
models, ``blocks.{l}.attn.hook_in`` for post-norm ones and those without pre-norms, OLMo 2); its output
is the head's write before a sandwich norm; under GQA query head h uses KV head h // (n_heads / n_kv_heads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._result import Result
from interp.circuits._common import (
    DEFAULT_MAX_BYTES,
    check_data,
    check_head,
    check_layer,
    check_max_bytes,
    check_model,
    refuse_materialise,
)
from interp.circuits._factored import Circuit
from interp.errors import ArgumentError, LabelError, ShapeError
from interp.labels import Head

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.models import Model

__all__ = ["HeadOperator", "head_operator"]

_ROW_SUM_TOL = 1e-4


def _check_pattern(pattern: Any) -> Tensor:
    if not isinstance(pattern, Tensor):
        raise ShapeError(
            f"pattern must be a torch.Tensor [pos, pos] or [batch, pos, pos], got {type(pattern).__name__}"
        )
    check_data(pattern, name="pattern")
    if not pattern.is_floating_point():
        raise ShapeError(f"pattern must be a float tensor of attention probabilities, got dtype {pattern.dtype}")
    if pattern.ndim not in (2, 3) or pattern.shape[-1] != pattern.shape[-2] or pattern.shape[-1] == 0:
        raise ShapeError(
            f"pattern has shape {tuple(pattern.shape)}; it must be square [pos, pos] or [batch, pos, pos] "
            "(query position × key position, one head)"
        )
    if not bool(torch.isfinite(pattern).all()):
        raise ArgumentError("pattern contains NaN or inf; it must be a row-stochastic attention pattern")
    lo = float(pattern.min())
    sums = pattern.double().sum(-1)
    worst = float((sums - 1).abs().max())
    # a bf16/fp16 model's own softmax rows sum to 1 only to that dtype's precision
    tol = max(_ROW_SUM_TOL, torch.finfo(pattern.dtype).eps)
    if lo < -tol or worst > tol * max(1, pattern.shape[-1] ** 0.5):
        raise ArgumentError(
            f"pattern is not row-stochastic (min entry {lo:.3g}, max |row sum − 1| = {worst:.3g}); each query row "
            "must be a probability distribution over key positions (e.g. blocks.{l}.attn.hook_pattern[b, h])"
        )
    return pattern


@dataclass(frozen=True, eq=False)
class HeadOperator(Result):
    """A ⊗ W_O W_V for one head and one (or a batch of) frozen attention pattern(s).

    ``pattern`` [pos, pos] or [batch, pos, pos]; ``W_V`` [d_model, d_head] (the KV head's),
    ``b_V`` [d_head], ``W_O`` [d_head, d_model]: raw weights (``fold_norms`` is False), acting on the
    head's normalised input.

    Contract (:class:`interp._result.Result`): rows are the operator's [d_model, d_model] blocks, one
    per (query q, key k) — block (q, k) of A ⊗ W is A[q, k]·W, what position k sends to position q —
    labelled ``k1→q3`` (``p0.k1→q3`` with a batch of patterns); ``op["k1→q3"]`` is that block (the
    matching slice of :meth:`matrix`, without forming it); ``to_dataframe()`` column ``block`` with the
    weight A[q, k] and the block's norm A[q, k]·‖W_OV‖_F, by which ``top`` ranks.
    """

    label_column: ClassVar[str] = "block"
    default_by: ClassVar[str] = "block_norm"

    layer: int
    head: int
    kv_head: int
    pattern: Float[Tensor, "*batch pos pos"] = field(repr=False)
    W_V: Float[Tensor, "d_model d_head"] = field(repr=False)
    b_V: Float[Tensor, " d_head"] = field(repr=False)
    W_O: Float[Tensor, "d_head d_model"] = field(repr=False)

    @property
    def label(self) -> str:
        return str(Head(self.layer, self.head))

    @property
    def fold_norms(self) -> bool:
        """Always False: the operator acts on the head's actual (normalised) input with raw weights."""
        return False

    @property
    def n_prompts(self) -> Optional[int]:
        """The pattern's batch size, or None for a single [pos, pos] pattern."""
        return int(self.pattern.shape[0]) if self.pattern.ndim == 3 else None

    def _block_label(self, b: Optional[int], q: int, k: int) -> str:
        return f"{'' if b is None else f'p{b}.'}k{k}→q{q}"

    def _blocks(self) -> list[tuple[Optional[int], int, int]]:
        """(prompt or None, query, key) of every block, prompt-major then query-major."""
        n = self.n_pos
        prompts: list[Optional[int]] = [None] if self.n_prompts is None else list(range(self.n_prompts))
        return [(b, q, k) for b in prompts for q in range(n) for k in range(n)]

    @property
    def labels(self) -> list[str]:
        """``k{key}→q{query}`` per block (prefixed ``p{prompt}.`` for a batch of patterns)."""
        return [self._block_label(b, q, k) for b, q, k in self._blocks()]

    def _index(self, label: Any) -> int:
        import re

        m = re.fullmatch(r"(?:p(\d+)\.)?k(\d+)→q(\d+)", label) if isinstance(label, str) else None
        n, nb = self.n_pos, self.n_prompts
        if (
            m is None
            or (m[1] is None) != (nb is None)
            or int(m[2]) >= n
            or int(m[3]) >= n
            or (nb is not None and int(m[1]) >= nb)
        ):
            ex = self._block_label(None if nb is None else nb - 1, n - 1, 0)
            raise LabelError(
                f"label={label!r} is not a block of this HeadOperator; blocks are labelled like "
                f"{ex!r} (key → query position{'' if nb is None else ', prompt p0…'})"
            )
        b = 0 if m[1] is None else int(m[1])
        return (b * n + int(m[3])) * n + int(m[2])

    def _ov_column(self) -> Tensor:
        """W = (W_V W_O)ᵀ [d_model, d_model], the column-convention OV map of every block."""
        return (self.W_V @ self.W_O).T

    def _row(self, index: int) -> Tensor:
        """Block (q, k) of A ⊗ W: A[q, k]·(W_V W_O)ᵀ, [d_model, d_model]."""
        A = self.pattern if self.pattern.ndim == 3 else self.pattern[None]
        W = self._ov_column()
        return A.reshape(-1)[index].to(W.dtype) * W

    def to_dataframe(self) -> pd.DataFrame:
        """One row per block: block label, prompt (0 for a single pattern), query_pos, key_pos, weight
        A[q, k] and block_norm = A[q, k]·‖W_V W_O‖_F."""
        blocks = self._blocks()
        A = (self.pattern if self.pattern.ndim == 3 else self.pattern[None]).detach().double().cpu().reshape(-1)
        w_norm = float(torch.linalg.matrix_norm(self._ov_column().double()))
        return pd.DataFrame(
            {
                "block": self.labels,
                "prompt": [0 if b is None else b for b, _, _ in blocks],
                "query_pos": [q for _, q, _ in blocks],
                "key_pos": [k for _, _, k in blocks],
                "weight": A.numpy(),
                "block_norm": (A * w_norm).numpy(),
            }
        )

    def plot(self, **options: Any) -> go.Figure:
        """The pattern A as a heatmap (one panel per prompt; :func:`interp.plots.attention_pattern_figure`)."""
        from interp.plots import attention_pattern_figure  # plots reads the result's attributes; imported on use

        A = self.pattern if self.pattern.ndim == 3 else self.pattern[None]
        names = [self.label] if self.n_prompts is None else [f"{self.label} prompt {b}" for b in range(A.shape[0])]
        return attention_pattern_figure(A, heads=names, **options)

    @property
    def n_pos(self) -> int:
        return int(self.pattern.shape[-1])

    @property
    def d_model(self) -> int:
        return int(self.W_O.shape[-1])

    @property
    def ov(self) -> Circuit:
        """W_V W_O as a factored circuit (raw weights)."""
        return Circuit(self.W_V, self.W_O, label=f"{self.label} OV", convention="raw weights")

    def apply(
        self, x: Float[Tensor, "*batch pos d_model"], *, value_bias: bool = True
    ) -> Float[Tensor, "*batch pos d_model"]:
        """The head's write A (x W_V + b_V) W_O for x [pos, d_model] or [batch, pos, d_model].

        ``value_bias=False`` gives the linear part A x W_V W_O only (what ``.matrix()`` represents).
        """
        if isinstance(x, Tensor):
            check_data(x, name="x")
        if (
            not isinstance(x, Tensor)
            or x.ndim not in (2, 3)
            or x.shape[-1] != self.d_model
            or x.shape[-2] != self.n_pos
        ):
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ShapeError(
                f"x has shape {shape}; it must be [pos, d_model] or [batch, pos, d_model] with pos={self.n_pos} "
                f"(the pattern's) and d_model={self.d_model}"
            )
        if self.pattern.ndim == 3 and x.ndim == 3 and x.shape[0] != self.pattern.shape[0]:
            raise ShapeError(f"x has batch {x.shape[0]} but the pattern has batch {self.pattern.shape[0]}")
        v = x.to(self.W_V.dtype) @ self.W_V  # [*batch, pos, d_head]
        if value_bias:
            v = v + self.b_V
        z = self.pattern.to(v.device, v.dtype) @ v  # [*batch, pos(query), d_head]
        return z @ self.W_O  # [*batch, pos, d_model]

    def matrix(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Float[Tensor, "*batch pos_d pos_d"]:
        """The Kronecker matrix A ⊗ (W_V W_O)ᵀ, [pos·d_model, pos·d_model] (batched like ``pattern``).

        Refused with MemoryCapError past ``max_bytes``; use ``.apply`` instead.
        """
        check_max_bytes(max_bytes)
        n = self.n_pos * self.d_model
        shape = (*self.pattern.shape[:-2], n, n)
        refuse_materialise(
            "the head operator A ⊗ W_O W_V",
            shape,
            self.W_O.dtype,
            max_bytes,
            "use HeadOperator.apply(x), which never forms it",
        )
        W = (self.W_V @ self.W_O).T.contiguous()  # column convention W_OV [d_model, d_model]
        A = self.pattern.to(W.dtype).contiguous()
        if A.ndim == 2:
            return torch.kron(A, W)
        return torch.stack([torch.kron(a, W) for a in A])

    def __repr__(self) -> str:
        return f"HeadOperator({self.label}, kv_head={self.kv_head}, pattern {tuple(self.pattern.shape)})"


def head_operator(model: Model, layer: int, head: int, pattern: Tensor) -> HeadOperator:
    """The head ``(layer, head)`` as A ⊗ W_O W_V for a frozen attention ``pattern``.

    ``pattern`` [pos, pos] or [batch, pos, pos] must be row-stochastic (e.g. the head's slice of
    ``blocks.{layer}.attn.hook_pattern``); ShapeError/ArgumentError otherwise.
    """
    check_model(model)
    layer, head = check_layer(model, layer), check_head(model, head)
    pattern = _check_pattern(pattern)
    w = model.weights
    g = model.arch.kv_head(head)
    return HeadOperator(
        layer=layer,
        head=head,
        kv_head=g,
        pattern=pattern.detach(),
        W_V=w.W_V[layer, g],
        b_V=w.b_V[layer, g],
        W_O=w.W_O[layer, head],
    )
