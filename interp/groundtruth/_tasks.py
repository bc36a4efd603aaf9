"""Discovery tasks on the ground-truth models: prompts, the resample partner of each, and the metric.

A circuit-discovery method scores edges by how a metric M moves when an edge is ablated. On the
ground-truth models every output position is an output (tracr computes the program at every token;
the induction toy predicts every repeated token), so a task has one *prompt* per (input, output
position) pair, and M reads that one position:

    M(x, t) = logit_t[y_t] − mean_{j ≠ y_t} logit_t[j]      categorical outputs (y_t the clean answer)
    M(x, t) = logit_t[0]                                      numerical outputs (frac_prevs: the value)

(:class:`OutputMargin`). It is linear in the logits, so edge attribution's gradient is not zero at the
clean run (as it is for ACDC's tracr metric, the L2 distance to the clean logits); scores are then
aggregated over prompts as the mean |effect| (:mod:`interp.groundtruth._discovery`), the L1 form of
that L2 metric: an edge that moves the output at any position counts, whatever the direction.

Prompts are grouped by token length (patching aligns positions; no padding). The *resample* partner
of an input is another input of the same length from the task (a seeded derangement: never the input
itself), the same partner for each of its positions.

* tracr programs: every input of each length 1 … max_seq_len (or a seeded sample of ``max_inputs``
  per length), each output position 1 … n (BOS's position 0 computes nothing), answer = the RASP
  program's output there.
* the induction toy: ``<bos>`` + n distinct words + the same words; the positions q ∈ [n+1, 2n−1],
  whose next token x[q+1] = x[q−n+1] only induction can predict; answer = that token; the partner is
  another repeated sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from interp._validate import check_positive_int
from interp.causal import Metric
from interp.errors import ArgumentError
from interp.groundtruth._edges import TrueCircuit, tracr_circuit
from interp.groundtruth._induction import induction_circuit
from interp.models import Model

__all__ = ["OutputMargin", "PromptGroup", "DiscoveryTask", "tracr_task", "induction_task"]


@dataclass(frozen=True, eq=False)
class OutputMargin(Metric):
    """M = logit[answer] − mean of the other logits at ``pos`` (one answer id and position per prompt);
    with ``answer=None``, M = logit[0] (a numerical output's one logit)."""

    answer: Optional[Sequence[int]]
    pos: Sequence[int] = ()

    def describe(self, model: Model) -> str:
        return "logit[0] (numerical output)" if self.answer is None else "logit[answer] − mean other logit"

    def _fn(self, model: Model, n: int) -> Any:
        width = model.weights.need("W_U").shape[1]
        if self.answer is None:
            if width != 1:
                raise ArgumentError(f"answer=None reads one numerical logit, but model {model.name!r} has {width}")

            def value(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
                return out[:, 0]

            return value
        a = torch.as_tensor(list(self.answer), dtype=torch.long, device=model.device)
        if a.shape != (n,):
            raise ArgumentError(f"answer has {a.numel()} entries but there are {n} prompts; give one per prompt")
        if width < 2 or bool(((a < 0) | (a >= width)).any()):
            raise ArgumentError(f"answer ids must be in [0, {width - 1}] (the model's {width} output logits)")
        a = a.to(model.device)

        def margin(out: Tensor, p: Tensor, _: Optional[Tensor]) -> Tensor:
            rows = torch.arange(out.shape[0], device=out.device)
            right = out[rows, a[p]]
            return right - (out.sum(-1) - right) / (out.shape[-1] - 1)

        return margin


@dataclass(frozen=True, eq=False)
class PromptGroup:
    """Equal-length prompts: ``clean`` and their resample partners ``corrupt`` [P, T] (ids), the output
    position and (categorical) answer id of each prompt."""

    clean: Tensor
    corrupt: Tensor
    positions: tuple[int, ...]
    answers: Optional[tuple[int, ...]]

    @property
    def n_prompts(self) -> int:
        return int(self.clean.shape[0])

    @property
    def metric(self) -> OutputMargin:
        return OutputMargin(self.answers, pos=list(self.positions))


@dataclass(frozen=True, eq=False)
class DiscoveryTask:
    """A model with a known circuit and the prompts to discover it on (module docstring).

    ``truth`` is the circuit; ``connected`` the same rule with the constant channels counted (tracr's
    ``one`` and BOS dimensions: what an ablation that also removes constants, zero ablation, can reveal),
    or None when the model has no such channels (the truth then stands for both).
    """

    name: str
    model: Model = field(repr=False)
    truth: TrueCircuit = field(repr=False)
    groups: tuple[PromptGroup, ...] = field(repr=False)
    description: str = ""
    connected: Optional[TrueCircuit] = field(default=None, repr=False)  # the truth with constant channels counted

    @property
    def n_prompts(self) -> int:
        return sum(g.n_prompts for g in self.groups)

    def __repr__(self) -> str:
        return (
            f"DiscoveryTask({self.name!r}: {len(self.truth)} true edges, {self.n_prompts} prompts in "
            f"{len(self.groups)} length groups)"
        )


def _derangement(n: int, g: torch.Generator) -> Tensor:
    """A random permutation of range(n) with no fixed point (n ≥ 2): a shuffled cycle."""
    order = torch.randperm(n, generator=g, device=g.device)
    out = torch.empty(n, dtype=torch.long, device=g.device)
    out[order] = order.roll(-1)
    return out


def _group(
    clean_inputs: Tensor, partner: Tensor, answers_at: Optional[Tensor], positions: Sequence[int]
) -> PromptGroup:
    """One prompt per (input, position): inputs repeated position-major within each input."""
    reps = len(positions)
    clean = clean_inputs.repeat_interleave(reps, 0)
    corrupt = clean_inputs[partner].repeat_interleave(reps, 0)
    pos = tuple(int(t) for _ in range(clean_inputs.shape[0]) for t in positions)
    ans = None if answers_at is None else tuple(int(v) for v in answers_at.flatten())
    return PromptGroup(clean=clean, corrupt=corrupt, positions=pos, answers=ans)


def tracr_task(
    program: Any, *, lengths: Optional[Sequence[int]] = None, max_inputs: Optional[int] = None, seed: int = 0
) -> DiscoveryTask:
    """The discovery task of a compiled tracr program (module docstring); its truth is :func:`tracr_circuit`."""
    truth = tracr_circuit(program)  # also checks that program is a TracrProgram
    check_positive_int("max_inputs", max_inputs, allow_none=True)
    lengths = list(range(1, program.max_seq_len + 1)) if lengths is None else list(lengths)
    g = torch.Generator().manual_seed(seed)
    groups = []
    for n in lengths:
        inputs = program.inputs([n])
        if max_inputs is not None and len(inputs) > max_inputs:
            keep = torch.randperm(len(inputs), generator=g)[:max_inputs].sort().values.tolist()
            inputs = [inputs[i] for i in keep]
        if len(inputs) < 2:
            raise ArgumentError(f"length {n} has {len(inputs)} input; a resample partner needs at least 2")
        ids = program.encode(inputs).cpu()
        answers = None
        if not program.numerical:
            col = {v: j for j, v in enumerate(program.output_values)}
            answers = torch.tensor([[col[v] for v in out] for out in program.expected(inputs)])
        groups.append(_group(ids, _derangement(len(inputs), g), answers, range(1, n + 1)))
    what = "the value (numerical)" if program.numerical else "the program's output"
    return DiscoveryTask(
        name=program.name,
        model=program.model,
        truth=truth,
        groups=tuple(groups),
        connected=tracr_circuit(program, ignored=()),
        description=f"tracr {program.name}: every output position of inputs of lengths {lengths}; M = margin of {what}",
    )


def induction_task(
    model: Model, *, circuit: Optional[TrueCircuit] = None, n_seqs: int = 8, n: Optional[int] = None, seed: int = 1
) -> DiscoveryTask:
    """The induction task of an attention-only toy (module docstring); its truth is :func:`induction_circuit`
    (found with its own seed; ``seed`` here draws the task's sequences)."""
    from interp.toy import repeated_tokens

    check_positive_int("n_seqs", n_seqs)
    if n_seqs < 2:
        raise ArgumentError(f"n_seqs={n_seqs} must be at least 2 (each sequence needs a resample partner)")
    truth = induction_circuit(model) if circuit is None else circuit
    n = (model.arch.n_ctx - 1) // 2 if n is None else n
    g = torch.Generator().manual_seed(seed)
    rep = repeated_tokens(n_seqs, n, model.arch.d_vocab, generator=g)  # [n_seqs, 2n + 1]
    positions = list(range(n + 1, 2 * n))
    answers = rep[:, [q + 1 for q in positions]]
    group = _group(rep, _derangement(n_seqs, g), answers, positions)
    return DiscoveryTask(
        name="induction",
        model=model,
        truth=truth,
        groups=(group,),
        description=f"{model.name}: {n_seqs} repeated sequences of {n} words, positions "
        f"{n + 1}…{2 * n - 1}; M = margin of the next (repeated) token",
    )
