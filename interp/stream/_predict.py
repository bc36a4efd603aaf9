"""What the model predicts: the top-k next tokens of a prompt (or of each prompt of a batch).

One plain forward pass; at each prompt's metric position (by default its last real token) the model's own
logits z ∈ R^{d_vocab} give

    p = softmax(z),   top-k = the k tokens with the largest z (so the largest p)

over the whole vocabulary. This is the question a study starts with ("does the model get it right, and
by how much?"), transformer-lens's ``test_prompt`` without the printing: a :class:`Predictions` result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence, Union

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._result import Result
from interp._validate import check_index, check_positive_int
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.models import Model
from interp.engine import readout
from interp.engine.internal import Engine
from interp.stream._inputs import as_batch, resolve_positions

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["Predictions", "predict"]


@dataclass(frozen=True, eq=False)
class Predictions(Result):
    """The top-k next tokens of each prompt, with their probabilities and logits.

    ``top_ids`` / ``top_probs`` / ``top_logits`` [batch, k]: prompt b's k most likely next tokens at
    ``positions[b]``, most likely first (probabilities are the softmax over the whole vocabulary).
    ``labels`` are the predicted tokens as text, each once (a token text that two ids share gets
    ``#id`` appended); ``result[" Paris"]`` is that token's probability in every prompt [batch] (also
    where it is not in a prompt's top k). ``to_dataframe()`` has one row per (prompt, rank) — column
    ``token`` names the label — and ``top(k)`` ranks those rows by ``prob``.
    """

    label_column: ClassVar[str] = "token"
    default_by: ClassVar[str] = "prob"
    default_absolute: ClassVar[bool] = False

    labels: list[str]
    label_ids: list[int] = field(repr=False)
    top_ids: Int[Tensor, "batch k"] = field(repr=False)
    top_probs: Float[Tensor, "batch k"] = field(repr=False)
    top_logits: Float[Tensor, "batch k"] = field(repr=False)
    label_probs: Float[Tensor, "n_labels batch"] = field(repr=False)
    positions: Int[Tensor, " batch"] = field(repr=False)
    prompts: list[str] = field(repr=False)
    model_name: str = ""

    @property
    def n_prompts(self) -> int:
        return int(self.top_ids.shape[0])

    @property
    def k(self) -> int:
        return int(self.top_ids.shape[1])

    def _row(self, index: int) -> Tensor:
        return self.label_probs[index]

    def token_label(self, token_id: int) -> str:
        """The label of a predicted token id."""
        return self.labels[self.label_ids.index(int(token_id))]

    def to_dataframe(self, *, prompt: Optional[int] = None) -> pd.DataFrame:
        """One row per (prompt, rank): ``prompt``, ``rank`` (1 = most likely), ``token``, ``token_id``,
        ``prob``, ``logprob`` and ``logit`` (only prompt ``prompt`` when given)."""
        rows = (
            range(self.n_prompts) if prompt is None else [check_index("prompt", prompt, self.n_prompts, what="prompts")]
        )
        ids, probs, logits = self.top_ids.tolist(), self.top_probs.double(), self.top_logits.tolist()
        data = [
            {
                "prompt": b,
                "rank": r + 1,
                "token": self.token_label(ids[b][r]),
                "token_id": ids[b][r],
                "prob": float(probs[b, r]),
                "logprob": float(probs[b, r].log()),
                "logit": float(logits[b][r]),
            }
            for b in rows
            for r in range(self.k)
        ]
        return pd.DataFrame(data, columns=["prompt", "rank", "token", "token_id", "prob", "logprob", "logit"])

    def plot(self, *, prompt: int = 0) -> go.Figure:
        """A bar chart of prompt ``prompt``'s top-k probabilities."""
        from interp.plots import predictions_figure

        return predictions_figure(self, prompt=prompt)

    def __repr__(self) -> str:
        first = ", ".join(
            f"{self.token_label(int(t))!r} {float(p):.3f}" for t, p in zip(self.top_ids[0, :3], self.top_probs[0, :3])
        )
        more = f" (prompt 0 of {self.n_prompts})" if self.n_prompts > 1 else ""
        return f"Predictions({self.model_name!r}: top {self.k} next tokens{more}: {first}, …)"


def _labels(tok: Any, ids: Sequence[int]) -> list[str]:
    text = {i: (tok.decode([i]) if tok is not None else f"#{i}") for i in ids}
    count: dict[str, int] = {}
    for t in text.values():
        count[t] = count.get(t, 0) + 1
    return [text[i] if count[text[i]] == 1 else f"{text[i]}#{i}" for i in ids]


def predict(
    model: Model,
    inputs: Union[str, Sequence[str], Tensor],
    *,
    k: int = 10,
    pos: Union[int, Sequence[int]] = -1,
    batch_size: Optional[int] = None,
) -> Predictions:
    """The ``k`` most likely next tokens of each prompt of ``inputs`` (text, a list of texts, or token ids
    [batch, pos]) at ``pos`` (default each prompt's last real token; one int per prompt allowed), with their
    probabilities and logits, from one forward pass (``batch_size`` prompts at a time; None: all at once)."""
    if not model.arch.has_logits:
        raise UnsupportedOperationError(
            f"model {model.name!r} is an encoder without an unembedding: it predicts no next token (read its hidden "
            "state with interp.attribute_direction instead)"
        )
    d_out = int(model.weights.W_U.shape[1]) if model.weights.W_U is not None else model.arch.d_vocab
    k = check_positive_int("k", k)
    if k > d_out:
        raise ArgumentError(f"k={k} must be at most the number of output tokens, {d_out}")
    batch_size = check_positive_int("batch_size", batch_size, allow_none=True)
    batch = as_batch(model, inputs)
    B = int(batch.tokens.shape[0])
    if isinstance(pos, (list, tuple)) and len(pos) != B:
        raise ArgumentError(f"pos has {len(pos)} entries but there are {B} prompts; give one per prompt or one int")
    positions = resolve_positions(pos, batch.attention_mask.cpu())
    step = B if batch_size is None else batch_size
    chunks = []
    e = Engine.of(model)
    with torch.no_grad():
        for s in range(0, B, step):
            final = e.run(batch.tokens[s : s + step], batch.attention_mask[s : s + step]).final
            rows = torch.arange(final.shape[0], device=final.device)
            # the readout (final norm, unembedding, soft-cap) at each prompt's position only
            chunks.append(readout(model, final[rows, positions[s : s + step].to(final.device)]).float())
    z = torch.cat(chunks)  # [B, d_out]: the model's own logits at each prompt's position
    logp = torch.log_softmax(z.double(), dim=-1)
    vals, ids = z.topk(k, dim=-1)
    uniq = list(dict.fromkeys(ids.flatten().tolist()))
    label_ids = torch.tensor(uniq, device=z.device)
    tok = model.tokenizer
    prompts = (
        [tok.decode(t[m.bool()].tolist()) for t, m in zip(batch.tokens.cpu(), batch.attention_mask.cpu())]
        if tok is not None
        else [" ".join(map(str, t[m.bool()].tolist())) for t, m in zip(batch.tokens.cpu(), batch.attention_mask.cpu())]
    )
    return Predictions(
        labels=_labels(tok, uniq),
        label_ids=uniq,
        top_ids=ids,
        top_probs=logp.gather(-1, ids).exp().float(),
        top_logits=vals,
        label_probs=logp[:, label_ids].exp().T.float().contiguous(),
        positions=positions,
        prompts=prompts,
        model_name=model.name,
    )
