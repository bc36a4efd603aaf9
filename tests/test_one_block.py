"""The block is described once (issue #30): only interp/models/ reads the configuration's wiring flags, and the
description it gives (``Model.block``) is what Hugging Face's decoder layers actually compute.

1. A token scan of every module under interp/ outside interp/models/: no name, string, docstring or comment
   mentions ``parallel_attn_mlp``, ``pre_norms``, ``norm_placement`` or ``sandwich_norms`` (the issue's
   ``grep -rn ... interp/ | grep -v models/`` prints nothing). A forward or an analysis asks the block instead.
2. The description against HF's own dataflow, for every tiny family: the HF layer's submodules (its norms, its
   attention, its MLP: the table below, written from transformers' modelling code) are hooked, and the block is
   interpreted (:func:`interp.models.internal.run_block`) with steps that check, at each one, that the tensor the
   description says a module receives is the one HF gave it, and that carry HF's own output on. The block's
   result must be HF's layer output. A wrong read (raw vs normed), a missing output norm, a parallel branch
   read as sequential or a post-norm missed each makes a module's input or the layer's output differ.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

from interp.models.internal import run_block
from tiny_models import FAMILIES, MORE_FAMILIES, VOCAB, hooked_forward, tiny_hf_model, tiny_model

ROOT = Path(__file__).resolve().parents[1] / "interp"
FLAGS = ("parallel_attn_mlp", "pre_norms", "norm_placement", "sandwich_norms")


# --- 1. nothing outside interp/models/ reads the wiring flags -------------------------------------------------


def flag_mentions(source: str) -> list[tuple[int, str, str]]:
    """(line, flag, token text) for every token of ``source`` — a name (``arch.pre_norms``, ``pre_norms=``), a
    string (``getattr(a, "norm_placement")``, a docstring, an f-string) or a comment — that mentions a flag."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        for flag in FLAGS:
            if flag in tok.string:
                out.append((tok.start[0], flag, tok.string.strip().splitlines()[0][:80]))
    return out


def test_the_scan_finds_every_kind_of_mention():
    src = (
        '"""The block reads norm_placement."""\n'
        "x = arch.parallel_attn_mlp\n"
        "f(pre_norms=True)\n"
        "y = getattr(a, 'sandwich_norms', False)  # and a comment on norm_placement\n"
        "z = f'{a.norm_placement}-norm'\n"
        "ok = block.normed_stream and block.read_norm('mlp')  # pre-norm, sandwich norms: words, not flags\n"
    )
    found = [(line, flag) for line, flag, _ in flag_mentions(src)]
    assert found == [
        (1, "norm_placement"),
        (2, "parallel_attn_mlp"),
        (3, "pre_norms"),
        (4, "sandwich_norms"),
        (4, "norm_placement"),
        (5, "norm_placement"),
    ]


def test_the_block_module_is_where_the_flags_are_read():
    """The scan is live: the one module that turns the flags into a block mentions each of them."""
    found = {flag for _, flag, _ in flag_mentions((ROOT / "models" / "_block.py").read_text())}
    assert found == set(FLAGS)


def test_no_module_outside_models_reads_the_wiring_flags():
    files = sorted(p for p in ROOT.rglob("*.py") if (ROOT / "models") not in p.parents)
    assert len(files) > 50  # the scan sees the packages
    hits = [
        f"{p.relative_to(ROOT.parent)}:{line}: {flag} in {text!r}"
        for p in files
        for line, flag, text in flag_mentions(p.read_text())
    ]
    assert not hits, (
        "ask the block (model.block / interp.models.describe_block: read_norm, out_norm, stream_norm, "
        "normed_stream, sublayer_norms, sees, layout) instead of the flags:\n" + "\n".join(hits)
    )


# --- 2. the description is what HF's layer computes -------------------------------------------------------------

# Where each family's HF model keeps its layers, and which submodule of a layer is each of the block's norms and
# sublayers (a sublayer given as (first, last) module: its input is the first's, its output the last's). From
# transformers' modelling code: Llama-shaped layers call their MLP's norm post_attention_layernorm; Gemma 2/3 call
# that name the attention's output norm and have pre/post_feedforward norms; OLMo 2 keeps only the two output
# norms; GPT-J's MLP reads ln_1 too; BERT's Add & Norm sit in BertSelfOutput / BertOutput.
LLAMA_SHAPED = {"ln1": "input_layernorm", "attn": "self_attn", "ln2": "post_attention_layernorm", "mlp": "mlp"}
ROLES: dict[str, dict[str, Any]] = {
    "gpt2": {"ln1": "ln_1", "attn": "attn", "ln2": "ln_2", "mlp": "mlp"},
    "gptj": {"ln1": "ln_1", "attn": "attn", "ln2": "ln_1", "mlp": "mlp"},
    "neox": {"ln1": "input_layernorm", "attn": "attention", "ln2": "post_attention_layernorm", "mlp": "mlp"},
    "bert": {
        "attn": ("attention.self", "attention.output.dense"),
        "ln1": "attention.output.LayerNorm",
        "mlp": ("intermediate", "output.dense"),
        "ln2": "output.LayerNorm",
    },
    "gemma2": {
        "ln1": "input_layernorm",
        "attn": "self_attn",
        "ln1_post": "post_attention_layernorm",
        "ln2": "pre_feedforward_layernorm",
        "mlp": "mlp",
        "ln2_post": "post_feedforward_layernorm",
    },
    "olmo2": {
        "attn": "self_attn",
        "ln1_post": "post_attention_layernorm",
        "mlp": "mlp",
        "ln2_post": "post_feedforward_layernorm",
    },
}
ROLES["gemma3_text"] = ROLES["gemma2"]
LAYERS = {"gpt2": "transformer.h", "gptj": "transformer.h", "neox": "gpt_neox.layers", "bert": "bert.encoder.layer"}


