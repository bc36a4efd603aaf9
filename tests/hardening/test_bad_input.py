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
from interp.circuits import (
    composition_scores,
    copying_scores,
    head_operator,
    ov_circuit,
    ov_diagonal_stats,
    qk_circuit,
    random_rotation,
    rotate_residual,
    virtual_weights,
)
from interp.circuits._path_expansion import path_expansion
from interp.errors import MemoryCapError
from interp.toy import ToyConfig, build_toy, load_toy, save_toy
from interp.plots import export
from interp.stream import Decomposition, attention_patterns, trace
from tiny_models import tiny_model

TIME_LIMIT_S = 60  # a case that takes longer is a hang


@dataclass
class Env:
    toy: Any  # a 2-layer attention-only toy
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
    toy = build_toy(ToyConfig(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=12, n_ctx=8))
    return Env(
        toy=toy,
        gpt2=gpt2,
        llama=llama,
        bert=bert,
        notok=dataclasses.replace(gpt2, tokenizer=None),
        ids=ids,
        dec=trace(gpt2, ids).decompose("unembed"),
        padded_dec=trace(gpt2, ["w1 w2 w3", "w4"]).decompose("unembed"),
        attr=attribute_logits(gpt2, ids, answer=5, wrong=6),
        d=gpt2.arch.d_model,
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
    Bad(
        "load_model: missing path",
        ModelNotFoundError,
        "name_or_path",
        lambda e, t: lambda: interp.load_model(str(t / "no" / "such" / "model")),
    ),
    Bad(
        "load_model: misspelt catalog name",
        ModelNotFoundError,
        "name_or_path",
        lambda e, t: lambda: interp.load_model("smollm2-135"),
    ),
    Bad(
        "load_model: meta device",
        ArgumentError,
        "device",
        lambda e, t: lambda: interp.load_model("smollm2-135m", device="meta"),
    ),
    Bad(
        "load_model: cuda without cuda",
        ArgumentError,
        "device",
        lambda e, t: lambda: interp.load_model("smollm2-135m", device="cuda:3"),
    ),
    Bad(
        "load_model: int dtype",
        ArgumentError,
        "dtype",
        lambda e, t: lambda: interp.load_model("smollm2-135m", dtype=torch.int32),
    ),
    Bad(
        "load_model: dtype as string",
        ArgumentError,
        "dtype",
        lambda e, t: lambda: interp.load_model("smollm2-135m", dtype="float32"),
    ),
    Bad(
        "load_model: folder without config.json",
        ModelLoadError,
        "name_or_path",
        lambda e, t: (lambda: interp.load_model(str(t))) if (t / "weights.bin").write_bytes(b"x") else None,
    ),
    Bad(
        "load_model: truncated .gguf",
        ModelLoadError,
        "path",
        lambda e, t: (
            (lambda: interp.load_model(str(t / "m.gguf"), cache_dir=t / "cache"))
            if (t / "m.gguf").write_bytes(b"GGUF\x03\x00\x00\x00trunc")
            else None
        ),
    ),
    Bad(
        "load_model: missing .gguf",
        ModelNotFoundError,
        "name_or_path",
        lambda e, t: lambda: interp.load_model(str(t / "absent.gguf")),
    ),
    # ---- trace: inputs ------------------------------------------------------------------
    Bad(
        "trace: text on a tokenizer-less model",
        UnsupportedOperationError,
        "inputs",
        lambda e, t: lambda: trace(e.notok, "w1 w2"),
    ),
    Bad("trace: meta-device ids", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids.to("meta"))),
    Bad(
        "trace: meta-device mask",
        ShapeError,
        "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.ones(2, 5, dtype=torch.long, device="meta")),
    ),
    Bad("trace: float ids", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids.float())),
    Bad("trace: bool ids", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids > 50)),
    Bad("trace: 3-D ids", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids[None])),
    Bad("trace: id >= d_vocab", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids + 100)),
    Bad("trace: negative id", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, e.ids - 50)),
    Bad(
        "trace: empty ids",
        ArgumentError,
        "inputs",
        lambda e, t: lambda: trace(e.gpt2, torch.zeros(1, 0, dtype=torch.long)),
    ),
    Bad(
        "trace: longer than n_ctx",
        ArgumentError,
        "inputs",
        lambda e, t: lambda: trace(e.gpt2, torch.ones(1, 65, dtype=torch.long)),
    ),
    Bad(
        "trace: mask shape",
        ShapeError,
        "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.ones(2, 4, dtype=torch.long)),
    ),
    Bad(
        "trace: mask not 0/1",
        ArgumentError,
        "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.full((2, 5), 0.5)),
    ),
    Bad(
        "trace: mask row all padding",
        ArgumentError,
        "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask=torch.tensor([[1] * 5, [0] * 5])),
    ),
    Bad(
        "trace: mask given with text",
        ArgumentError,
        "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, "w1 w2", attention_mask=torch.ones(1, 3, dtype=torch.long)),
    ),
    Bad(
        "trace: mask is a string",
        ShapeError,
        "attention_mask",
        lambda e, t: lambda: trace(e.gpt2, e.ids, attention_mask="all"),
    ),
    Bad("trace: dict inputs", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, {"text": "w1"})),
    Bad("trace: None inputs", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, None)),
    Bad("trace: ragged id lists", ShapeError, "inputs", lambda e, t: lambda: trace(e.gpt2, [[5, 6], [7]])),
    Bad("trace: blank prompt", ArgumentError, "inputs", lambda e, t: lambda: trace(e.gpt2, ["w1", "  "])),
    Bad("trace: model is None", ArgumentError, "model", lambda e, t: lambda: trace(None, e.ids)),
    Bad("trace: model is the bridge", ArgumentError, "model", lambda e, t: lambda: trace(e.gpt2.bridge, e.ids)),
    Bad(
        "trace: neurons out of range", ArgumentError, "neurons", lambda e, t: lambda: trace(e.gpt2, e.ids, neurons=[7])
    ),
    Bad("trace: neurons='all'", ArgumentError, "neurons", lambda e, t: lambda: trace(e.gpt2, e.ids, neurons="all")),
    # ---- trace / decompose: directions ----------------------------------------------------
    Bad(
        "trace: NaN in project_onto",
        ArgumentError,
        "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids, project_onto=torch.full((1, e.d), NAN)),
    ),
    Bad(
        "decompose: inf in project_onto",
        ArgumentError,
        "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.tensor([float("inf")] * e.d)),
    ),
    Bad(
        "decompose: project_onto of the wrong width",
        ShapeError,
        "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(2, e.d + 1)),
    ),
    Bad(
        "decompose: int project_onto",
        ShapeError,
        "project_onto",
        lambda e, t: (
            lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(2, e.d, dtype=torch.long))
        ),
    ),
    Bad(
        "decompose: meta-device project_onto",
        ShapeError,
        "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(2, e.d, device="meta")),
    ),
    Bad(
        "decompose: project_onto batch mismatch",
        ShapeError,
        "project_onto",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("unembed", project_onto=torch.ones(3, 1, e.d)),
    ),
    Bad(
        "decompose: unknown label",
        LabelError,
        "read_label",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("L9.attn.q[H0]"),
    ),
    Bad(
        "decompose: a hook name that is not a read",
        LabelError,
        "read_label",
        lambda e, t: lambda: trace(e.gpt2, e.ids).decompose("blocks.0.attn.hook_z"),
    ),
    Bad("decompose: int label", LabelError, "read_label", lambda e, t: lambda: trace(e.gpt2, e.ids).decompose(3)),
    # ---- Decomposition -------------------------------------------------------------------
    Bad("Decomposition[]: unknown term", LabelError, "label", lambda e, t: lambda: e.dec["L9.H0"]),
    Bad("Decomposition.top: k=0", ArgumentError, "k", lambda e, t: lambda: e.dec.top(0)),
    Bad(
        "Decomposition.to_dataframe: float pos", ArgumentError, "pos", lambda e, t: lambda: e.dec.to_dataframe(pos=1.5)
    ),
    Bad(
        "Decomposition.to_dataframe: str batch",
        ArgumentError,
        "batch",
        lambda e, t: lambda: e.dec.to_dataframe(batch="0"),
    ),
    Bad(
        "Decomposition.to_dataframe: batch out of range",
        ArgumentError,
        "batch",
        lambda e, t: lambda: e.dec.to_dataframe(batch=9),
    ),
    Bad(
        "Decomposition.to_dataframe: padding position",
        ArgumentError,
        "pos",
        lambda e, t: lambda: e.padded_dec.to_dataframe(batch=1, pos=-1),
    ),
    # ---- attribute_logits ---------------------------------------------------------------
    Bad(
        "attribute_logits: multi-token answer",
        ArgumentError,
        "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer="w1 w2"),
    ),
    Bad(
        "attribute_logits: answer id >= d_vocab",
        ArgumentError,
        "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=100),
    ),
    Bad(
        "attribute_logits: bool answer",
        ArgumentError,
        "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=True),
    ),
    Bad(
        "attribute_logits: answer None",
        ArgumentError,
        "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=None),
    ),
    Bad(
        "attribute_logits: float answer tensor",
        ArgumentError,
        "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=torch.tensor(3.0)),
    ),
    Bad(
        "attribute_logits: meta answer tensor",
        ShapeError,
        "answer",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=torch.tensor([3, 4], device="meta")),
    ),
    Bad(
        "attribute_logits: answer string without tokenizer",
        ArgumentError,
        "answer",
        lambda e, t: lambda: attribute_logits(e.notok, e.ids, answer="w3"),
    ),
    Bad(
        "attribute_logits: wrong of the wrong length",
        ArgumentError,
        "wrong",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, wrong=[6, 7, 8]),
    ),
    Bad(
        "attribute_logits: pos out of range",
        ArgumentError,
        "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos=5),
    ),
    Bad(
        "attribute_logits: float pos",
        ArgumentError,
        "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos=1.5),
    ),
    Bad(
        "attribute_logits: pos='last'",
        ArgumentError,
        "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos="last"),
    ),
    Bad(
        "attribute_logits: pos at padding",
        ArgumentError,
        "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, ["w1 w2 w3", "w4"], answer=5, pos=[1, 3]),
    ),
    Bad(
        "attribute_logits: meta pos",
        ShapeError,
        "pos",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, pos=torch.tensor(1, device="meta")),
    ),
    Bad(
        "attribute_logits: unknown unit",
        ArgumentError,
        "unit",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, unit="layer"),
    ),
    Bad(
        "attribute_logits: batch_size=0",
        ArgumentError,
        "batch_size",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, batch_size=0),
    ),
    Bad(
        "attribute_logits: progress='yes'",
        ArgumentError,
        "progress",
        lambda e, t: lambda: attribute_logits(e.gpt2, e.ids, answer=5, progress="yes"),
    ),
    Bad(
        "attribute_logits: encoder without unembedding",
        UnsupportedOperationError,
        "model",
        lambda e, t: lambda: attribute_logits(e.bert, e.ids, answer=5),
    ),
    Bad(
        "attribute_logits: text on a tokenizer-less model",
        UnsupportedOperationError,
        "inputs",
        lambda e, t: lambda: attribute_logits(e.notok, "w1 w2", answer=5),
    ),
    Bad(
        "attribute_logits: empty prompt list",
        ArgumentError,
        "inputs",
        lambda e, t: lambda: attribute_logits(e.gpt2, [], answer=5),
    ),
    Bad(
        "attribute_logits: model is a string",
        ArgumentError,
        "model",
        lambda e, t: lambda: attribute_logits("tiny-gpt2", e.ids, answer=5),
    ),
    # ---- attribute_direction ------------------------------------------------------------
    Bad(
        "attribute_direction: NaN direction",
        ArgumentError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.full((e.d,), NAN)),
    ),
    Bad(
        "attribute_direction: inf direction",
        ArgumentError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.tensor([float("-inf")] + [0.0] * (e.d - 1))),
    ),
    Bad(
        "attribute_direction: wrong width",
        ShapeError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d - 1)),
    ),
    Bad(
        "attribute_direction: int direction",
        ShapeError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d, dtype=torch.long)),
    ),
    Bad(
        "attribute_direction: string direction",
        ShapeError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, "up"),
    ),
    Bad(
        "attribute_direction: scalar direction",
        ShapeError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.tensor(1.0)),
    ),
    Bad(
        "attribute_direction: meta direction",
        ShapeError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d, device="meta")),
    ),
    Bad(
        "attribute_direction: rows != prompts",
        ShapeError,
        "direction",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(3, e.d)),
    ),
    Bad(
        "attribute_direction: pos='max'",
        ArgumentError,
        "pos",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d), pos="max"),
    ),
    Bad(
        "attribute_direction: float pos",
        ArgumentError,
        "pos",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d), pos=0.5),
    ),
    Bad(
        "attribute_direction: unit='neuron'",
        ArgumentError,
        "unit",
        lambda e, t: lambda: attribute_direction(e.bert, e.ids, torch.ones(e.d), unit="neuron"),
    ),
    # ---- LogitAttribution ----------------------------------------------------------------
    Bad("LogitAttribution[]: unknown term", LabelError, "label", lambda e, t: lambda: e.attr["L5.H9"]),
    Bad("LogitAttribution.top: k=-1", ArgumentError, "k", lambda e, t: lambda: e.attr.top(-1)),
    Bad(
        "LogitAttribution.head_matrix: prompt out of range",
        ArgumentError,
        "prompt",
        lambda e, t: lambda: e.attr.head_matrix(prompt=9),
    ),
    # ---- save / load ---------------------------------------------------------------------
    Bad("save: non-.safetensors path", ExportError, "path", lambda e, t: lambda: e.dec.save(t / "d.pt")),
    Bad(
        "save: missing directory", ExportError, "path", lambda e, t: lambda: e.attr.save(t / "nodir" / "a.safetensors")
    ),
    Bad("save: path is an int", ExportError, "path", lambda e, t: lambda: e.dec.save(3)),
    Bad(
        "load: missing file", ResultFormatError, "path", lambda e, t: lambda: Decomposition.load(t / "none.safetensors")
    ),
    Bad(
        "load: truncated file",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(_truncated_copy(e, t)),
    ),
    Bad(
        "load: wrong result class",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: LogitAttribution.load(p))(e.dec.save(t / "d.safetensors")),
    ),
    Bad(
        "load: plain safetensors file",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(_header_file(t, {})),
    ),
    Bad(
        "load: damaged JSON header",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(t, {"format": "interp-result-v1", "class": "Decomposition", "fields": "{oops"})
        ),
    ),
    Bad(
        "load: header without fields",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(t, {"format": "interp-result-v1", "class": "Decomposition"})
        ),
    ),
    Bad(
        "load: fields not an object",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(t, {"format": "interp-result-v1", "class": "Decomposition", "fields": "[1, 2]"})
        ),
    ),
    Bad(
        "load: missing fields",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: Decomposition.load(p))(
            _header_file(
                t, {"format": "interp-result-v1", "class": "Decomposition", "fields": json.dumps({"point": "x"})}
            )
        ),
    ),
    Bad(
        "load: non-.safetensors file of garbage",
        ResultFormatError,
        "path",
        lambda e, t: (lambda p: lambda: LogitAttribution.load(p))(
            (t / "notes.txt", (t / "notes.txt").write_text("hello"))[0]
        ),
    ),
    Bad("load: a directory", ResultFormatError, "path", lambda e, t: lambda: Decomposition.load(t)),
    Bad("load: path is None", ResultFormatError, "path", lambda e, t: lambda: Decomposition.load(None)),
    # ---- plots / export ------------------------------------------------------------------
    Bad(
        "export: unknown suffix",
        ArgumentError,
        "path",
        lambda e, t: lambda: export(go.Figure(go.Bar(y=[1])), t / "fig.docx"),
    ),
    Bad(
        "export: missing directory",
        ExportError,
        "path",
        lambda e, t: lambda: export(go.Figure(go.Bar(y=[1])), t / "nodir" / "fig.html"),
    ),
    Bad("export: not a figure", ArgumentError, "figure_or_result", lambda e, t: lambda: export(None, t / "fig.html")),
    Bad(
        "export: empty figure",
        ArgumentError,
        "figure_or_result",
        lambda e, t: lambda: export(go.Figure(), t / "f.json"),
    ),
    Bad(
        "attention_patterns: head out of range",
        ArgumentError,
        "heads",
        lambda e, t: lambda: attention_patterns(e.gpt2, e.ids, ["L0.H9"]),
    ),
    Bad(
        "attention_patterns: meta ids",
        ShapeError,
        "inputs",
        lambda e, t: lambda: attention_patterns(e.gpt2, e.ids.to("meta"), ["L0.H1"]),
    ),
    # ---- circuits ------------------------------------------------------------------------
    Bad("ov_circuit: model is None", ArgumentError, "model", lambda e, t: lambda: ov_circuit(None, 0, 0)),
    Bad("composition_scores: model is a name", ArgumentError, "model", lambda e, t: lambda: composition_scores("gpt2")),
    Bad(
        "rotate_residual: model is the bridge",
        ArgumentError,
        "model",
        lambda e, t: lambda: rotate_residual(e.llama.bridge, torch.eye(e.d)),
    ),
    Bad("ov_circuit: layer out of range", ArgumentError, "layer", lambda e, t: lambda: ov_circuit(e.gpt2, 2, 0)),
    Bad("ov_circuit: bool layer", ArgumentError, "layer", lambda e, t: lambda: ov_circuit(e.gpt2, True, 0)),
    Bad("qk_circuit: negative head", ArgumentError, "head", lambda e, t: lambda: qk_circuit(e.gpt2, 0, -1)),
    Bad("ov_circuit: full='yes'", ArgumentError, "full", lambda e, t: lambda: ov_circuit(e.gpt2, 0, 0, full="yes")),
    Bad(
        "ov_circuit: full circuit of an encoder",
        UnsupportedOperationError,
        "unembedding",
        lambda e, t: lambda: ov_circuit(e.bert, 0, 0, full=True),
    ),
    Bad(
        "qk_circuit: rel_pos on a learned-position model",
        ArgumentError,
        "rel_pos",
        lambda e, t: lambda: qk_circuit(e.gpt2, 0, 0, rel_pos=2),
    ),
    Bad(
        "qk_circuit: float rel_pos",
        ArgumentError,
        "rel_pos",
        lambda e, t: lambda: qk_circuit(e.llama, 0, 0, rel_pos=1.5),
    ),
    Bad(
        "qk_circuit: rel_pos beyond the context",
        ArgumentError,
        "rel_pos",
        lambda e, t: lambda: qk_circuit(e.llama, 0, 0, rel_pos=10**6),
    ),
    Bad(
        "Circuit.AB over the memory cap",
        MemoryCapError,
        "max_bytes",
        lambda e, t: lambda: ov_circuit(e.gpt2, 0, 0, full=True, max_bytes=1000).AB,
    ),
    Bad(
        "ov_circuit: max_bytes=0",
        ArgumentError,
        "max_bytes",
        lambda e, t: lambda: ov_circuit(e.gpt2, 0, 0, max_bytes=0),
    ),
    Bad(
        "composition_scores: unknown kind", ArgumentError, "kind", lambda e, t: lambda: composition_scores(e.gpt2, "k")
    ),
    Bad(
        "composition_scores: half dtype",
        ArgumentError,
        "dtype",
        lambda e, t: lambda: composition_scores(e.gpt2, "K", dtype=torch.float16),
    ),
    Bad(
        "copying_scores: encoder", UnsupportedOperationError, "unembedding", lambda e, t: lambda: copying_scores(e.bert)
    ),
    Bad(
        "copying_scores: fold_norms='no'",
        ArgumentError,
        "fold_norms",
        lambda e, t: lambda: copying_scores(e.gpt2, fold_norms="no"),
    ),
    Bad(
        "ov_diagonal_stats: k > d_vocab",
        ArgumentError,
        "k",
        lambda e, t: lambda: ov_diagonal_stats(e.gpt2, 0, 0, k=1000),
    ),
    Bad(
        "virtual_weights: unknown src",
        LabelError,
        "src",
        lambda e, t: lambda: virtual_weights(e.gpt2, "L9.H0", "unembed"),
    ),
    Bad(
        "virtual_weights: read before the write",
        ArgumentError,
        "dst",
        lambda e, t: lambda: virtual_weights(e.gpt2, "L1.H0", "L0.attn.q[H0]"),
    ),
    Bad(
        "virtual_weights: query-head index on a GQA k read",
        LabelError,
        "dst",
        lambda e, t: lambda: virtual_weights(e.llama, "embed", "L1.attn.k[H3]"),
    ),
    Bad(
        "head_operator: rows do not sum to 1",
        ArgumentError,
        "pattern",
        lambda e, t: lambda: head_operator(e.gpt2, 0, 0, torch.ones(3, 3)),
    ),
    Bad(
        "head_operator: NaN pattern",
        ArgumentError,
        "pattern",
        lambda e, t: lambda: head_operator(e.gpt2, 0, 0, torch.full((3, 3), NAN)),
    ),
    Bad(
        "head_operator: non-square pattern",
        ShapeError,
        "pattern",
        lambda e, t: lambda: head_operator(e.gpt2, 0, 0, torch.full((3, 2), 0.5)),
    ),
    Bad(
        "head_operator: meta pattern",
        ShapeError,
        "pattern",
        lambda e, t: lambda: head_operator(e.gpt2, 0, 0, torch.full((3, 3), 1 / 3, device="meta")),
    ),
    Bad(
        "HeadOperator.apply: wrong x shape",
        ShapeError,
        "x",
        lambda e, t: lambda: head_operator(e.gpt2, 0, 0, torch.full((3, 3), 1 / 3)).apply(torch.ones(4, e.d)),
    ),
    Bad(
        "HeadOperator.apply: meta x",
        ShapeError,
        "x",
        lambda e, t: (
            lambda: head_operator(e.gpt2, 0, 0, torch.full((3, 3), 1 / 3)).apply(torch.ones(3, e.d, device="meta"))
        ),
    ),
    Bad(
        "HeadOperator.matrix over the memory cap",
        MemoryCapError,
        "max_bytes",
        lambda e, t: lambda: head_operator(e.gpt2, 0, 0, torch.full((3, 3), 1 / 3)).matrix(max_bytes=64),
    ),
    Bad(
        "rotate_residual: R not orthogonal",
        ArgumentError,
        "R",
        lambda e, t: lambda: rotate_residual(e.llama, torch.ones(e.d, e.d)),
    ),
    Bad(
        "rotate_residual: NaN in R",
        ArgumentError,
        "R",
        lambda e, t: lambda: rotate_residual(e.llama, torch.full((e.d, e.d), NAN)),
    ),
    Bad(
        "rotate_residual: LayerNorm model with R·1 ≠ 1",
        ArgumentError,
        "R",
        lambda e, t: lambda: rotate_residual(e.gpt2, random_rotation(e.d, seed=1)),
    ),
    Bad(
        "rotate_residual: post-norm model",
        UnsupportedOperationError,
        "post-norm",
        lambda e, t: lambda: rotate_residual(e.bert, torch.eye(e.d)),
    ),
    Bad(
        "rotate_residual: R of the wrong size",
        ShapeError,
        "R",
        lambda e, t: lambda: rotate_residual(e.llama, torch.eye(e.d - 1)),
    ),
    Bad(
        "rotate_residual: meta R",
        ShapeError,
        "R",
        lambda e, t: lambda: rotate_residual(e.llama, torch.eye(e.d, device="meta")),
    ),
    Bad(
        "rotate_residual: numpy R",
        ShapeError,
        "R",
        lambda e, t: lambda: rotate_residual(e.llama, torch.eye(e.d).numpy()),
    ),
    Bad("random_rotation: d_model=1", ArgumentError, "d_model", lambda e, t: lambda: random_rotation(1)),
    Bad("random_rotation: seed='a'", ArgumentError, "seed", lambda e, t: lambda: random_rotation(8, seed="a")),
    # ---- path expansion / toys -------------------------------------------------------------
    Bad(
        "path_expansion: model with MLPs",
        UnsupportedOperationError,
        "attention-only",
        lambda e, t: lambda: path_expansion(e.gpt2, e.ids),
    ),
    Bad("path_expansion: model is None", ArgumentError, "model", lambda e, t: lambda: path_expansion(None, e.ids)),
    Bad(
        "path_expansion: negative order",
        ArgumentError,
        "order",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, order=-1),
    ),
    Bad(
        "path_expansion: answer out of range",
        ArgumentError,
        "answer",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, answer=12),
    ),
    Bad(
        "path_expansion: multi-token answer",
        ArgumentError,
        "answer",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, answer="cat dog"),
    ),
    Bad(
        "path_expansion: answer list of strings",
        ArgumentError,
        "answer",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, answer=["cat", "dog"]),
    ),
    Bad(
        "path_expansion: answer per row, wrong count",
        ShapeError,
        "answer",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, answer=[1, 2, 3]),
    ),
    Bad(
        "path_expansion: meta answer",
        ShapeError,
        "answer",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, answer=torch.tensor([1, 2], device="meta")),
    ),
    Bad(
        "path_expansion: pos='last'",
        ArgumentError,
        "pos",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, pos="last"),
    ),
    Bad(
        "path_expansion: pos out of range",
        ArgumentError,
        "pos",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12, pos=5),
    ),
    Bad(
        "path_expansion: meta ids",
        ShapeError,
        "inputs",
        lambda e, t: lambda: path_expansion(e.toy, (e.ids % 12).to("meta")),
    ),
    Bad(
        "path_expansion: longer than n_ctx",
        ArgumentError,
        "inputs",
        lambda e, t: lambda: path_expansion(e.toy, torch.zeros(1, 9, dtype=torch.long)),
    ),
    Bad(
        "path_expansion: prompts of different lengths",
        ArgumentError,
        "inputs",
        lambda e, t: lambda: path_expansion(e.toy, ["cat", "cat dog"]),
    ),
    Bad(
        "PathExpansion.value: int label",
        LabelError,
        "label",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12).value(3),
    ),
    Bad(
        "PathExpansion.index: unknown path",
        LabelError,
        "label",
        lambda e, t: lambda: path_expansion(e.toy, e.ids % 12).index("embed→L7.H0"),
    ),
    Bad("ToyConfig: n_layers=0", ArgumentError, "n_layers", lambda e, t: lambda: ToyConfig(n_layers=0)),
    Bad(
        "ToyConfig: n_kv_heads not a divisor",
        ArgumentError,
        "n_kv_heads",
        lambda e, t: lambda: ToyConfig(n_heads=4, n_kv_heads=3),
    ),
    Bad("build_toy: config as a dict", ArgumentError, "config", lambda e, t: lambda: build_toy({"n_layers": 2})),
    Bad("load_toy: folder without files", ModelNotFoundError, "path", lambda e, t: lambda: load_toy(t, name="x")),
    Bad(
        "load_toy: config.json is a list",
        ModelLoadError,
        "path",
        lambda e, t: (
            (lambda: load_toy(t, name="x"))
            if ((t / "config.json").write_text("[1]") and (t / "model.safetensors").write_bytes(b"x"))
            else None
        ),
    ),
    Bad(
        "load_toy: damaged config.json",
        ModelLoadError,
        "path",
        lambda e, t: (
            (lambda: load_toy(t, name="x"))
            if ((t / "config.json").write_text("{oops") and (t / "model.safetensors").write_bytes(b"x"))
            else None
        ),
    ),
    Bad(
        "save_toy: path under a file",
        ExportError,
        "path",
        lambda e, t: (
            (
                lambda: save_toy(
                    e.toy,
                    t / "file" / "toy",
                    config=ToyConfig(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=12, n_ctx=8),
                )
            )
            if (t / "file").write_text("x")
            else None
        ),
    ),
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


