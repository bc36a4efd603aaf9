"""RASP programs compiled by tracr: the models whose circuits are known by construction.

Each program of :data:`PROGRAMS` is compiled with ``tracr.compiler.compiling.compile_rasp_to_model``
(non-causal, BOS ``"BOS"``, the programs of tracr's ``compiler.lib``) and loaded as an interp
:class:`~interp.models.Model` by :func:`interp.models.internal.model_from_tracr`. Its input is
``BOS x_1 … x_n`` (n ≤ ``max_seq_len``); its output at position i ≥ 1 is the program's value at
x_i: ``argmax_j logits[i, j]`` decoded by the output encoder (categorical), or ``logits[i, 0]``
itself (numerical: ``frac_prevs``, whose unembedding reads the output's one residual dimension).

=============  ==========================================================  ==============  ====
name           program (tracr ``lib``)                                     vocab           n
=============  ==========================================================  ==============  ====
reverse        ``make_reverse(tokens)`` — length, opp_idx, reversal head   {1, 2, 3}       5
frac_prevs     ``make_frac_prevs(tokens == "x")`` — numerical mean head    {w, x, y, z}    5
sort           ``make_sort(tokens, tokens, max_seq_len=5, min_key=1)``     {1, 2, 3}       5
hist           ``make_hist()`` — selector width of same-token              {a, b, c}       5
=============  ==========================================================  ==============  ====

Your own program: ``compile_program(sop, vocab=..., max_seq_len=...)`` compiles any RASP SOp (e.g. tracr's
``lib.make_shuffle_dyck`` or ``lib.make_count_less_freq``); the unembedding reads the subspace of the
program's own label (``sop.label``), or ``output_label`` where you need another.

reverse and frac_prevs ("proportion") with these vocabularies are the tracr tasks of ACDC
(Conmy et al. 2023, section 4.1). Compiling needs the optional ``groundtruth`` extra
(``pip install 'interp[groundtruth]'``: tracr-pypi, a CPU jax, dm-haiku, chex); tracr and jax are
imported only here, lazily — ``import interp`` never imports them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp._validate import is_int
from interp.engine import readout
from interp.engine.internal import Engine
from interp.errors import ArgumentError, MissingPackageError
from interp.models import Model
from interp.models.internal import model_from_tracr, tracr_is_numerical, tracr_output_label

__all__ = ["ProgramSpec", "PROGRAMS", "TracrProgram", "compile_program", "program_names"]

Value = Union[int, str, float]

BOS = "BOS"
INSTALL_HINT = "pip install 'interp[groundtruth]'  (tracr-pypi, jax[cpu], dm-haiku, chex)"


def _tracr() -> tuple[Any, Any, Any]:
    """tracr's ``compiling``, ``lib`` and ``rasp`` modules, or a MissingPackageError naming the extra."""
    try:
        from tracr.compiler import compiling, lib
        from tracr.rasp import rasp
    except ImportError as e:
        raise MissingPackageError(
            f"compiling RASP programs needs tracr and jax ({e}); install them with {INSTALL_HINT}"
        ) from e
    return compiling, lib, rasp


@dataclass(frozen=True)
class ProgramSpec:
    """How to build and compile one program: ``build(lib, rasp)`` returns the RASP SOp."""

    name: str
    build: Callable[[Any, Any], Any]
    vocab: tuple[Value, ...]
    max_seq_len: int
    description: str


PROGRAMS: dict[str, ProgramSpec] = {
    s.name: s
    for s in (
        ProgramSpec(
            "reverse",
            lambda lib, rasp: lib.make_reverse(rasp.tokens),
            (1, 2, 3),
            5,
            "reverse the sequence: length (selector width), opp_idx = length - index - 1, "
            "then a head at query opp_idx reading the token at key index",
        ),
        ProgramSpec(
            "frac_prevs",
            lambda lib, rasp: lib.make_frac_prevs(rasp.tokens == "x"),
            ("w", "x", "y", "z"),
            5,
            "fraction of the tokens so far that are 'x' (numerical output)",
        ),
        ProgramSpec(
            "sort",
            lambda lib, rasp: lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=5, min_key=1),
            (1, 2, 3),
            5,
            "sort the tokens (keys made unique by + index / max_seq_len)",
        ),
        ProgramSpec(
            "hist",
            lambda lib, rasp: lib.make_hist(),
            ("a", "b", "c"),
            5,
            "how many times each position's token occurs in the sequence",
        ),
    )
}


def program_names() -> list[str]:
    """The names :func:`compile_program` accepts."""
    return list(PROGRAMS)


