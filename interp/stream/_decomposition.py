"""Decomposition: a tensor at one point of the residual stream, split into its sources.

    total[b, p] = Σ_i contributions[i, b, p]        (exact; the gap is ``closure_error``)

Padding positions (attention_mask == 0) are zeroed in every summary so they never leak
into tables or plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp._io import SaveLoadMixin
from interp.errors import ArgumentError

__all__ = ["Decomposition"]


@dataclass(frozen=True, eq=False)
class Decomposition(SaveLoadMixin):
    """Exact split of the tensor at ``point`` into per-write terms.

    ``contributions`` [n_terms, batch, pos, k] with k = d_model (full) or the number of
    projection directions; ``total`` [batch, pos, k] is the model's own tensor there;
    ``closure_error`` = max |Σ contributions − total| over real positions, and
    ``relative_error`` = closure_error / max |total|.
    """

    point: str
    labels: list[str]
    contributions: Float[Tensor, "n_terms batch pos k"] = field(repr=False)
    total: Float[Tensor, "batch pos k"] = field(repr=False)
    attention_mask: Tensor = field(repr=False)
    closure_error: float
    relative_error: float
    str_tokens: Optional[list[list[str]]] = field(default=None, repr=False)
    directions: Optional[Tensor] = field(default=None, repr=False)

    @classmethod
    def build(cls, *, point, labels, contributions, total, attention_mask, str_tokens=None, directions=None):
        mask = attention_mask.bool()[..., None]
        gap = ((contributions.sum(0) - total) * mask).abs()
        err = float(gap.max()) if gap.numel() else 0.0
        scale = float((total * mask).abs().max()) if total.numel() else 0.0
        return cls(
            point=point, labels=list(labels), contributions=contributions, total=total,
            attention_mask=attention_mask, closure_error=err,
            relative_error=err / scale if scale > 0 else err, str_tokens=str_tokens, directions=directions,
        )

    @property
    def is_projected(self) -> bool:
        return self.directions is not None

    def __getitem__(self, label: str) -> Tensor:
        """The contribution of one term, [batch, pos, k]."""
        try:
            return self.contributions[self.labels.index(label)]
        except ValueError:
            import difflib

            from interp.errors import LabelError

            near = difflib.get_close_matches(str(label), self.labels, n=5, cutoff=0.4)
            hint = f"nearest: {near}; " if near else ""
            raise LabelError(
                f"label={label!r} is not a term of the decomposition of {self.point!r}; {hint}"
                f"its {len(self.labels)} terms run {self.labels[0]!r} … {self.labels[-1]!r} (see .labels)"
            ) from None

    def _at(self, batch: int, pos: int) -> tuple[Tensor, Tensor]:
        b, p = self.total.shape[:2]
        for name, v in (("batch", batch), ("pos", pos)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ArgumentError(f"{name}={v!r} must be an int")
        if not -b <= batch < b:
            raise ArgumentError(f"batch={batch} is out of range for {b} prompts")
        if not -p <= pos < p:
            raise ArgumentError(f"pos={pos} is out of range for {p} positions")
        if not bool(self.attention_mask[batch, pos]):
            raise ArgumentError(f"pos={pos} of prompt {batch} is padding")
        return self.contributions[:, batch, pos], self.total[batch, pos]

    def to_dataframe(self, *, batch: int = 0, pos: int = -1) -> pd.DataFrame:
        """One row per term at (batch, pos): its norm, its projection on the total, its share.

        ``projection`` = term · total / |total| (sums to |total| over terms).
        """
        c, t = self._at(batch, pos)
        c, t = c.double(), t.double()
        tnorm = t.norm().clamp_min(1e-30)
        proj = (c @ t) / tnorm
        return pd.DataFrame({
            "term": self.labels,
            "norm": c.norm(dim=-1).cpu().numpy(),
            "projection": proj.cpu().numpy(),
            "share": (proj / tnorm).cpu().numpy(),
        })

    def top(self, k: int = 10, *, batch: int = 0, pos: int = -1) -> pd.DataFrame:
        """The ``k`` terms with the largest |projection| on the total at (batch, pos)."""
        if not isinstance(k, int) or k < 1:
            raise ArgumentError(f"k={k!r} must be a positive int")
        df = self.to_dataframe(batch=batch, pos=pos)
        return df.reindex(df["projection"].abs().sort_values(ascending=False).index).head(k).reset_index(drop=True)

    def plot(self, *, batch: int = 0, pos: int = -1, k: int = 20):
        """Bar chart of the top-k terms' projections on the total (a plotly Figure)."""
        from interp.plots import decomposition_figure

        return decomposition_figure(self, batch=batch, pos=pos, k=k)

    def __repr__(self) -> str:
        return (f"Decomposition({self.point!r}: {len(self.labels)} terms, shape "
                f"{tuple(self.contributions.shape)}, closure_error={self.closure_error:.2e}, "
                f"relative_error={self.relative_error:.2e})")
