"""Attribution targets: which logits are read, where, and how they combine (docs/math.md §5).

A target is a score of *candidate* token sequences. For prompt i attributed at position p, a
candidate c = (c_1 … c_T) is read teacher-forced: c_t at position p + t − 1 of the sequence
prompt[:p+1] + c_<t, and

    L(c) = Σ_t s_t(c_t),   s = logit (``target="logit"``) or log p = logit − log Σ_v exp logit_v
    target_i = L(answer_i) − agg_{w ∈ wrong_i} L(w),   agg = mean | logsumexp   (no wrong: L(answer_i))

Every read is a logit, which decomposes exactly (frozen final norm), so the target is linear in
the reads with coefficients: 1 for the answer's tokens, −1/|W| (mean) or −π_w (logsumexp, with
π = softmax_w L(w) at the real pass) for each wrong candidate's tokens. What is not linear is
reported as its own term so that the terms still sum to the model's own number:

* ``log_partition`` = −Σ_reads coef · log Σ_v exp logit_v (log-probability targets);
* ``wrong_lse_remainder`` = Σ_w π_w L(w) − logsumexp_w L(w) = −H(π) ≤ 0 (the first-order split of a
  logsumexp leaves the entropy of its softmax weights; 0 for a single wrong candidate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from interp.attribution._answers import _one_token, check_distinct, check_text_ids
from interp._validate import check_bool
from interp.errors import ArgumentError
from interp.models import Model
from interp.models.internal import text_ids
from interp.stream.internal import check_tensor_data

__all__ = ["Targets", "resolve_targets", "Read", "plan_reads", "TARGETS", "WRONG_AGGS", "resolve_candidate"]

TARGETS = ("logit", "logprob")
WRONG_AGGS = ("mean", "logsumexp")
Candidate = tuple[int, ...]


@dataclass(frozen=True)
class Targets:
    """Every prompt's answer (one candidate) and wrong set (candidates), and how they combine."""

    answers: list[Candidate]
    wrongs: Optional[list[list[Candidate]]]
    kind: str  # "logit" | "logprob"
    agg: str  # "mean" | "logsumexp"

    @property
    def multi_token(self) -> bool:
        cands = self.answers + [w for ws in (self.wrongs or []) for w in ws]
        return any(len(c) > 1 for c in cands)

    def answer_ids(self) -> Tensor:
        """[N] (single tokens) or [N, T] (−1 pads shorter answers)."""
        return _pad([list(a) for a in self.answers], squeeze=True)

    def wrong_ids(self) -> Optional[Tensor]:
        """None, [N] (one wrong token each), [N, W] (sets of single tokens) or [N, W, T]; −1 pads."""
        if self.wrongs is None:
            return None
        if all(len(w) == 1 for ws in self.wrongs for w in ws):
            if all(len(ws) == 1 for ws in self.wrongs):
                return torch.tensor([ws[0][0] for ws in self.wrongs], dtype=torch.long, device="cpu")
            return _pad([[w[0] for w in ws] for ws in self.wrongs], squeeze=False)
        W = max(len(ws) for ws in self.wrongs)
        T = max(len(w) for ws in self.wrongs for w in ws)
        out = torch.full((len(self.wrongs), W, T), -1, dtype=torch.long, device="cpu")
        for i, ws in enumerate(self.wrongs):
            for j, w in enumerate(ws):
                out[i, j, : len(w)] = torch.tensor(w, device="cpu")
        return out

    # -- text ------------------------------------------------------------------------------------

    def _score(self, name: str) -> str:
        return f"logit[{name}]" if self.kind == "logit" else f"log p({name})"

    def text(self, i: int, name: Any) -> str:
        """Prompt i's target, e.g. ``logit[' Paris'] − mean(logit[' London'], logit[' Berlin'])``."""
        s = self._score(name(self.answers[i]))
        if self.wrongs is not None:
            ws = [self._score(name(w)) for w in self.wrongs[i]]
            s += f" − {ws[0]}" if len(ws) == 1 else f" − {self.agg}({', '.join(ws)})"
        if any(len(c) > 1 for c in [self.answers[i], *(self.wrongs[i] if self.wrongs else [])]):
            s += " (summed over each token, teacher-forced)"
        return s

    def overall_text(self, texts: list[str]) -> str:
        """The sweep's target: the shared text, or a per-prompt description naming prompt 0's."""
        if len(set(texts)) == 1:
            return texts[0]
        s = "per-prompt " + self._score("answer_i")
        if self.wrongs is not None:
            single = all(len(ws) == 1 for ws in self.wrongs)
            s += f" − {self._score('wrong_i')}" if single else f" − {self.agg} over {self._score('w')}, w ∈ wrong_i"
        return f"{s} ({len(texts)} prompts; prompt 0: {texts[0]})"


