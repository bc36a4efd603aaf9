"""Decomposition: a tensor at one point of the residual stream, split into its sources.

    total[b, p] = Σ_i contributions[i, b, p]        (exact; the gap is ``closure_error``)

Padding positions (attention_mask == 0) are zeroed in every summary so they never leak
into tables or plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence, Union

import pandas as pd
from jaxtyping import Float
from torch import Tensor

from interp._result import Result, prompt_alias
from interp._validate import check_index
from interp.errors import ArgumentError, LabelError

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["Decomposition"]


@dataclass(frozen=True, eq=False)
class Decomposition(Result):
    """Exact split of the tensor at ``point`` into per-write terms.

    ``contributions`` [n_terms, batch, pos, k] with k = d_model (full) or the number of
    projection directions; ``total`` [batch, pos, k] is the model's own tensor there;
    ``closure_error`` = max |Σ contributions − total| over real positions, and
    ``relative_error`` = closure_error / max |total|.

    Contract (:class:`interp._result.Result`): ``d["L3.H5"]`` is that term's contribution
    [batch, pos, k]; ``to_dataframe(prompt=, pos=)`` has one row per term (column ``term``) at one
    token; ``top`` ranks by |``projection``| on the total there.
    """

    label_column: ClassVar[str] = "term"
    default_by: ClassVar[str] = "projection"

    point: str
    labels: list[str]
    contributions: Float[Tensor, "n_terms batch pos k"] = field(repr=False)
    total: Float[Tensor, "batch pos k"] = field(repr=False)
    attention_mask: Tensor = field(repr=False)
    closure_error: float
    relative_error: float
    str_tokens: Optional[list[list[str]]] = field(default=None, repr=False)
    directions: Optional[Tensor] = field(default=None, repr=False)
    default_pos: Union[int, str] = -1

    @classmethod
    def build(
        cls,
        *,
        point: str,
        labels: Sequence[str],
        contributions: Tensor,
        total: Tensor,
        attention_mask: Tensor,
        str_tokens: Optional[list[list[str]]] = None,
        directions: Optional[Tensor] = None,
        default_pos: Union[int, str] = -1,
    ) -> "Decomposition":
        mask = attention_mask.bool()[..., None]
        gap = ((contributions.sum(0) - total) * mask).abs()
        err = float(gap.max()) if gap.numel() else 0.0
        scale = float((total * mask).abs().max()) if total.numel() else 0.0
        return cls(
            point=point,
            labels=list(labels),
            contributions=contributions,
            total=total,
            attention_mask=attention_mask,
            closure_error=err,
            relative_error=err / scale if scale > 0 else err,
            str_tokens=str_tokens,
            directions=directions,
            default_pos=default_pos,
        )

    @property
    def is_projected(self) -> bool:
        return self.directions is not None

    def _row(self, index: int) -> Tensor:
        """The contribution of one term, [batch, pos, k]."""
        return self.contributions[index]

    def _index(self, label: Any) -> int:
        try:
            return self.labels.index(label if isinstance(label, str) else str(label))
        except ValueError:
            import difflib

            near = difflib.get_close_matches(str(label), self.labels, n=5, cutoff=0.4)
            hint = f"nearest: {near}; " if near else ""
            raise LabelError(
                f"label={label!r} is not a term of the decomposition of {self.point!r}; {hint}"
                f"its {len(self.labels)} terms run {self.labels[0]!r} … {self.labels[-1]!r} (see .labels)"
            ) from None

    def _at(self, prompt: Any, pos: Any, *, name: str = "prompt") -> tuple[Tensor, Tensor]:
        """(contributions [n_terms, k], total [k]) at one real token, or averaged over the prompt's real
        tokens for ``pos="mean"`` (exact: the mean of sums is the sum of means); ``pos=None`` is
        ``default_pos``. ``name``: how the caller spelt the prompt argument."""
        b, p = self.total.shape[:2]
        bi = check_index(name, prompt, b, what="prompts")
        pos = self.default_pos if pos is None else pos
        if pos == "mean":
            real = self.attention_mask[bi].bool()
            return self.contributions[:, bi, real].mean(dim=1), self.total[bi, real].mean(dim=0)
        if isinstance(pos, str):
            raise ArgumentError(f"pos={pos!r} must be an int position, 'mean' (the mean over real tokens) or None")
        pi = check_index("pos", pos, p, what="positions")
        if not bool(self.attention_mask[bi, pi]):
            raise ArgumentError(f"pos={pos} of prompt {prompt} is padding")
        return self.contributions[:, bi, pi], self.total[bi, pi]

    def to_dataframe(
        self, *, prompt: Optional[int] = None, pos: Union[int, str, None] = None, batch: Optional[int] = None
    ) -> pd.DataFrame:
        """One row per term at (prompt, pos): its norm, its projection on the total, its share.

        Defaults: prompt 0; ``pos=None`` is ``default_pos`` — the last real token for a causal model,
        ``"mean"`` (the mean-pooled sentence embedding, as MiniLM pools) for an encoder, never its
        trailing [SEP] by accident. ``batch=`` is the deprecated spelling of ``prompt=``.

        ``projection`` = term · total / |total| (sums to |total| over terms).
        """
        row, name = prompt_alias(prompt, batch, owner="Decomposition.to_dataframe")
        c, t = self._at(row, pos, name=name)
        c, t = c.double(), t.double()
        tnorm = t.norm().clamp_min(1e-30)
        proj = (c @ t) / tnorm
        return pd.DataFrame(
            {
                "term": self.labels,
                "norm": c.norm(dim=-1).cpu().numpy(),
                "projection": proj.cpu().numpy(),
                "share": (proj / tnorm).cpu().numpy(),
            }
        )

    def top(
        self,
        k: int = 10,
        *,
        by: Optional[str] = None,
        absolute: Optional[bool] = None,
        prompt: Optional[int] = None,
        pos: Union[int, str, None] = None,
        batch: Optional[int] = None,
    ) -> pd.DataFrame:
        """The ``k`` terms with the largest |projection| on the total at (prompt, pos) (or by ``by``);
        ``batch=`` is the deprecated spelling of ``prompt=``."""
        row, name = prompt_alias(prompt, batch, owner="Decomposition.top")
        self._at(row, pos, name=name)  # bad rows are named as the caller spelt them
        return self._rank(self.to_dataframe(prompt=row, pos=pos), k, by=by, absolute=absolute)

    def plot(self, *, prompt: int = 0, pos: Union[int, str, None] = None, k: int = 20) -> go.Figure:
        """Bar chart of the top-k terms' projections on the total at ``pos`` (``"mean"``: over the
        prompt's real tokens; None: ``default_pos``) — a plotly Figure."""
        from interp.plots import decomposition_figure

        return decomposition_figure(self, prompt=prompt, pos=self.default_pos if pos is None else pos, k=k)

    def __repr__(self) -> str:
        return (
            f"Decomposition({self.point!r}: {len(self.labels)} terms, shape "
            f"{tuple(self.contributions.shape)}, closure_error={self.closure_error:.2e}, "
            f"relative_error={self.relative_error:.2e})"
        )