@dataclass(frozen=True, eq=False)
class TracrProgram:
    """A compiled RASP program: the interp ``model``, the RASP ``program`` and tracr's ``compiled``
    model (for its encoders and its own forward pass), with encode / run / decode helpers.

    ``residual_labels`` are tracr's labels of the residual dimensions (sorted; ``"name:value"`` or
    ``"name"`` for numerical SOps); ``output_label`` names the output SOp's subspace;
    ``output_values[j]`` is the value that logit column j stands for (empty when ``numerical``).
    """

    name: str
    program: Any
    compiled: Any
    model: Model
    vocab: tuple[Value, ...]
    max_seq_len: int
    residual_labels: tuple[str, ...]
    output_label: str
    numerical: bool
    output_values: tuple[Value, ...]
    bos: str = BOS

    @property
    def bos_label(self) -> str:
        """The residual dimension of the BOS token (``"tokens:BOS"``)."""
        return f"tokens:{self.bos}"

    def inputs(self, lengths: Optional[Sequence[int]] = None) -> list[tuple[Value, ...]]:
        """Every input sequence over the vocabulary with a length in ``lengths`` (default 1…max_seq_len)."""
        lengths = range(1, self.max_seq_len + 1) if lengths is None else lengths
        for n in lengths:
            if not is_int(n) or not 1 <= n <= self.max_seq_len:
                raise ArgumentError(f"lengths has {n!r}; lengths are ints in [1, {self.max_seq_len}]")
        return [seq for n in lengths for seq in itertools.product(self.vocab, repeat=n)]

    def encode(self, inputs: Sequence[Sequence[Value]]) -> Int[Tensor, "batch pos"]:
        """Token ids ``[BOS, x_1, …, x_n]`` of equal-length sequences (no padding)."""
        seqs = [list(s) for s in inputs]
        if not seqs or len({len(s) for s in seqs}) != 1 or not 1 <= len(seqs[0]) <= self.max_seq_len:
            raise ArgumentError(
                f"inputs must be a non-empty list of sequences of one length in [1, {self.max_seq_len}]; "
                f"got lengths {sorted({len(s) for s in seqs})}"
            )
        bad = sorted({repr(v) for s in seqs for v in s if v not in self.vocab})
        if bad:
            raise ArgumentError(f"inputs has values {bad[:5]} outside the vocabulary {list(self.vocab)}")
        ids = [self.compiled.input_encoder.encode([self.bos, *s]) for s in seqs]
        return torch.tensor(ids, dtype=torch.long, device=self.model.device)

    def logits(self, inputs: Sequence[Sequence[Value]]) -> Float[Tensor, "batch pos n_out"]:
        """The model's logits (the engine's forward: its final residual read out) for equal-length ``inputs``."""
        ids = self.encode(inputs)
        return readout(self.model, Engine.of(self.model).run(ids, torch.ones_like(ids)).final)

    def decode(self, logits: Float[Tensor, "batch pos n_out"]) -> list[list[Value]]:
        """Outputs at positions 1… (BOS dropped): decoded argmax (categorical) or ``logits[..., 0]``."""
        if self.numerical:
            return [[float(v) for v in row[1:, 0]] for row in logits]
        return [[self.output_values[int(j)] for j in row[1:]] for row in logits.argmax(-1)]

    def run(self, inputs: Sequence[Sequence[Value]]) -> list[list[Value]]:
        """The model's decoded outputs for equal-length ``inputs``."""
        return self.decode(self.logits(inputs))

    def expected(self, inputs: Sequence[Sequence[Value]]) -> list[list[Value]]:
        """The RASP program's outputs (``rasp.evaluate``), the reference the model must reproduce."""
        _, _, rasp = _tracr()
        return [list(rasp.evaluate(self.program, list(s))) for s in inputs]