def _first(x: Any) -> torch.Tensor:
    return x[0] if isinstance(x, tuple) else x


class _Record:
    """HF's input and output of each module a hook sees (the first call of it in the forward)."""

    def __init__(self) -> None:
        self.inputs: dict[str, torch.Tensor] = {}
        self.outputs: dict[str, torch.Tensor] = {}

    def hook(self, name: str):
        def keep(module, args, kwargs, output):
            if name not in self.outputs:
                self.inputs[name] = _first(args) if args else kwargs["hidden_states"]
                self.outputs[name] = _first(output)

        return keep


class _AgainstHF:
    """A :class:`interp.models.internal.BlockOps` over HF's recorded tensors: each step checks the input the description
    gives a module against HF's, then carries HF's output on; the adds are the block's own."""

    def __init__(self, rec: _Record, roles: dict[str, Any], layer: int) -> None:
        self.rec, self.roles, self.layer = rec, roles, layer
        self.used: set[str] = set()

    def _module(self, role: str, end: int) -> str:
        assert role in self.roles, f"the block has step {role!r}, which this HF layer does not have: {self.roles}"
        self.used.add(role)
        m = self.roles[role]
        return f"{self.layer}:{m[end] if isinstance(m, tuple) else m}"

    def _feed(self, role: str, x: torch.Tensor) -> torch.Tensor:
        """x must be what HF's module for ``role`` received; returns what it gave."""
        name_in, name_out = self._module(role, 0), self._module(role, -1)
        torch.testing.assert_close(
            x,
            self.rec.inputs[name_in],
            rtol=1e-12,
            atol=1e-12,
            msg=lambda m: f"layer {self.layer}, input of {role}: {m}",
        )
        return self.rec.outputs[name_out]

    def point(self, site: str, value: Any) -> Any:
        return value

    def read(self, sub: str, norm: Optional[str], stream: torch.Tensor) -> torch.Tensor:
        return stream if norm is None else self._feed(norm, stream)

    def apply(self, sub: str, read: torch.Tensor) -> torch.Tensor:
        return self._feed(sub, read)

    def out_norm(self, sub: str, norm: str, out: torch.Tensor) -> torch.Tensor:
        return self._feed(norm, out)

    def add(self, sub: str, stream: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return stream + out

    def norm(self, norm: str, stream: torch.Tensor) -> torch.Tensor:
        return self._feed(norm, stream)


@pytest.mark.parametrize("family", FAMILIES + MORE_FAMILIES)
def test_the_block_is_what_the_hf_layer_computes(family):
    block = tiny_model(family).block
    hf = tiny_hf_model(family, dtype=torch.float64)
    roles = ROLES.get(family, LLAMA_SHAPED)
    layers = hf.get_submodule(LAYERS.get(family, "model.layers"))
    rec, handles = _Record(), []
    for l, layer in enumerate(layers):
        handles.append(layer.register_forward_hook(rec.hook(f"{l}:layer"), with_kwargs=True))
        for m in {n for r in roles.values() for n in (r if isinstance(r, tuple) else (r,))}:
            handles.append(layer.get_submodule(m).register_forward_hook(rec.hook(f"{l}:{m}"), with_kwargs=True))
    tokens = torch.randint(4, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    hooked_forward(hf, handles, tokens)
    assert len(layers) == 2
    for l in range(len(layers)):
        ops = _AgainstHF(rec, roles, l)
        out = run_block(block, ops, rec.inputs[f"{l}:layer"])
        torch.testing.assert_close(
            out,
            rec.outputs[f"{l}:layer"],
            rtol=1e-12,
            atol=1e-12,
            msg=lambda m: f"{family} layer {l}: the block's output vs HF's: {m}",
        )
        assert ops.used == set(roles), f"{family}: HF modules the block never used: {set(roles) - ops.used}"
