"""The logit lens: the model's prediction read off the residual stream at every resid point.

At a resid point with stream x (one vector per prompt and position) the readout is the
unembedding of the final norm applied to x (nostalgebraist 2020, "interpreting GPT: the logit lens"):

    readout(x) = N_f(x) W_U + b_U,        N_f(x) = γ ⊙ centre(x) / σ + β   (RMSNorm: no centre, no β)

The one choice is σ, the final norm's scale:

* ``scale="recomputed"`` (the usual lens): σ = σ(x), the scale x itself would get; each readout is
  what the model would predict if the blocks after the point were skipped.
* ``scale="frozen"``: σ = σ_f, the scale of the real pass's final-norm input (the last resid point).
  N_f is then one affine map for every point, so with x = Σ_{writes w before the point} w the readout
  is Σ_w (w's direct logit attribution) + β W_U + b_U — the per-point readouts are cumulative sums of
  ``attribute_logits``' terms, and the last one is the model's logits exactly.

At the last resid point σ(x) = σ_f, so both lenses end at the model's own logits; the gap is reported
as ``closure_error``. Mixing the two up (freezing where the lens should recompute, or the reverse in
DLA) is a classic bug: the lens answers "what would the model say here", DLA "who wrote the answer".

Steps: (1) one forward pass capturing every resid point and the final norm's input; (2) per point,
normalise, unembed and keep only the top-k tokens and the asked-for token logits (the full
[points, batch, pos, d_vocab] tensor is never held); (3) compare the last point with the logits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence, Union, cast

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._result import Result
from interp._validate import check_choice, check_positive_int, is_int
from interp.attribution.internal import TokenSpec, resolve_tokens, warn_unspaced
from interp.causal._metrics import final_norm, readout
from interp.engine.internal import read_forward
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.labels import Resid
from interp.models import Model, describe_block
from interp.stream.internal import as_batch, require_model, resolve_positions

__all__ = ["LogitLens", "logit_lens", "lens_points"]

log = logging.getLogger(__name__)
SCALES = ("recomputed", "frozen")


def lens_points(arch: Any) -> list[Resid]:
    """The resid points read, in stream order, each stream state once.

    ``blocks.{l}.hook_resid_post`` is ``blocks.{l+1}.hook_resid_pre``, so only layer 0's
    ``resid_pre`` (the embeddings) is kept; then each layer's ``resid_mid`` (where the block has that point:
    sequential blocks with an MLP) and ``resid_post``.
    """
    mid = "resid_mid" in describe_block(arch).points
    points = [Resid(0, "pre")]
    for l in range(arch.n_layers):
        if mid:
            points.append(Resid(l, "mid"))
        points.append(Resid(l, "post"))
    return points


@dataclass(frozen=True, eq=False)
class LogitLens(Result):
    """The prediction read at every resid point (rows, ``labels``) for every prompt and kept position.

    ``top_tokens`` / ``top_logits`` / ``top_probs`` [points, batch, pos, k]: the k tokens with the largest
    readout at each point (probabilities are the softmax over the whole vocabulary). ``target_values``
    [points, batch, pos]: the readout of ``answer`` (minus ``wrong``'s) when asked for, else None.
    ``positions`` [batch, pos] are the kept positions (``attention_mask`` marks the real ones);
    ``closure_error`` is max |last readout − the model's logits| over the vocabulary and real positions.
    ``result[label]`` is a dict of that point's tensors.
    """

    label_column: ClassVar[str] = "point"
    default_by: ClassVar[str] = "value"

    labels: list[str]
    scale: str
    top_tokens: Int[Tensor, "point batch pos k"] = field(repr=False)
    top_logits: Float[Tensor, "point batch pos k"] = field(repr=False)
    top_probs: Float[Tensor, "point batch pos k"] = field(repr=False)
    target_values: Optional[Float[Tensor, "point batch pos"]] = field(repr=False)
    target: Optional[str]
    tokens: Int[Tensor, "batch n_ctx"] = field(repr=False)
    positions: Int[Tensor, "batch pos"] = field(repr=False)
    attention_mask: Int[Tensor, "batch pos"] = field(repr=False)
    decoded: dict[str, str] = field(repr=False)
    str_tokens: Optional[list[list[str]]] = field(repr=False)
    n_layers: int
    closure_error: float
    relative_error: float

    @property
    def n_prompts(self) -> int:
        return int(self.top_tokens.shape[1])

    def token_str(self, token_id: int) -> str:
        """A token id as text (``#id`` when the model had no tokenizer)."""
        return self.decoded.get(str(int(token_id)), f"#{int(token_id)}")

    def _row(self, index: int) -> dict[str, Optional[Tensor]]:
        return {
            "top_tokens": self.top_tokens[index],
            "top_logits": self.top_logits[index],
            "top_probs": self.top_probs[index],
            "target": None if self.target_values is None else self.target_values[index],
        }

    def layer_of(self, label: str) -> float:
        """A point's depth for plotting: resid_pre of layer l → l, resid_mid → l + 0.5, resid_post → l + 1."""
        r = Resid.parse(label)
        return r.layer + {"pre": 0.0, "mid": 0.5, "post": 1.0}[r.where]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (point, prompt, real kept position): the input token there, the top token, its
        logit and probability, and ``value`` — the target's readout if one was asked for, else the
        top token's logit."""
        P = len(self.labels)
        b, s = self.attention_mask.bool().nonzero(as_tuple=True)  # real kept cells, prompt-major
        pos = self.positions[b, s]
        n = int(b.numel())
        ids = self.tokens[b, pos].tolist()
        inputs = (
            [self.str_tokens[i][p] for i, p in zip(b.tolist(), pos.tolist())]
            if self.str_tokens
            else [f"#{t}" for t in ids]
        )
        top = self.top_tokens[:, b, s, 0].reshape(-1).tolist()
        df = pd.DataFrame(
            {
                "point": [lab for lab in self.labels for _ in range(n)],
                "depth": [self.layer_of(lab) for lab in self.labels for _ in range(n)],
                "prompt": b.repeat(P).numpy(),
                "pos": pos.repeat(P).numpy(),
                "input_token": inputs * P,
                "top_token": [self.token_str(t) for t in top],
                "top_logit": self.top_logits[:, b, s, 0].double().reshape(-1).numpy(),
                "top_prob": self.top_probs[:, b, s, 0].double().reshape(-1).numpy(),
            }
        )
        if self.target_values is not None:
            df["target"] = self.target_values[:, b, s].double().reshape(-1).numpy()
        df["value"] = df["target"] if self.target_values is not None else df["top_logit"]
        return df

    def plot(self, *, prompt: int = 0, value: str = "auto") -> Any:
        """Points × positions heatmap for one prompt: the top token at each cell (text), coloured by
        its probability (``value="top"``) or by the target's readout (``value="target"``; "auto" picks
        it when a target was asked for)."""
        from interp.plots import logit_lens_figure

        return logit_lens_figure(self, prompt=prompt, value=value)

    def __repr__(self) -> str:
        P, B, S, k = self.top_tokens.shape
        return (
            f"LogitLens(scale={self.scale!r}: {P} resid points × {B} prompts × {S} positions, top {k}"
            f"{f', target {self.target}' if self.target else ''}, closure_error={self.closure_error:.2e})"
        )


def logit_lens(
    model: Model,
    inputs: Union[str, Sequence[str], Tensor],
    *,
    scale: str = "recomputed",
    answer: Optional[TokenSpec] = None,
    wrong: Optional[TokenSpec] = None,
    top_k: int = 5,
    pos: Optional[Union[int, Sequence[int]]] = None,
) -> LogitLens:
    """The model's prediction read at every resid point (the logit lens; see the module docstring).

    ``scale``: "recomputed" (each point's own final-norm scale, the usual lens) or "frozen" (the real
    pass's final scale: readouts are cumulative sums of the direct logit attribution terms).
    ``answer`` / ``wrong``: a token (or one per prompt) whose readout (difference) is kept at every point.
    ``top_k``: how many top tokens to keep. ``pos``: None (every position) or one position (int, negative
    counting back from each prompt's last real token; or one per prompt).
    """
    # 1. the inputs checked: the options, the prompts, the answer tokens and the kept positions
    require_model(model)
    arch = model.arch
    check_choice("scale", scale, SCALES)
    check_positive_int("top_k", top_k)
    if not arch.has_logits:
        raise UnsupportedOperationError(
            f"model {model.name!r} is an encoder without an unembedding (no logits to read); read its hidden "
            "state along a direction with interp.attribute_direction(model, inputs, direction) instead"
        )
    if top_k > arch.d_vocab:
        raise ArgumentError(f"top_k={top_k} must be at most d_vocab={arch.d_vocab}")
    batch = as_batch(model, inputs)
    B = batch.tokens.shape[0]
    ans = resolve_tokens(model, answer, B, "answer")
    wr = resolve_tokens(model, wrong, B, "wrong")
    if wr is not None and ans is None:
        raise ArgumentError("wrong is given without answer; the lens reads logit[answer] − logit[wrong]")
    positions, keep_mask = _kept_positions(batch, pos)
    # the answer is read after the given position (every position: the last real token, where it comes next)
    after = batch.last_positions() if pos is None else positions[:, 0]
    for arg, spec in (("answer", answer), ("wrong", wrong)):
        warn_unspaced(model, spec, arg, batch.tokens, after, owner="logit_lens")

    # 2. one forward pass capturing every resid point (and the logits) at the kept positions only
    names = [str(p) for p in lens_points(arch)]
    rows = torch.arange(B, device=batch.tokens.device)[:, None]

    def gather(x: Tensor) -> Tensor:  # keep only the asked-for positions, as they are captured
        return x[rows, positions]

    store, logits = read_forward(model, batch.tokens, batch.attention_mask, dict.fromkeys(names, gather), logits=True)
    if not torch.is_tensor(logits):
        raise UnsupportedOperationError(f"model {model.name!r} returned no logits tensor from its forward pass")

    # 3. per point: normalise, unembed, keep the top k and the target; the last point compared with the logits
    r = _readouts(model, store, names, gather(logits), scale, top_k, ans, wr, keep_mask)

    # 4. the tokens named, the result
    decoded = _decoded(model, r.top_tokens, ans, wr)
    log.info("logit_lens(scale=%s): %d points, closure error %.3g", scale, len(names), r.closure)
    tok = model.tokenizer
    return LogitLens(
        labels=names,
        scale=scale,
        top_tokens=r.top_tokens,
        top_logits=r.top_logits,
        top_probs=r.top_probs,
        target_values=r.target_values,
        target=_target_name(decoded, ans, wr),
        tokens=batch.tokens,
        positions=positions.contiguous(),
        attention_mask=keep_mask.contiguous(),
        decoded=decoded,
        str_tokens=cast(list[list[str]], model.to_str_tokens(batch.tokens)) if tok is not None else None,  # [B, pos]
        n_layers=arch.n_layers,
        closure_error=r.closure,
        relative_error=r.closure / r.scale_ref if r.scale_ref > 0 else r.closure,
    )


def _kept_positions(batch: Any, pos: Any) -> tuple[Tensor, Tensor]:
    """(positions [B, S], mask [B, S] of the real ones): every position (``pos`` None) or one per prompt."""
    B, N = batch.tokens.shape
    dev = batch.tokens.device
    if pos is None:
        return torch.arange(N, device=dev).expand(B, N), batch.attention_mask
    if not (is_int(pos) or isinstance(pos, (list, tuple, Tensor))):
        raise ArgumentError(f"pos={pos!r} must be None (every position), an int or one int per prompt")
    if isinstance(pos, (list, tuple)) and len(pos) != B:
        raise ArgumentError(f"pos has {len(pos)} entries but there are {B} prompts")
    positions = resolve_positions(pos, batch.attention_mask.cpu()).to(dev)[:, None]
    return positions, torch.ones_like(positions)


@dataclass
class _Readouts:
    """The lens's tensors ([points, B, S, k] top tokens / logits / probabilities, [points, B, S] target values or
    None), the closure error at the last point and the largest |logit| there (its scale)."""

    top_tokens: Tensor
    top_logits: Tensor
    top_probs: Tensor
    target_values: Optional[Tensor]
    closure: float
    scale_ref: float


def _readouts(
    model: Model,
    store: dict[str, Tensor],
    names: list[str],
    own: Tensor,
    scale: str,
    k: int,
    ans: Optional[Tensor],
    wr: Optional[Tensor],
    keep_mask: Tensor,
) -> _Readouts:
    """Each point's readout (module docstring) reduced to its top ``k`` tokens and the target's value, one point at a
    time (each captured stream popped from ``store`` as it is read); ``own`` [B, S, d_vocab] the model's logits."""
    last = names[-1]  # the last resid point: the final norm's input
    W_U = model.weights.need("W_U")
    _, sigma_f = final_norm(model, store[last])
    P, (B, S) = len(names), own.shape[:2]
    dev = own.device
    top_tokens = torch.empty(P, B, S, k, dtype=torch.long, device=dev)
    top_logits = torch.empty(P, B, S, k, dtype=W_U.dtype, device=dev)
    top_probs = torch.empty_like(top_logits)
    target_values = None if ans is None else torch.empty(P, B, S, dtype=W_U.dtype, device=dev)
    closure = scale_ref = 0.0
    with torch.inference_mode():
        for i, name in enumerate(names):
            x = store.pop(name)  # [B, S, d_model]; freed as we go
            lg = readout(model, x, "logits", scale=sigma_f if scale == "frozen" else None)  # [B, S, d_vocab]
            vals, idx = lg.topk(k, dim=-1)
            top_tokens[i], top_logits[i] = idx, vals
            top_probs[i] = (vals - lg.logsumexp(dim=-1, keepdim=True)).exp()
            if target_values is not None and ans is not None:
                t = lg.gather(-1, ans.to(dev)[:, None, None].expand(B, S, 1))[..., 0]
                if wr is not None:
                    t = t - lg.gather(-1, wr.to(dev)[:, None, None].expand(B, S, 1))[..., 0]
                target_values[i] = t
            if name == last:
                gap = (lg - own.to(lg.dtype)).abs().amax(dim=-1)  # [B, S]
                closure = float(gap[keep_mask.bool()].max())
                scale_ref = float(own[keep_mask.bool()].abs().max())
    return _Readouts(top_tokens, top_logits, top_probs, target_values, closure, scale_ref)


def _decoded(model: Model, top_tokens: Tensor, ans: Optional[Tensor], wr: Optional[Tensor]) -> dict[str, str]:
    """{str(id): text} of every top token and the answer / wrong tokens (empty without a tokenizer)."""
    tok = model.tokenizer
    ids = set(top_tokens.unique().tolist())
    for given in (ans, wr):
        if given is not None:
            ids |= set(given.tolist())
    return {str(i): tok.decode([i]) for i in sorted(ids)} if tok is not None else {}


def _target_name(decoded: dict[str, str], ans: Optional[Tensor], wr: Optional[Tensor]) -> Optional[str]:
    """``logit['x']`` or ``logit['x'] − logit['y']`` (the first prompt's tokens, marked when they vary), or None
    without an answer."""
    if ans is None:
        return None
    tok_name = lambda t: repr(decoded.get(str(int(t)), f"#{int(t)}"))
    per = len(ans) > 1 and (bool((ans != ans[0]).any()) or (wr is not None and bool((wr != wr[0]).any())))
    return (
        f"logit[{tok_name(ans[0])}]"
        + (f" − logit[{tok_name(wr[0])}]" if wr is not None else "")
        + (" (per-prompt tokens)" if per else "")
    )
