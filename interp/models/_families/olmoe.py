"""OLMoE: Mixtral's experts with OLMo's QK-norm over the projection, in a pre-norm RMSNorm block.

    x_mid = x + Attn(N1(x));  x_out = x_mid + MoE(N2(x_mid))
    q = γ_q ⊙ (h W_Q) / rms(h W_Q) over all heads (k likewise over the KV heads), then RoPE
    MoE(h) = Σ_{e ∈ top k} r_e MLP_e(h),  r = softmax(h W_router) in float32, renormalised over the top k only
             when ``norm_topk_prob`` (OLMoE-1B-7B: not, so Σ r_e < 1)

Its weights carry Llama's names (``self_attn.{q,k}_norm``, ``mlp.gate``, ``mlp.experts.gate_up_proj``), so the
Llama-shaped readers read them; this file says what differs: the capabilities, the attributes, and the router's
renormalisation (``ArchInfo.router_renormalise``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from interp.models._arch import ArchInfo
from interp.models._families import llama
from interp.models._families._spec import Capabilities, ConfigAttributes

__all__ = ["ATTRIBUTES", "CAPS", "read_config", "read_weights"]

CAPS = Capabilities(qk_norm="projection", experts=True)

#: ``num_experts`` is what the config stores and ``num_local_experts`` its alias (the name the Llama-shaped reader
#: reads); no ``head_dim`` (HF's QK-norm is ``hidden_size`` wide: d_head = d_model / n_heads) and no sliding window
#: (HF's OLMoE masks causally only), so a config carrying either is refused; ``clip_qkv`` clamps q, k, v in HF's
#: forward (None: no clamp, the only value modelled)
ATTRIBUTES = ConfigAttributes(
    reads=frozenset(
        {
            "hidden_size",
            "num_attention_heads",
            "num_hidden_layers",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
            "rms_norm_eps",
            "hidden_act",
            "rope_parameters",
            "attention_bias",
            "num_experts",
            "num_local_experts",
            "num_experts_per_tok",
            "norm_topk_prob",
        }
    ),
    ignores=frozenset({"attention_dropout", "output_router_logits", "router_aux_loss_coef"}),  # eval; training loss
    requires={"clip_qkv": (None,)},
)

read_weights = llama.read_weights


def read_config(config: Any, *, name: str, has_unembed: bool, caps: Capabilities, family: str) -> ArchInfo:
    """The Llama-shaped reader's ArchInfo, with the router renormalising its top k iff ``norm_topk_prob``."""
    arch = llama.read_config(config, name=name, has_unembed=has_unembed, caps=caps, family=family)
    return replace(arch, router_renormalise=bool(config.norm_topk_prob))
