"""The builder table: every Hugging Face ``model_type`` interp models, one line each — its family file, config
reader, weight reader, weight writer (None: none yet), capabilities and config attributes.

A family is one file here (the Llama-shaped families share ``llama.py``, one capability line and one attribute
list each). :func:`arch_from_hf_config` refuses a config carrying an attribute its family neither reads nor
knowingly ignores (:func:`~interp.models._families._spec.check_config`), then reads it into an
:class:`~interp.models.ArchInfo`; :func:`weights_from_hf` reads the weights in transformer-lens's layout and
:func:`hf_state_from_weights` writes them back. Adding a family: docs/architecture.md, "Adding a model family".
"""

from __future__ import annotations

import difflib
from typing import Any

import torch
from torch import Tensor

from interp.errors import UnsupportedArchitectureError, UnsupportedOperationError
from interp.models._arch import ArchInfo
from interp.models._families import bert, gpt2, gptj, llama, neox, olmoe
from interp.models._families._spec import Family, check_config, DeclaredConfig
from interp.models._weights import Weights, embed_scale_of, stack_layers

__all__ = [
    "FAMILIES",
    "NOT_YET_SUPPORTED",
    "SUPPORTED_FAMILIES",
    "arch_from_hf_config",
    "hf_state_from_weights",
    "hf_writable",
    "weights_from_hf",
]

_L = llama
# the builder table, one aligned line per family (the formatter leaves it as written)
# fmt: off
#: model_type -> its family: config reader, weight reader, HF writer, capabilities, config attributes
FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("gpt2",        gpt2.read_config, gpt2.read_weights, gpt2.write_weights, gpt2.CAPS, gpt2.ATTRIBUTES),
    Family("llama",       _L.read_config,   _L.read_weights,   _L.write_weights,   _L.CAPS["llama"], _L.ATTRIBUTES["llama"]),
    Family("qwen2",       _L.read_config,   _L.read_weights,   _L.write_weights,   _L.CAPS["qwen2"], _L.ATTRIBUTES["qwen2"]),
    Family("mistral",     _L.read_config,   _L.read_weights,   _L.write_weights,   _L.CAPS["mistral"], _L.ATTRIBUTES["mistral"]),
    Family("gemma",       _L.read_config,   _L.read_weights,   None,               _L.CAPS["gemma"], _L.ATTRIBUTES["gemma"]),
    Family("phi3",        _L.read_config,   _L.read_weights,   None,               _L.CAPS["phi3"], _L.ATTRIBUTES["phi3"]),
    Family("qwen3",       _L.read_config,   _L.read_weights,   None,               _L.CAPS["qwen3"], _L.ATTRIBUTES["qwen3"]),
    Family("olmo2",       _L.read_config,   _L.read_weights,   None,               _L.CAPS["olmo2"], _L.ATTRIBUTES["olmo2"]),
    Family("mixtral",     _L.read_config,   _L.read_weights,   None,               _L.CAPS["mixtral"], _L.ATTRIBUTES["mixtral"]),
    Family("olmoe",       olmoe.read_config, olmoe.read_weights, None,             olmoe.CAPS, olmoe.ATTRIBUTES),
    Family("gemma2",      _L.read_config,   _L.read_weights,   None,               _L.CAPS["gemma2"], _L.ATTRIBUTES["gemma2"]),
    Family("gemma3_text", _L.read_config,   _L.read_weights,   None,               _L.CAPS["gemma3_text"], _L.ATTRIBUTES["gemma3_text"]),
    Family("gptj",        gptj.read_config, gptj.read_weights, None,               gptj.CAPS, gptj.ATTRIBUTES),
    Family("gpt_neox",    neox.read_config, neox.read_weights, neox.write_weights, neox.CAPS, neox.ATTRIBUTES),
    Family("bert",        bert.read_config, bert.read_weights, None,               bert.CAPS, bert.ATTRIBUTES),
)}
# fmt: on

#: HF ``model_type`` -> interp family name (the same names: ``ArchInfo.family`` records where a config came from)
SUPPORTED_FAMILIES: dict[str, str] = {t: t for t in FAMILIES}

#: Families transformers knows but interp does not model yet, and the capability each lacks: a model of
#: one is refused (never analysed with a forward that would silently differ from its own).
NOT_YET_SUPPORTED: dict[str, str] = {
    "gemma3": "the multimodal wrapper (load its text model, model_type 'gemma3_text')",
}


def arch_from_hf_config(config: Any, *, name: str, has_unembed: bool = True) -> ArchInfo:
    """Build an :class:`ArchInfo` from a ``transformers`` config, or refuse the architecture (an unknown
    ``model_type``, or a config attribute its family neither reads nor knowingly ignores)."""
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(str(model_type))
    if family is None:
        missing = NOT_YET_SUPPORTED.get(str(model_type))
        why = f" (interp does not model its {missing} yet)" if missing else ""
        near = difflib.get_close_matches(str(model_type), list(FAMILIES), n=1, cutoff=0.5)
        raise UnsupportedArchitectureError(
            f"model {name!r} has architecture model_type={model_type!r}{why}; interp supports "
            f"{sorted(FAMILIES)} (pre-norm LayerNorm, pre-norm RMSNorm+GQA+RoPE, "
            "parallel attn/MLP, post-norm encoder)" + (f"; the nearest supported family is {near[0]!r}" if near else "")
        )
    check_config(config, family, name=name)
    return family.read_config(
        DeclaredConfig(config, family.attributes.reads),
        name=name,
        has_unembed=has_unembed,
        caps=family.caps,
        family=family.model_type,
    )


def weights_from_hf(hf_model: torch.nn.Module, arch: ArchInfo) -> Weights:
    """Read the weights of a loaded HF model of a supported family into TL layout (its family's reader)."""
    sd = dict(hf_model.state_dict())  # detached tensors sharing the model's storage
    family = FAMILIES[arch.family]
    with torch.no_grad():
        per_layer, glob = family.read_weights(sd, arch, family.caps)
        stacked = {k: stack_layers(v) for k, v in per_layer.items()}
        if arch.embed_scale != 1.0:  # Gemma: x₀ = W_E[t] · √d_model, with the module's own (rounded) factor
            glob["W_E"] = glob["W_E"] * embed_scale_of(hf_model, arch).to(glob["W_E"].dtype)
    return Weights(**stacked, **glob)


def hf_writable(arch: ArchInfo) -> bool:
    """True iff :func:`hf_state_from_weights` can write this architecture's weights back to HF."""
    family = FAMILIES.get(arch.family)
    return family is not None and family.write_weights is not None


def hf_state_from_weights(w: Weights, arch: ArchInfo) -> tuple[dict[str, Tensor], str]:
    """HF parameter name -> tensor for TL-layout weights ``w`` (the inverse of :func:`weights_from_hf`),
    and the name of the unembedding module ("lm_head").

    Every bias is written, zero or not (the caller drops zero ones its HF class has no parameter for). Gemma
    (folded gains and embedding scale), Phi-3 (fused matrices), GPT-J and the others without a writer are refused.
    """
    family = FAMILIES.get(arch.family)
    if family is None or family.write_weights is None:
        raise UnsupportedOperationError(
            f"model {arch.name!r} (family {arch.family!r}) has no TL -> Hugging Face weight map; "
            f"supported: {sorted(t for t, f in FAMILIES.items() if f.write_weights is not None)}"
        )
    return family.write_weights(w, arch.n_layers), "lm_head"
