"""GPT-J (``model_type`` "gptj"): a parallel block with one LayerNorm for both sublayers, adjacent-pair
(interleaved) partial rotary, an lm_head bias.

    x_out = x + Attn(LN(x)) + MLP(LN(x))
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from interp.models._arch import ArchInfo
from interp.models._families._spec import Capabilities, ConfigAttributes
from interp.models._weights import collect_layers, detached, split_heads_in, split_heads_out

__all__ = ["ATTRIBUTES", "CAPS", "read_config", "read_weights"]

CAPS = Capabilities()
ATTRIBUTES = ConfigAttributes(
    reads=frozenset(
        {
            "n_embd",
            "n_head",
            "n_layer",
            "n_inner",
            "n_positions",
            "vocab_size",
            "layer_norm_epsilon",
            "activation_function",
            "rotary_dim",
        }
    ),
    ignores=frozenset({"attn_pdrop", "embd_pdrop", "resid_pdrop"}),  # dropouts (eval mode)
)


def read_config(config: Any, *, name: str, has_unembed: bool, caps: Capabilities, family: str) -> ArchInfo:
    d_model, n_heads = config.n_embd, config.n_head
    d_head = d_model // n_heads
    return ArchInfo(
        name=name,
        family=family,
        n_layers=config.n_layer,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_model=d_model,
        d_head=d_head,
        d_mlp=config.n_inner or 4 * d_model,
        d_vocab=config.vocab_size,
        n_ctx=config.n_positions,
        norm="layernorm",
        norm_placement="pre",
        parallel_attn_mlp=True,
        positional="rotary",
        causal=True,
        norm_eps=config.layer_norm_epsilon,
        gated_mlp=False,
        act_fn=config.activation_function,
        has_unembed=has_unembed,
        rotary_dim=config.rotary_dim or d_head,
        rotary_interleaved=True,
        shared_block_norm=True,
        attn_bias=False,
        mlp_bias=True,
        softmax_fp32=True,
    )


def read_weights(sd: dict[str, Tensor], a: ArchInfo, caps: Capabilities):
    """GPT-J: one LayerNorm ``ln_1`` feeds both sublayers of its parallel block (kept as ln1 and ln2)."""
    H = a.n_heads

    def layer(l: int) -> dict[str, Tensor]:
        b = f"transformer.h.{l}."
        wq = sd[b + "attn.q_proj.weight"]
        zeros_h = torch.zeros(H, a.d_head, dtype=wq.dtype, device=wq.device)
        return {
            "W_Q": split_heads_in(wq, H),
            "W_K": split_heads_in(sd[b + "attn.k_proj.weight"], H),
            "W_V": split_heads_in(sd[b + "attn.v_proj.weight"], H),
            "b_Q": zeros_h,
            "b_K": zeros_h,
            "b_V": zeros_h,
            "W_O": split_heads_out(sd[b + "attn.out_proj.weight"], H),
            "b_O": torch.zeros(a.d_model, dtype=wq.dtype, device=wq.device),
            "W_in": sd[b + "mlp.fc_in.weight"].T,
            "b_in": sd[b + "mlp.fc_in.bias"],
            "W_out": sd[b + "mlp.fc_out.weight"].T,
            "b_out": sd[b + "mlp.fc_out.bias"],
            "ln1_w": sd[b + "ln_1.weight"],
            "ln1_b": sd[b + "ln_1.bias"],
            "ln2_w": sd[b + "ln_1.weight"],
            "ln2_b": sd[b + "ln_1.bias"],
        }

    per = collect_layers(a.n_layers, layer)
    W_E = detached(sd["transformer.wte.weight"])
    glob = dict(
        W_E=W_E,
        W_pos=None,
        W_type=None,
        W_gate=None,
        lnf_w=detached(sd["transformer.ln_f.weight"]),
        lnf_b=detached(sd["transformer.ln_f.bias"]),
        W_U=detached(sd["lm_head.weight"]).T.contiguous(),
        b_U=detached(sd["lm_head.bias"])
        if "lm_head.bias" in sd
        else torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob
