"""The bad-input matrix (issue 9): every case must raise one specific InterpError subclass whose
message names the offending argument — never a raw torch/IndexError/KeyError/TypeError — within
a time limit (no hang), and leave no file behind (neither in the target directory nor the cwd).

Cases run against tiny models (GPT-2-like, Llama-like with GQA, BERT post-norm, and a copy of the
GPT-2 one without a tokenizer). A second group checks that unusual but *valid* inputs
(non-contiguous ids and directions, uint8 ids, id lists, a bf16 model) work and agree with the
ordinary ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import plotly.graph_objects as go
import pytest
import torch
from safetensors.torch import save_file

import interp
from interp.attribution import LogitAttribution, attribute_direction, attribute_logits
from interp.errors import (
    ArgumentError,
    ExportError,
    InterpError,
    LabelError,
    ModelLoadError,
    ModelNotFoundError,
    ResultFormatError,
    ShapeError,
    UnsupportedOperationError,
)
from interp.plots import attention_patterns, export
from interp.stream import Decomposition, trace
from tiny_models import tiny_model

TIME_LIMIT_S = 60  # a case that takes longer is a hang


@dataclass
class Env:
    gpt2: Any
    llama: Any
    bert: Any
    notok: Any  # the GPT-2 model with tokenizer=None
    ids: torch.Tensor  # [2, 5] valid token ids
    dec: Decomposition  # a small decomposition (gpt2, "unembed")
    padded_dec: Decomposition  # of ["w1 w2 w3", "w4"]: prompt 1 has padding
    attr: LogitAttribution
    d: int  # d_model


@pytest.fixture(scope="module")
def env() -> Env:
    gpt2, llama, bert = (tiny_model(f) for f in ("gpt2", "llama", "bert"))
    ids = torch.randint(4, 100, (2, 5), generator=torch.Generator().manual_seed(0))
    return Env(
        gpt2=gpt2, llama=llama, bert=bert, notok=dataclasses.replace(gpt2, tokenizer=None), ids=ids,
        dec=trace(gpt2, ids).decompose("unembed"),
        padded_dec=trace(gpt2, ["w1 w2 w3", "w4"]).decompose("unembed"),
        attr=attribute_logits(gpt2, ids, answer=5, wrong=6), d=gpt2.arch.d_model,
    )


@dataclass(frozen=True)
class Bad:
    id: str
    error: type
    arg: str  # the message must name this argument
    make: Callable[[Env, Path], Callable[[], Any]]  # (env, tmp dir) -> the call; setup happens in make


def _truncated_copy(e: Env, tmp: Path) -> Path:
    good = e.dec.save(tmp / "good.safetensors")
    data = good.read_bytes()
    bad = tmp / "truncated.safetensors"
    bad.write_bytes(data[: len(data) // 2])
    good.unlink()
    return bad


def _header_file(tmp: Path, meta: dict[str, str]) -> Path:
    p = tmp / "header.safetensors"
    save_file({"contributions": torch.ones(2)}, str(p), metadata=meta)
    return p


META = torch.ones(3, device="meta")
NAN = float("nan")

CASES = [
    # ---- load_model -------------------------------------------------------------------
    Bad("load_model: empty name", ArgumentError, "name_or_path", lambda e, t: lambda: interp.load_model("")),
    Bad("load_model: int name", ArgumentError, "name_or_path", lambda e, t: lambda: interp.load_model(3)),
    Bad("load_model: missing path", ModelNotFoundError, "name_or_path",
        lambda e, t: lambda: interp.load_model(str(t / "no" / "such" / "model"))),
    Bad("load_model: misspelt catalog name", ModelNotFoundError, "name_or_path",
        lambda e, t: lambda: interp.load_model("smollm2-135")),
    Bad("load_model: meta device", ArgumentError, "device",
        lambda e, t: lambda: interp.load_model("smollm2-135m", device="meta")),
    Bad("load_model: cuda without cuda", ArgumentError, "device",
        lambda e, t: lambda: interp.load_model("smollm2-135m", device="cuda:3")),
    Bad("load_model: int dtype", ArgumentError, "dtype",
        lambda e, t: lambda: interp.load_model("smollm2-135m", dtype=torch.int32)),
    Bad("load_model: dtype as string", ArgumentError, "dtype",
        lambda e, t: lambda: interp.load_model("smollm2-135m", dtype="float32")),
    Bad("load_model: folder without config.json", ModelLoadError, "name_or_path",
        lambda e, t: (lambda: interp.load_model(str(t))) if (t / "weights.bin").write_bytes(b"x") else None),
    Bad("load_model: truncated .gguf", ModelLoadError, "path",
        lambda e, t: (lambda: interp.load_model(str(t / "m.gguf"), cache_dir=t / "cache"))
        if (t / "m.gguf").write_bytes(b"GGUF\x03\x00\x00\x00trunc") else None),
    Bad("load_model: missing .gguf", ModelNotFoundError, "name_or_path",
        lambda e, t: lambda: interp.load_model(str(t / "absent.gguf"))),
    # ---- trace: inputs ------------------------------------------------------------------
    Bad("trace: text on a tokenizer-less model", UnsupportedOperationError, "inputs",
        lambda e, t: lambda: trace(e.notok, "w1 w2")),
    Bad("trace: meta-device ids", ShapeError, "inputs",
        lambda e, t: lambda: trace(e.gpt2, e.ids.to("meta"))),
    Bad("trace: meta-device mask", ShapeError, "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.ones(2, 5, dtype=torch.long, device="meta"))),
    Bad("trace: float ids", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids.float())),
    Bad("trace: bool ids", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids > 50)),
    Bad("trace: 3-D ids", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids[None])),
    Bad("trace: id >= d_vocab", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids + 100)),
    Bad("trace: negative id", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids - 50)),
    Bad("trace: empty ids", ArgumentError, "inputs",
        lambda e, t: lambda: trace(e.gpt2, torch.zeros(1, 0, dtype=torch.long))),
    Bad("trace: longer than n_ctx", ArgumentError, "inputs",
        lambda e, t: lambda: trace(e.gpt2, torch.ones(1, 65, dtype=torch.long))),
    Bad("trace: mask shape", ShapeError, "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.ones(2, 4, dtype=torch.long))),
    Bad("trace: mask not 0/1", ArgumentError, "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.full((2, 5), 0.5))),
    Bad("trace: mask row all padding", ArgumentError, "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.tensor([[1] * 5, [0] * 5]))),
    Bad("trace: mask given with text", ArgumentError, "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, "w1 w2", attention_mask=torch.ones(1, 3, dtype=torch.long))),
    Bad("trace: mask is a string", ShapeError, "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask="all")),
    Bad("trace: dict inputs", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, {"text": "w1"})),
    Bad("trace: None inputs", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, None)),
    Bad("trace: ragged id lists", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, [[5, 6], [7]])),
    Bad("trace: blank prompt", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, ["w1", "  "])),
    Bad("trace: model is None", ArgumentError, "model", lambda e, t: lambda: trace(None, e.ids)),
    Bad("trace: model is the bridge", ArgumentError, "model", lambda e, t: lambda: trace(e.gpt2.bridge, e.ids)),
    Bad("trace: neurons out of range", ArgumentError, "neurons", lambda e, t: lambda: trace(e.gpt2, e.ids, neurons=[7])),
    Bad("trace: neurons='all'", ArgumentError, "neurons", lambda e, t: lambda: trace(e.gpt2, e.ids, neurons="all")),
    # ---- trace / decompose: directions ----------------------------------------------------
    Bad("trace: NaN in project_onto", ArgumentError, "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids, project_onto=torch.full((1, e.d), NAN))),
    Bad("decompose: inf in project_onto", ArgumentError, "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.tensor([float("inf")] * e.d))),
    Bad("decompose: project_onto of the wrong width", ShapeError, "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(2, e.d + 1))),
    Bad("decompose: int project_onto", ShapeError, "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(2, e.d, dtype=torch.long))),
    Bad("decompose: meta-device project_onto", ShapeError, "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(2, e.d, device="meta"))),
    Bad("decompose: project_onto batch mismatch", ShapeError, "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(3, 1, e.d))),
    Bad("decompose: unknown label", LabelError, "read_label",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("L9.attn.q[H0]")),
    Bad("decompose: a hook name that is not a read", LabelError, "read_label",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("blocks.0.attn.hook_z")),
    Bad("decompose: int label", LabelError, "read_label", lambda e, t: lambda: trace(e.gpt2, e.ids).decompose(3)),
    # ---- Decomposition -------------------------------------------------------------------
    Bad("Decomposition[]: unknown term", LabelError, "label", lambda e, t: lambda: e.dec["L9.H0"]),
    Bad("Decomposition.top: k=0", ArgumentError, "k", lambda e, t: lambda: e.dec.top(0)),
    Bad("Decomposition.to_dataframe: float pos", ArgumentError, "pos", lambda e, t: lambda: e.dec.to_dataframe(pos=1.5)),
    Bad("Decomposition.to_dataframe: str batch", ArgumentError, "batch", lambda e, t: lambda: e.dec.to_dataframe(batch="0")),
    Bad("Decomposition.to_dataframe: batch out of range", ArgumentError, "batch",
        lambda e, t: lambda: e.dec.to_dataframe(batch=9)),
    Bad("Decomposition.to_dataframe: padding position", ArgumentError, "pos",
        lambda e, t: lambda: e.padded_dec.to_dataframe(batch=1, pos=-1)),
    # ---- attribute_logits ---------------------------------------------------------------
    Bad("attribute_logits: multi-token answer", ArgumentError, "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer="w1 w2")),
    Bad("attribute_logits: answer id >= d_vocab", ArgumentError, "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=100)),
    Bad("attribute_logits: bool answer", ArgumentError, "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=True)),
    Bad("attribute_logits: answer None", ArgumentError, "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=None)),
    Bad("attribute_logits: float answer tensor", ArgumentError, "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=torch.tensor(3.0))),
    Bad("attribute_logits: meta answer tensor", ShapeError, "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=torch.tensor([3, 4], device="meta"))),
    Bad("attribute_logits: answer string without tokenizer", ArgumentError, "answer",
        lambda e, t: lambda: attribute_logits(e.notok, e.ids, answer="w3")),
    Bad("attribute_logits: wrong of the wrong length", ArgumentError, "wrong",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, wrong=[6, 7, 8])),
    Bad("attribute_logits: pos out of range", ArgumentError, "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos=5)),
    Bad("attribute_logits: float pos", ArgumentError, "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos=1.5)),
    Bad("attribute_logits: pos='last'", ArgumentError, "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos="last")),
    Bad("attribute_logits: pos at padding", ArgumentError, "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, ["w1 w2 w3", "w4"], answer=5, pos=[1, 3])),
    Bad("attribute_logits: meta pos", ShapeError, "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos=torch.tensor(1, device="meta"))),
    Bad("attribute_logits: unknown unit", ArgumentError, "unit",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, unit="layer")),
    Bad("attribute_logits: batch_size=0", ArgumentError, "batch_size",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, batch_size=0)),
    Bad("attribute_logits: progress='yes'", ArgumentError, "progress",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, progress="yes")),
    Bad("attribute_logits: encoder without unembedding", UnsupportedOperationError, "model",
        lambda e, t: lambda: attribute_logits(e.bert, e.ids, answer=5)),
    Bad("attribute_logits: text on a tokenizer-less model", UnsupportedOperationError, "inputs",
        lambda e, t: lambda: attribute_logits(e.notok, "w1 w2", answer=5)),
    Bad("attribute_logits: empty prompt list", ArgumentError, "inputs",
        lambda e, t: lambda: attribute_logits(e.gpt2, [], answer=5)),
    Bad("attribute_logits: model is a string", ArgumentError, "model",
        lambda e, t: lambda: attribute_logits("tiny-gpt2", e.ids, answer=5)),
    # ---- attribute_direction ------------------------------------------------------------
    Bad("attribute_direction: NaN direction", ArgumentError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.full((e.d,), NAN))),
    Bad("attribute_direction: inf direction", ArgumentError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.tensor([float("-inf")] + [0.0] * (e.d - 1)))),
    Bad("attribute_direction: wrong width", ShapeError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d - 1))),
    Bad("attribute_direction: int direction", ShapeError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d, dtype=torch.long))),
    Bad("attribute_direction: string direction", ShapeError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, "up")),
    Bad("attribute_direction: scalar direction", ShapeError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.tensor(1.0))),
    Bad("attribute_direction: meta direction", ShapeError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d, device="meta"))),
    Bad("attribute_direction: rows != prompts", ShapeError, "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(3, e.d))),
    Bad("attribute_direction: pos='max'", ArgumentError, "pos",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d), pos="max")),
    Bad("attribute_direction: float pos", ArgumentError, "pos",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d), pos=0.5)),
    Bad("attribute_direction: unit='neuron'", ArgumentError, "unit",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d), unit="neuron")),
    # ---- LogitAttribution ----------------------------------------------------------------
    Bad("LogitAttribution[]: unknown term", LabelError, "label", lambda e, t: lambda: e.attr["L5.H9"]),
    Bad("LogitAttribution.top: k=-1", ArgumentError, "k", lambda e, t: lambda: e.attr.top(-1)),
    Bad("LogitAttribution.head_matrix: prompt out of range", ArgumentError, "prompt",
        lambda e, t: lambda: e.attr.head_matrix(prompt=9)),
    # ---- save / load ---------------------------------------------------------------------
    Bad("save: non-.safetensors path", ExportError, "path", lambda e, t: lambda: e.dec.save(t / "d.pt")),
    Bad("save: missing directory", ExportError, "path", lambda e, t: lambda: e.attr.save(t / "nodir" / "a.safetensors")),
    Bad("save: path is an int", ExportError, "path", lambda e, t: lambda: e.dec.save(3)),
    Bad("load: missing file", ResultFormatError, "path", lambda e, t: lambda: Decomposition.load(t / "none.safetensors")),
    Bad("load: truncated file", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(_truncated_copy(e, t))),
    Bad("load: wrong result class", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: LogitAttribution.load(p))(e.dec.save(t / "d.safetensors"))),
    Bad("load: plain safetensors file", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(_header_file(t, {}))),
    Bad("load: damaged JSON header", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(t, {"format": "interp-result-v1", "class": "Decomposition", "fields": "{oops"}))),
    Bad("load: header without fields", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(t, {"format": "interp-result-v1", "class": "Decomposition"}))),
    Bad("load: fields not an object", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(t, {"format": "interp-result-v1", "class": "Decomposition", "fields": "[1, 2]"}))),
    Bad("load: missing fields", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(t, {"format": "interp-result-v1", "class": "Decomposition", "fields": json.dumps({"point": "x"})}))),
    Bad("load: non-.safetensors file of garbage", ResultFormatError, "path",
        lambda e, t: (lambda p: lambda: LogitAttribution.load(p))(
            (t / "notes.txt", (t / "notes.txt").write_text("hello"))[0])),
    Bad("load: a directory", ResultFormatError, "path", lambda e, t: lambda: Decomposition.load(t)),
    Bad("load: path is None", ResultFormatError, "path", lambda e, t: lambda: Decomposition.load(None)),
    # ---- plots / export ------------------------------------------------------------------
    Bad("export: unknown suffix", ArgumentError, "path",
        lambda e, t: lambda: export(go.Figure(go.Bar(y=[1])), t / "fig.docx")),
    Bad("export: missing directory", ExportError, "path",
        lambda e, t: lambda: export(go.Figure(go.Bar(y=[1])), t / "nodir" / "fig.html")),
    Bad("export: not a figure", ArgumentError, "figure_or_result", lambda e, t: lambda: export(None, t / "fig.html")),
    Bad("export: empty figure", ArgumentError, "figure_or_result", lambda e, t: lambda: export(go.Figure(), t / "f.json")),
    Bad("attention_patterns: head out of range", ArgumentError, "heads",
        lambda e, t: lambda: attention_patterns(e.gpt2, e.ids, ["L0.H9"])),
    Bad("attention_patterns: meta ids", ShapeError, "inputs",
        lambda e, t: lambda: attention_patterns(e.gpt2, e.ids.to("meta"), ["L0.H1"])),
]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def alarm():
    """Turn a hang into a failure (SIGALRM, main thread)."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"bad-input case did not return within {TIME_LIMIT_S} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TIME_LIMIT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_matrix_is_large_and_distinct():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Bad, env: Env, tmp_path: Path, monkeypatch, alarm):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(tmp_path)  # anything written relative to the cwd lands here and is caught
    call = case.make(env, work)
    assert callable(call), "case setup failed"
    before = _files(tmp_path)
    with pytest.raises(InterpError) as info:
        call()
    err = info.value
    assert type(err) is case.error, f"{type(err).__name__}: {err}"
    assert case.arg in str(err), f"message does not name {case.arg!r}: {err}"
    assert _files(tmp_path) == before, f"files left behind: {_files(tmp_path) - before}"
