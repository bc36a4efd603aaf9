"""The result of :func:`interp.features.generate`: both continuations of each prompt, step by step, with their
next-token distributions, the first step's closure and (frozen attention) the live model's first logits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import pandas as pd
import torch
from torch import Tensor

from interp._result import Result
from interp._validate import check_index

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["GenerationResult"]


@dataclass(frozen=True, eq=False)
class GenerationResult(Result):
    """Both continuations of each prompt (:func:`generate`): the intervened run's ``tokens`` [n_prompts, n_steps]
    and ``logits`` [n_prompts, n_steps, d_vocab] (step s: the logits that chose token s), the baseline's
    ``baseline_tokens`` / ``baseline_logits``, the ``top_k`` most likely tokens per step (``top_ids``,
    ``baseline_top_ids``, and their text ``top_strs`` / ``baseline_top_strs``), the continuations as text
    (``texts``, ``baseline_texts``; the generated tokens only) and per token (``token_strs``, …). ``regime``: "live"
    or "frozen attention"; ``closure_error`` (frozen): max |first logits of the frozen prompt pass without the
    interventions − the baseline's|, ``relative_error`` over max |baseline logit|; ``live_first_logits`` (frozen)
    [n_prompts, d_vocab]: the first step's logits of the live model with the interventions, beside ``logits[:, 0]``
    (None when the regime is live: the first step is live already). Rows: one per (prompt, step),
    labelled ``p<prompt>.s<step>``; ``top()`` ranks them by ``kl`` = KL(intervened ‖ baseline) of that step's
    next-token distributions (the two runs' own prefixes, which differ once the texts do)."""

    tokens: Tensor
    baseline_tokens: Tensor
    logits: Tensor
    baseline_logits: Tensor
    top_ids: Tensor
    baseline_top_ids: Tensor
    prompts: list[str]
    prompt_tokens: list[list[int]]
    texts: list[str]
    baseline_texts: list[str]
    token_strs: list[list[str]] = field(repr=False)
    baseline_token_strs: list[list[str]] = field(repr=False)
    top_strs: list[list[list[str]]] = field(repr=False)
    baseline_top_strs: list[list[list[str]]] = field(repr=False)
    interventions: list[str] = field(default_factory=list)
    frozen_attention: bool = False
    positions: str = "all"
    temperature: float = 0.0
    seed: int = 0
    closure_error: float = 0.0
    relative_error: float = 0.0
    closure_tolerance: float = 0.0
    regime: str = "live"
    model_name: str = ""
    live_first_logits: Optional[Tensor] = None

    label_column: ClassVar[str] = "label"
    default_by: ClassVar[str] = "kl"
    default_absolute: ClassVar[bool] = False

    @property
    def n_prompts(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_steps(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def labels(self) -> list[str]:
        return [f"p{b}.s{s}" for b in range(self.n_prompts) for s in range(self.n_steps)]

    @property
    def first_difference(self) -> list[Optional[int]]:
        """Per prompt, the first step whose token differs from the baseline's (None: the same text)."""
        diff = self.tokens != self.baseline_tokens
        return [int(d.nonzero()[0, 0]) if bool(d.any()) else None for d in diff]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (prompt, step): the intervened run's token (``token``, ``token_id``, its ``logit`` and
        ``prob``), the baseline's (``baseline_…``), ``same``, ``kl`` = Σ p log(p / p_baseline) and ``max_change`` =
        max |Δ logit| of the step."""
        z, bz = self.logits.double(), self.baseline_logits.double()
        lp, blp = torch.log_softmax(z, -1), torch.log_softmax(bz, -1)
        kl = (lp.exp() * (lp - blp)).sum(-1)
        change = (z - bz).abs().amax(-1)
        T, BT = self.tokens, self.baseline_tokens
        rows = []
        for b in range(self.n_prompts):
            for s in range(self.n_steps):
                t, bt = int(T[b, s]), int(BT[b, s])
                rows.append(
                    {
                        "label": f"p{b}.s{s}",
                        "prompt": b,
                        "step": s,
                        "token": self.token_strs[b][s],
                        "token_id": t,
                        "logit": float(z[b, s, t]),
                        "prob": float(lp[b, s, t].exp()),
                        "baseline_token": self.baseline_token_strs[b][s],
                        "baseline_token_id": bt,
                        "baseline_logit": float(bz[b, s, bt]),
                        "baseline_prob": float(blp[b, s, bt].exp()),
                        "same": t == bt,
                        "kl": float(kl[b, s]),
                        "max_change": float(change[b, s]),
                    }
                )
        return pd.DataFrame(
            rows,
            columns=[
                "label",
                "prompt",
                "step",
                "token",
                "token_id",
                "logit",
                "prob",
                "baseline_token",
                "baseline_token_id",
                "baseline_logit",
                "baseline_prob",
                "same",
                "kl",
                "max_change",
            ],
        )

    def _row(self, index: int) -> Any:
        return self.to_dataframe().iloc[index].to_dict()

    def top_tokens(self, prompt: int = 0, *, baseline: bool = False) -> pd.DataFrame:
        """The ``top_k`` most likely tokens of each step of prompt ``prompt`` (the baseline's with ``baseline``):
        ``step``, ``rank`` (1 = most likely), ``token``, ``token_id``, ``logit``, ``prob``."""
        b = check_index("prompt", prompt, self.n_prompts, what="prompts")
        z = (self.baseline_logits if baseline else self.logits)[b].double().cpu()
        ids = (self.baseline_top_ids if baseline else self.top_ids)[b].cpu()
        strs = (self.baseline_top_strs if baseline else self.top_strs)[b]
        p = torch.softmax(z, -1)
        return pd.DataFrame(
            [
                {
                    "step": s,
                    "rank": r + 1,
                    "token": strs[s][r],
                    "token_id": int(ids[s, r]),
                    "logit": float(z[s, ids[s, r]]),
                    "prob": float(p[s, ids[s, r]]),
                }
                for s in range(ids.shape[0])
                for r in range(ids.shape[1])
            ],
            columns=["step", "rank", "token", "token_id", "logit", "prob"],
        )

    def plot(self, *, prompt: int = 0) -> "go.Figure":
        """KL(intervened ‖ baseline) per step of prompt ``prompt``, each bar labelled with the two tokens
        (:func:`interp.plots.generation_figure`)."""
        from interp.plots import generation_figure

        return generation_figure(self, prompt=prompt)

    def __repr__(self) -> str:
        def short(s: str) -> str:
            return repr(s if len(s) <= 40 else s[:37] + "…")

        more = f" (prompt 0 of {self.n_prompts})" if self.n_prompts > 1 else ""
        what = (
            "; ".join(self.interventions)
            if len(self.interventions) <= 3
            else "; ".join(self.interventions[:3]) + f"; … ({len(self.interventions)})"
        )
        closure = f", closure_error={self.closure_error:.2e}" if self.frozen_attention else ""
        return (
            f"GenerationResult({self.model_name!r}, {what or 'no intervention'}, regime {self.regime!r}, "
            f"{self.n_steps} steps{more}: {short(self.texts[0])} vs baseline {short(self.baseline_texts[0])}"
            f"{closure})"
        )
