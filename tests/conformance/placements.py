"""The axes of the conformance matrix: model kinds, placements and grad modes, and the model of each cell.

A placement is a way a user holds the same weights: in memory in float32 (the reference), float64, bfloat16,
disk-offloaded through accelerate (saved as safetensors, loaded with ``device_map="auto"`` and a ``max_memory``
that fits the embedding and one block, so the rest is read back from disk as the catalog models are), without a
tokenizer (every input given as token ids), and in float32 under the CPU-side device guard (no tensor made inside
interp without ``device=``). Every kind is built from the same seed in each placement, so the values must agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import torch

import interp
from interp.engine import model_from_hf
from interp.dictionaries._corpus import token_rows  # how a text corpus is cut into rows (the ids placement's rows)
from tiny_models import tiny_hf_model, tiny_tokenizer

#: the row length of the dictionary scoring calls (calls.py)
SEQ_LEN = 6
#: model kind → the tiny family (or catalog toy) it is built from
KINDS = {
    "pre-norm": "llama",  # RMSNorm, GQA, RoPE
    "sandwich": "gemma3_text",  # sandwich norms, QK-norm, (1 + w) gains, MQA
    "post-norm": "bert",  # post-norm encoder, no unembedding
    "moe": "mixtral",  # mixture-of-experts MLPs
    "attn-only": "toy-attn-only-2l",  # the catalog's 2-layer attention-only toy (no norms, no MLP)
}
PLACEMENTS = ("fp32", "fp64", "bf16", "offload", "ids", "guard")
REFERENCE = "fp32"
GRAD_MODES: dict[str, Callable[[], Any]] = {
    "enabled": torch.enable_grad,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}
DTYPES = {"fp64": torch.float64, "bf16": torch.bfloat16}


def dtype_of(placement: str) -> torch.dtype:
    return DTYPES.get(placement, torch.float32)


def tolerance(placement: str) -> tuple[float, float]:
    """(relative, absolute) tolerance of a value against the float32 reference: |x − ref| ≤ rel · max |ref| + abs.
    For every float32 or float64 placement float32 rounding (the reference itself carries it; the absolute part
    covers a small difference of unit-scale numbers, e.g. a KL of 1e-5 nats); for bfloat16, 32 of its epsilons
    (2⁻⁷ each: a 2-layer forward's rounding) both relative and at unit scale."""
    if placement == "bf16":
        t = 32 * torch.finfo(torch.bfloat16).eps
        return t, t
    return 1e-4, 1e-5


@functools.cache
def _toy(dtype: torch.dtype) -> interp.Model:
    return interp.load_model(KINDS["attn-only"], dtype=dtype)


@functools.cache
def _offload_dir(family: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"conformance-{family}-"))
    tiny_hf_model(family).save_pretrained(d)
    tiny_tokenizer().save_pretrained(d)
    return d


def _offloaded(family: str) -> interp.Model:
    """The tiny model placed by accelerate with room for about one block and a half on the CPU: the embedding and
    block 0 stay, the later blocks (and whatever follows them) are read back from the checkpoint's safetensors."""
    d = _offload_dir(family)
    try:
        interp.load_model(str(d), device_map="auto", max_memory={"cpu": 1}, offload_folder=str(d / "off"))
    except interp.errors.MemoryCapError as e:  # the message names one block's size: allow two and a half
        block = int(re.search(r"at least (\d+) KiB", str(e)).group(1)) * 1024
    m = interp.load_model(
        str(d), device_map="auto", max_memory={"cpu": int(1.5 * block)}, offload_folder=str(d / "off")
    )
    assert "disk" in set(getattr(m.bridge.original_model, "hf_device_map", {}).values()), f"{family} not offloaded"
    return m


@functools.cache
def model(kind: str, placement: str) -> interp.Model:
    """The model of ``kind`` in ``placement`` (cached: results never hold the model, and analyses must not change it).
    Raises an InterpError where the placement is refused by design (a toy model cannot be offloaded)."""
    family = KINDS[kind]
    if kind == "attn-only":
        if placement == "offload":
            return interp.load_model(family, device_map="auto", offload_folder=tempfile.mkdtemp())
        toy = _toy(dtype_of(placement))
        return dataclasses.replace(toy, tokenizer=None) if placement == "ids" else toy
    if placement == "offload":
        return _offloaded(family)
    dtype = dtype_of(placement)
    hf = tiny_hf_model(family, dtype=dtype)
    return model_from_hf(hf, None if placement == "ids" else tiny_tokenizer(), name=f"tiny-{family}", dtype=dtype)


@contextlib.contextmanager
def guarded(placement: str, violations: dict):
    """The CPU-side device guard around a cell of the ``guard`` placement (violations collected into ``violations``)."""
    if placement != "guard":
        yield
        return
    from device.guard import HostTensorGuard

    with HostTensorGuard(raise_=False) as g:
        yield
    violations.update(g.violations)


def words(kind: str) -> list[str]:
    """Eight distinct single-token words of the kind's vocabulary."""
    if kind == "attn-only":
        return ["cat", "dog", "sun", "moon", "tree", "leaf", "rock", "bird"]
    return [f"w{i}" for i in (11, 12, 13, 14, 15, 16, 17, 18)]


@dataclasses.dataclass
class Inputs:
    """The arguments of one cell: text (or, in the ``ids`` placement, the reference's token ids for the same text)."""

    prompt: Any  # one prompt
    clean: Any  # two prompts of one length
    corrupt: Any  # the same two with their last two words changed
    answer: Any  # a per-prompt answer / wrong token: strings, or ids
    wrong: Any
    one: Any  # one token (the first prompt's answer)
    texts: list[str]  # training text (a corpus is text in every placement)
    contexts: Any  # texts to search contexts in: the texts, or their ids (a row each)
    rows: Any  # texts to score a dictionary on: the texts, or the rows of seq_len ids the reference cuts them into
    tmp: Path


def inputs(kind: str, placement: str, tmp: Path, ref: Optional[interp.Model] = None) -> Inputs:
    w = words(kind)
    prompt = " ".join(w[:4] + w[:2])
    clean = [" ".join(w[:4] + w[:2]), " ".join(w[4:8] + w[4:6])]
    corrupt = [" ".join(w[:4] + w[6:8]), " ".join(w[4:8] + w[:2])]
    answer, wrong = [w[2], w[6]], [w[3], w[7]]
    texts = [" ".join(w[i:] + w[:i]) for i in range(4)]
    if placement != "ids":
        return Inputs(prompt, clean, corrupt, answer, wrong, w[2], texts, texts, texts, tmp)
    assert ref is not None and ref.tokenizer is not None
    ids = lambda t: ref.to_tokens(t)  # noqa: E731
    tok = lambda s: int(ref.tokenizer(s, add_special_tokens=False)["input_ids"][0])  # noqa: E731
    return Inputs(
        ids(prompt),
        ids(clean),
        ids(corrupt),
        [tok(a) for a in answer],
        [tok(a) for a in wrong],
        tok(w[2]),
        texts,
        ids(texts),
        token_rows(ref, texts, SEQ_LEN),
        tmp,
    )
