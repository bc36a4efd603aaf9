"""GPT-NeoX (``model_type`` "gpt_neox"): LayerNorm, partial rotary (halves), a fused per-head query_key_value,
parallel (``use_parallel_residual``) or sequential blocks.

    parallel:   x_out = x + Attn(N1(x)) + MLP(N2(x))
    sequential: x_mid = x + Attn(N1(x));  x_out = x_mid + MLP(N2(x_mid))
"""

from __future__ import annotations

from typing import Any

import einops
import torch
from torch import Tensor

from interp.errors import UnsupportedArchitectureError
from interp.models._arch import ArchInfo
from interp.models._families._spec import Capabilities, ConfigAttributes
from interp.models._weights import Weights, collect_layers, detached, split_heads_out

__all__ = ["ATTRIBUTES", "CAPS", "read_config", "read_weights", "write_weights"]

CAPS = Capabilities()
ATTRIBUTES = ConfigAttributes(
    reads=frozenset(
        {
            "num_attention_heads",
            "hidden_size",
            "num_hidden_layers",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
            "layer_norm_eps",
            "hidden_act",
            "use_parallel_residual",
            "attention_bias",
            "rotary_pct",
            "rope_parameters",
        }
    ),
    # dropouts (eval mode); is_decoder is not read by GPTNeoXForCausalLM (always causal)
    ignores=frozenset({"attention_dropout", "hidden_dropout", "classifier_dropout", "is_decoder"}),
)


def read_config(config: Any, *, name: str, has_unembed: bool, caps: Capabilities, family: str) -> ArchInfo:
    n_heads = config.num_attention_heads
    d_head = config.hidden_size // n_heads
    if not getattr(config, "attention_bias", True):
        raise UnsupportedArchitectureError(
            f"model {name!r} is GPT-NeoX with attention_bias=False; interp supports GPT-NeoX with attention "
            "biases only (transformer-lens's NeoX bridge splits the fused query_key_value bias)"
        )
    rotary_pct = getattr(config, "rotary_pct", None)
    if rotary_pct is None:
        rotary_pct = (getattr(config, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0)
    return ArchInfo(
        name=name,
        family=family,
        n_layers=config.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_model=config.hidden_size,
        d_head=d_head,
        d_mlp=config.intermediate_size,
        d_vocab=config.vocab_size,
        n_ctx=config.max_position_embeddings,
        norm="layernorm",
        norm_placement="pre",
        parallel_attn_mlp=bool(config.use_parallel_residual),
        positional="rotary",
        causal=True,
        norm_eps=config.layer_norm_eps,
        gated_mlp=False,
        act_fn=config.hidden_act,
        has_unembed=has_unembed,
        rotary_dim=int(d_head * rotary_pct),
        attn_bias=True,
    )


def read_weights(sd: dict[str, Tensor], a: ArchInfo, caps: Capabilities):
    H = a.n_heads
    p = "gpt_neox."

    def layer(l: int) -> dict[str, Tensor]:
        b = f"{p}layers.{l}."
        # query_key_value rows are laid out per head: [n_heads, (q|k|v), d_head]
        w = einops.rearrange(sd[b + "attention.query_key_value.weight"], "(n t h) m -> t n m h", n=H, t=3)
        bb = einops.rearrange(sd[b + "attention.query_key_value.bias"], "(n t h) -> t n h", n=H, t=3)
        return {
            "W_Q": w[0],
            "W_K": w[1],
            "W_V": w[2],
            "b_Q": bb[0],
            "b_K": bb[1],
            "b_V": bb[2],
            "W_O": split_heads_out(sd[b + "attention.dense.weight"], H),
            "b_O": sd[b + "attention.dense.bias"],
            "W_in": sd[b + "mlp.dense_h_to_4h.weight"].T,
            "b_in": sd[b + "mlp.dense_h_to_4h.bias"],
            "W_out": sd[b + "mlp.dense_4h_to_h.weight"].T,
            "b_out": sd[b + "mlp.dense_4h_to_h.bias"],
            "ln1_w": sd[b + "input_layernorm.weight"],
            "ln1_b": sd[b + "input_layernorm.bias"],
            "ln2_w": sd[b + "post_attention_layernorm.weight"],
            "ln2_b": sd[b + "post_attention_layernorm.bias"],
        }

    per = collect_layers(a.n_layers, layer)
    W_E = detached(sd[p + "embed_in.weight"])
    glob = dict(
        W_E=W_E,
        W_pos=None,
        W_type=None,
        W_gate=None,
        lnf_w=detached(sd[p + "final_layer_norm.weight"]),
        lnf_b=detached(sd[p + "final_layer_norm.bias"]),
        W_U=detached(sd["lm_head.weight"] if "lm_head.weight" in sd else sd["embed_out.weight"]).T.contiguous(),
        b_U=torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob


def write_weights(w: Weights, n_layers: int) -> dict[str, Tensor]:
    """TL layout -> GPT-NeoX's parameter names (the inverse of :func:`read_weights`)."""
    sd: dict[str, Tensor] = {"gpt_neox.embed_in.weight": w.W_E}
    for l in range(n_layers):
        p = f"gpt_neox.layers.{l}."
        sd[p + "attention.query_key_value.weight"] = einops.rearrange(
            torch.stack([w.W_Q[l], w.W_K[l], w.W_V[l]]), "t n m h -> (n t h) m"
        )
        sd[p + "attention.query_key_value.bias"] = einops.rearrange(
            torch.stack([w.b_Q[l], w.b_K[l], w.b_V[l]]), "t n h -> (n t h)"
        )
        sd[p + "attention.dense.weight"] = einops.rearrange(w.W_O[l], "n h m -> m (n h)")
        sd[p + "attention.dense.bias"] = w.b_O[l]
        sd[p + "mlp.dense_h_to_4h.weight"], sd[p + "mlp.dense_h_to_4h.bias"] = w.W_in[l].T, w.b_in[l]
        sd[p + "mlp.dense_4h_to_h.weight"], sd[p + "mlp.dense_4h_to_h.bias"] = w.W_out[l].T, w.b_out[l]
        sd[p + "input_layernorm.weight"], sd[p + "input_layernorm.bias"] = w.ln1_w[l], w.ln1_b[l]
        sd[p + "post_attention_layernorm.weight"], sd[p + "post_attention_layernorm.bias"] = w.ln2_w[l], w.ln2_b[l]
    sd["gpt_neox.final_layer_norm.weight"], sd["gpt_neox.final_layer_norm.bias"] = w.need("lnf_w"), w.need("lnf_b")
    sd["lm_head.weight"] = w.need("W_U").T  # "embed_out" in older transformers (the caller renames it)
    return sd
