"""The exceptions interp raises for bad input.

Every error a user can trigger by passing something wrong is an :class:`InterpError`
subclass whose message names the argument, the value it got and what is allowed.
They also subclass the builtin exception a Python user would expect (``ValueError``,
``FileNotFoundError``...), so generic handlers keep working.

Input that is allowed but probably not what was meant (an answer token without its leading space, an
ablation that cannot differ from another, attribution scores far from their completeness target) warns
with an :class:`InterpWarning` subclass instead; the message names the argument, the value and the fix.
Filter them like any warning: ``warnings.simplefilter("ignore", interp.TokenSpacingWarning)``, or
``"error"`` to make them raise.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType
from typing import Optional

__all__ = [
    "InterpError",
    "ArgumentError",
    "LabelError",
    "ShapeError",
    "ModelNotFoundError",
    "ModelLoadError",
    "OfflineError",
    "MissingPackageError",
    "UnsupportedArchitectureError",
    "EngineMismatchError",
    "UnsupportedOperationError",
    "ModelMismatchError",
    "MemoryCapError",
    "ExportError",
    "ResultFormatError",
    "InterpWarning",
    "TokenSpacingWarning",
    "AblationWarning",
    "CompletenessWarning",
    "ContextLengthWarning",
    "MetricGapWarning",
    "VocabularyWarning",
]


class InterpError(Exception):
    """Base class of every error interp raises for bad input."""


class ArgumentError(InterpError, ValueError):
    """An argument has a value that is not allowed (out of range, wrong type, empty...)."""


class LabelError(ArgumentError, KeyError):
    """A read/write label or hook name that does not exist; the message lists valid ones."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ShapeError(ArgumentError):
    """A tensor argument has the wrong shape, dtype or device."""


class ModelNotFoundError(InterpError, FileNotFoundError):
    """A model name or path that is neither in the catalog nor on disk."""


class ModelLoadError(InterpError, RuntimeError):
    """A model file exists but cannot be read (truncated, corrupt, wrong format)."""


class OfflineError(InterpError, ConnectionError):
    """A hub id was requested but the hub cannot be reached."""


class MissingPackageError(InterpError, ImportError):
    """A catalog model's package is not installed; the message gives the pip command."""


class UnsupportedArchitectureError(InterpError, NotImplementedError):
    """The model's architecture is not one of the supported families."""


class EngineMismatchError(UnsupportedArchitectureError):
    """interp's forward of a model differs from the model's own beyond float tolerance (a quirk of the
    model interp does not implement): the message names the first point where they diverge."""


class UnsupportedOperationError(InterpError, TypeError):
    """The operation does not apply to this model (e.g. logits of an encoder without a head)."""


class ModelMismatchError(ArgumentError):
    """A result computed on one model (it names it: ``model_name``) given to an analysis of another model; the
    message names both."""


class MemoryCapError(InterpError, MemoryError):
    """Materialising the requested tensor would exceed the memory cap."""


class ExportError(InterpError, OSError):
    """A figure or result cannot be written to the requested path."""


class ResultFormatError(InterpError, ValueError):
    """A saved result file that is missing, truncated, or holds another kind of result."""


class InterpWarning(UserWarning):
    """Base class of every warning interp gives for input that runs but probably does not mean what was meant."""


class TokenSpacingWarning(InterpWarning):
    """An answer / wrong / metric token without a leading space follows a prompt that does not end in one,
    while its space-prefixed form is a single token (``"Rome"`` after ``"… is"``, where ``" Rome"`` was
    probably meant); the message names the spaced form."""


class AblationWarning(InterpWarning):
    """An ablation that cannot give a different distribution from another one (mean or resample ablation
    over a single reference prompt is that prompt, i.e. the corrupt ablation)."""


class CompletenessWarning(InterpWarning):
    """Attribution scores whose completeness sum is far from what it should add up to (M(corrupt) −
    M(clean)): the first-order estimate is poor; more integration steps or another method is the fix."""


class ContextLengthWarning(InterpWarning):
    """A prompt longer than the sequences its feature dictionaries were trained on: the features' activations
    past that length are out of distribution (the graph still closes exactly, through larger error nodes)."""


class UnknownTokenWarning(InterpWarning):
    """A prompt with words the tokenizer does not know: each became the unknown-word token (``<unk>``), so
    different words read as one token (a small vocabulary, e.g. the toy models', given ordinary English)."""


class MetricGapWarning(InterpWarning):
    """The two runs a result is normalised by give (nearly) the same metric — M(clean) ≈ M(corrupt) (the same
    prompt twice, a corruption that changes nothing the metric reads), or M(all edges) ≈ M(no edges) for
    faithfulness — so the normalised values (x − M(corrupt)) / (M(clean) − M(corrupt)) are undefined (NaN); the
    message gives the two values."""


class VocabularyWarning(InterpWarning):
    """A tokenizer that can produce token ids the model has no embedding for (ids ≥ ``d_vocab``): the model loads,
    and a prompt that tokenises to such an id is refused where inputs are read, naming the id and the token."""


def warn_user(message: str, category: type[InterpWarning]) -> None:
    """``warnings.warn(message, category)`` attributed to the first caller outside interp (the user's line),
    whatever depth of interp's own calls it is given from."""
    frame: Optional[FrameType] = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "interp":
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