# ---- unusual but valid inputs: they work and agree with the ordinary ones --------------------


def test_noncontiguous_and_narrow_ids_equal_contiguous(env):
    ids = torch.randint(4, 100, (6, 2), generator=torch.Generator().manual_seed(3)).T  # transposed: [2, 6]
    assert not ids.is_contiguous()
    ref = trace(env.gpt2, ids.contiguous()).decompose("unembed")
    for variant in (ids, ids.to(torch.uint8), ids.to(torch.int32), ids.tolist()):
        d = trace(env.gpt2, variant).decompose("unembed")
        assert torch.equal(d.contributions, ref.contributions), type(variant)
    a = attribute_logits(env.gpt2, ids, answer=5)
    b = attribute_logits(env.gpt2, ids.contiguous(), answer=5)
    assert torch.equal(a.values, b.values)


def test_noncontiguous_directions_equal_contiguous(env):
    U = torch.randn(env.d, 6, generator=torch.Generator().manual_seed(4))[:, ::2].T  # [3, d], strided
    assert not U.is_contiguous()
    tr = trace(env.gpt2, env.ids)
    # equal up to float summation order (a strided operand may take another einsum path)
    close = lambda a, b: torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))  # noqa: E731
    close(
        tr.decompose("L1.mlp.in", project_onto=U).contributions,
        tr.decompose("L1.mlp.in", project_onto=U.contiguous()).contributions,
    )
    u = U[1]
    close(
        attribute_direction(env.bert, env.ids, u).values, attribute_direction(env.bert, env.ids, u.contiguous()).values
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_model_into_eigen_and_svd_code(dtype):
    """bf16/fp16 weights into eigenvalue / SVD code: computed in fp32 or fp64 internally (no
    'not implemented for BFloat16' crash), agreeing with the fp32 model to half precision."""
    half, full = tiny_model("llama", dtype=dtype), tiny_model("llama")
    for fn in (ov_circuit, qk_circuit):
        ch, cf = fn(half, 1, 2), fn(full, 1, 2)
        assert torch.allclose(ch.S.double(), cf.S.double(), rtol=0.05, atol=0.05 * float(cf.S.max()))
        lh = ch.eigenvalues.abs().sort().values.double()
        lf = cf.eigenvalues.abs().sort().values.double()
        assert torch.allclose(lh, lf, rtol=0.1, atol=0.05 * float(lf.max()))
        assert abs(float(ch.norm()) - float(cf.norm())) <= 0.02 * float(cf.norm())
    ch = ov_circuit(half, 1, 2, full=True)
    assert torch.isfinite(ch.eigenvalues).all() and torch.isfinite(ch.S).all()
    assert torch.allclose(copying_scores(half).scores, copying_scores(full).scores, atol=0.05)
    assert torch.allclose(
        composition_scores(half, "K").scores, composition_scores(full, "K").scores, atol=0.02, equal_nan=True
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_own_pattern_is_accepted(dtype):
    """A bf16 model's own softmax rows sum to 1 only to bf16 precision; head_operator must accept
    the model's pattern and reproduce the head's write to that precision."""
    from interp.stream.internal import as_batch
    from bridge_capture import capture

    m = tiny_model("gpt2", dtype=dtype)
    ids = torch.randint(4, 100, (1, 40), generator=torch.Generator().manual_seed(5))
    names = ["blocks.1.ln1.hook_out", "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_z"]
    acts, _ = capture(m, as_batch(m, ids), names)
    op = head_operator(m, 1, 2, acts[names[1]][0, 2])
    real = (acts[names[2]][0, :, 2] @ m.weights.W_O[1, 2]).float()
    got = op.apply(acts[names[0]][0]).float()
    assert float((got - real).abs().max()) <= 0.05 * float(real.abs().max())