def _pad(rows: list[list[int]], *, squeeze: bool) -> Tensor:
    n = max(len(r) for r in rows)
    if squeeze and n == 1:
        return torch.tensor([r[0] for r in rows], dtype=torch.long, device="cpu")
    out = torch.full((len(rows), n), -1, dtype=torch.long, device="cpu")
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long, device="cpu")
    return out


# ---- resolving user specs ------------------------------------------------------------------------


def resolve_candidate(model: Model, value: Any, arg: str, multi: bool) -> Candidate:
    """One candidate: a single token (str / id), or with ``multi`` any text or a tuple of ids."""
    if multi and isinstance(value, tuple):
        if not value:
            raise ArgumentError(f"{arg}=() is an empty token sequence; give at least one token id")
        return tuple(_one_token(model, v, f"{arg}[{j}]") for j, v in enumerate(value))
    if isinstance(value, str) and model.tokenizer is not None:
        ids = text_ids(model, value, arg)
        if multi:
            if not ids:
                raise ArgumentError(f"{arg}={value!r} tokenises to no tokens; give a non-empty answer")
            check_text_ids(model, value, ids, arg)
            return tuple(int(i) for i in ids)
        if len(ids) > 1:
            pieces = [model.tokenizer.decode([i]) for i in ids]
            raise ArgumentError(
                f"{arg}={value!r} must be a single token, but it tokenises to {len(ids)} tokens {pieces} "
                f"(ids {ids}); pick one of those pieces, pass a token id, or pass multi_token=True to "
                "attribute every token of it (teacher-forced, summed)"
            )
    return (_one_token(model, value, arg),)


def _ints(spec: Tensor, arg: str) -> Tensor:
    check_tensor_data(spec, arg)
    if spec.is_floating_point() or spec.is_complex() or spec.dtype == torch.bool:
        raise ArgumentError(f"{arg} must hold integer token ids, got dtype {spec.dtype}")
    return spec


def _answers(model: Model, spec: Any, n: int, multi: bool) -> list[Candidate]:
    if spec is None:
        raise ArgumentError("answer is required: the token whose logit is attributed")
    if isinstance(spec, Tensor):
        t = _ints(spec, "answer")
        if multi and t.ndim == 2 and t.shape[0] == n:
            return [
                resolve_candidate(model, tuple(int(x) for x in row), f"answer[{i}]", True) for i, row in enumerate(t)
            ]
        spec = t.flatten().tolist() if t.ndim else int(t)
    if isinstance(spec, (str, int)):
        return [resolve_candidate(model, spec, "answer", multi)] * n
    if not isinstance(spec, (list, tuple)):
        raise ArgumentError(
            f"answer={spec!r:.80} must be a single-token string, a token id, or a per-prompt list of them"
        )
    if len(spec) != n:
        raise ArgumentError(
            f"answer has {len(spec)} entries but there are {n} prompts; give one per prompt or a single token"
        )
    return [resolve_candidate(model, v, f"answer[{i}]", multi) for i, v in enumerate(spec)]


def _wrong_set(model: Model, value: Any, arg: str, multi: bool) -> list[Candidate]:
    """A per-prompt entry: one candidate, or a list / set of them (a tuple of ids is a sequence under multi)."""
    if isinstance(value, (list, set, frozenset)) or (isinstance(value, tuple) and not multi):
        items = list(value)
    else:
        return [resolve_candidate(model, value, arg, multi)]
    if not items:
        raise ArgumentError(f"{arg} is an empty set of wrong tokens; give at least one")
    cands = [resolve_candidate(model, v, f"{arg}[{j}]", multi) for j, v in enumerate(items)]
    return sorted(cands) if isinstance(value, (set, frozenset)) else cands  # a set has no order: by token id