def compile_program(
    program: Any,
    *,
    vocab: Optional[Sequence[Value]] = None,
    max_seq_len: Optional[int] = None,
    output_label: Optional[str] = None,
    device: Union[str, torch.device] = "cpu",
    dtype: torch.dtype = torch.float32,
) -> TracrProgram:
    """Compile ``program`` with tracr and load it as a Model: a shipped name (one of :func:`program_names`,
    which brings its own vocabulary and length) or your own tracr RASP program (a ``rasp.SOp``, e.g. one of
    ``tracr.compiler.lib``'s) with its input ``vocab`` and ``max_seq_len``.

    The unembedding reads the output SOp's residual subspace, found by the program's own label
    (``program.label``); ``output_label`` names another subspace where a user needs one (it must be one of
    the compiled model's residual names). The result feeds :func:`tracr_task` / :func:`edge_ranking` as a
    shipped program does.
    """
    compiling, lib, rasp = _tracr()
    if isinstance(program, str):
        sop, name, values, n, description = _shipped_program(program, vocab, max_seq_len, lib, rasp)
    else:
        sop, name, values, n, description = _own_program(program, vocab, max_seq_len, rasp)
    if output_label is not None and not isinstance(output_label, str):
        raise ArgumentError(f"output_label={output_label!r} must be a residual subspace name (a str) or None")
    try:
        compiled = compiling.compile_rasp_to_model(sop, vocab=set(values), max_seq_len=n, compiler_bos=BOS)
    except (ValueError, TypeError, KeyError, NotImplementedError) as e:
        raise ArgumentError(
            f"program={name!r}: tracr cannot compile it with vocab={list(values)}, max_seq_len={n}: {e}"
        ) from e
    numerical = tracr_is_numerical(compiled)
    label = tracr_output_label(compiled, output_label if output_label is not None else str(sop.label))
    out_values: tuple[Value, ...] = ()
    if not numerical:
        by_column = {int(j): v for v, j in compiled.output_encoder.encoding_map.items()}
        out_values = tuple(by_column[j] for j in range(len(by_column)))
    model = model_from_tracr(
        compiled,
        name=f"tracr-{name}",
        output_label=label,
        device=device,
        dtype=dtype,
        source=f"tracr-compiled RASP program {name!r}: {description}",
    )
    return TracrProgram(
        name=name,
        program=sop,
        compiled=compiled,
        model=model,
        vocab=tuple(values),
        max_seq_len=n,
        residual_labels=tuple(compiled.residual_labels),
        output_label=label,
        numerical=numerical,
        output_values=out_values,
    )


#: What :func:`compile_program` compiles: (the SOp, its name, the input vocabulary, max_seq_len, a description).
_Source = tuple[Any, str, tuple[Value, ...], int, str]


def _shipped_program(program: str, vocab: Any, max_seq_len: Any, lib: Any, rasp: Any) -> _Source:
    """A shipped program by name, built with its own vocabulary and length (which the caller must not pass)."""
    if program not in PROGRAMS:
        raise ArgumentError(
            f"program={program!r} is not a known program; choose one of {program_names()} or "
            "pass a tracr RASP program (rasp.SOp) with vocab= and max_seq_len="
        )
    for arg, v in (("vocab", vocab), ("max_seq_len", max_seq_len)):
        if v is not None:
            raise ArgumentError(
                f"{arg}={v!r}: the shipped program {program!r} has its own {arg} "
                f"({getattr(PROGRAMS[program], arg)!r}); {arg} is for a RASP program you pass"
            )
    spec = PROGRAMS[program]
    return spec.build(lib, rasp), program, spec.vocab, spec.max_seq_len, spec.description


def _own_program(program: Any, vocab: Any, max_seq_len: Any, rasp: Any) -> _Source:
    """A user's RASP SOp with its checked ``vocab`` (a set sorted, a sequence in order, duplicates dropped) and
    ``max_seq_len``."""
    if not isinstance(program, rasp.SOp):
        raise ArgumentError(
            f"program={type(program).__name__} must be a shipped name ({program_names()}) or a "
            "tracr RASP program (a rasp.SOp, e.g. tracr.compiler.lib.make_sort_unique(...))"
        )
    if (
        vocab is None
        or isinstance(vocab, (str, bytes))
        or not isinstance(vocab, (set, frozenset, list, tuple))
        or len(vocab) == 0
    ):
        raise ArgumentError(
            f"vocab={vocab!r} must be a non-empty set or sequence of the program's input "
            "values (e.g. {1, 2, 3} or ['a', 'b'])"
        )
    if not is_int(max_seq_len) or max_seq_len < 1:
        raise ArgumentError(
            f"max_seq_len={max_seq_len!r} must be a positive int: the longest input the "
            "compiled model reads (BOS not counted)"
        )
    if BOS in vocab:
        raise ArgumentError(f"vocab has {BOS!r}, the compiler's BOS token; use other values")
    name = str(program.label)
    values = (
        tuple(sorted(set(vocab), key=lambda v: (type(v).__name__, v)))
        if isinstance(vocab, (set, frozenset))
        else tuple(dict.fromkeys(vocab))
    )
    return program, name, values, int(max_seq_len), f"RASP program {name!r}"