def _wrongs(model: Model, spec: Any, n: int, multi: bool) -> Optional[list[list[Candidate]]]:
    if spec is None:
        return None
    if isinstance(spec, Tensor):
        t = _ints(spec, "wrong")
        if t.ndim == 2 and t.shape[0] == n:
            if multi:
                return [
                    [resolve_candidate(model, tuple(int(x) for x in row), f"wrong[{i}]", True)]
                    for i, row in enumerate(t)
                ]
            return [[(_one_token(model, int(x), f"wrong[{i}]"),) for x in row] for i, row in enumerate(t)]
        spec = t.flatten().tolist() if t.ndim else int(t)
    if isinstance(spec, (set, frozenset)):
        shared = _wrong_set(model, spec, "wrong", multi)
        return [shared] * n
    if isinstance(spec, (str, int)):
        return [[resolve_candidate(model, spec, "wrong", multi)]] * n
    if not isinstance(spec, (list, tuple)):
        raise ArgumentError(
            f"wrong={spec!r:.80} must be a token, a set of tokens shared by every prompt, "
            "or a per-prompt list (each entry a token or a list / set of tokens)"
        )
    if len(spec) != n:
        raise ArgumentError(
            f"wrong has {len(spec)} entries but there are {n} prompts; give one entry per prompt (a token or a "
            f"list of tokens), a single token, or a set such as {{' London', ' Berlin'}} shared by every prompt"
        )
    return [_wrong_set(model, v, f"wrong[{i}]", multi) for i, v in enumerate(spec)]


def resolve_targets(
    model: Model, answer: Any, wrong: Any, n: int, *, multi_token: bool, target: str, wrong_agg: str
) -> Targets:
    """Check and resolve ``answer``/``wrong`` for ``n`` prompts (module docstring)."""
    check_bool("multi_token", multi_token)
    if target not in TARGETS:
        raise ArgumentError(f"target={target!r} is not allowed; use one of {TARGETS}")
    if wrong_agg not in WRONG_AGGS:
        raise ArgumentError(f"wrong_agg={wrong_agg!r} is not allowed; use one of {WRONG_AGGS}")
    answers = _answers(model, answer, n, multi_token)
    wrongs = _wrongs(model, wrong, n, multi_token)
    if wrongs is not None and all(len(ws) == 1 for ws in wrongs):  # one wrong token each: not the answer itself
        both = _pad([list(a) for a in answers] + [list(ws[0]) for ws in wrongs], squeeze=False)  # one width, −1 pads
        check_distinct(
            model,
            both[:n],
            both[n:],
            f"attribute_logits(answer={answer!r:.60}, wrong={wrong!r:.60})",
            "or leave wrong=None to attribute the answer's logit alone",
        )
    return Targets(answers=answers, wrongs=wrongs, kind=target, agg=wrong_agg)


# ---- where each candidate is read -------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """Logit of ``token`` at kept position ``j`` of batch row ``row``, for candidate ``cand`` (0 = the
    answer, w + 1 = wrong candidate w) of chunk prompt ``prompt``."""

    prompt: int
    row: int
    j: int
    token: int
    cand: int


def plan_reads(
    prompt_ids: Sequence[Sequence[int]], positions: Sequence[int], targets: Targets, start: int
) -> tuple[list[list[int]], list[list[int]], list[Read]]:
    """(rows of token ids, each row's read positions, reads) for the chunk of prompts from ``start``.

    Row i < len(prompt_ids) is prompt i itself (read at its position p_i: every single-token
    candidate); a multi-token candidate c gets its own row prompt[:p+1] + c[:-1], read at p … p+T−1.
    """
    rows = [list(ids) for ids in prompt_ids]
    row_pos: list[list[int]] = [[p] for p in positions]
    reads: list[Read] = []
    for i, (ids, p) in enumerate(zip(prompt_ids, positions)):
        g = start + i
        cands = [targets.answers[g], *(targets.wrongs[g] if targets.wrongs is not None else [])]
        for ci, c in enumerate(cands):
            if len(c) == 1:
                reads.append(Read(i, i, 0, c[0], ci))
                continue
            r = len(rows)
            rows.append(list(ids[: p + 1]) + list(c[:-1]))
            row_pos.append([p + t for t in range(len(c))])
            reads += [Read(i, r, t, tok, ci) for t, tok in enumerate(c)]
    return rows, row_pos, reads


def coefficients(targets: Targets, scores: Tensor) -> Tensor:
    """Each candidate's coefficient [1 + |W|] (answer first) from the scores L(c) at the real pass."""
    coef = torch.ones_like(scores)
    if targets.wrongs is not None:
        lw = scores[1:]
        coef[1:] = -torch.softmax(lw, 0) if targets.agg == "logsumexp" else -1.0 / len(lw)
    return coef


def combine(targets: Targets, scores: Tensor) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """(the model's own target, the logsumexp remainder) from candidate scores [1 + |W|]."""
    la = scores[0]
    if targets.wrongs is None:
        return la, torch.zeros_like(la)
    lw = scores[1:]
    if targets.agg == "mean":
        return la - lw.mean(), torch.zeros_like(la)
    lse = torch.logsumexp(lw, 0)
    return la - lse, (torch.softmax(lw, 0) * lw).sum() - lse
