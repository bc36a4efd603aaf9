"""GPT-2 (``model_type`` "gpt2"): pre-norm LayerNorm, learned positions, fused c_attn Conv1D (y = x W).

    x_mid = x + Attn(LN1(x));  x_out = x_mid + MLP(LN2(x_mid))

with GPT-2's score-scale flags: scores × d_head^-1/2 unless ``scale_attn_weights`` is off, and × 1/(l+1) on
layer l when ``scale_attn_by_inverse_layer_idx`` is set.
"""

from __future__ import annotations

from typing import Any

import einops
import torch
from torch import Tensor

from interp.models._arch import ArchInfo
from interp.models._families._spec import Capabilities, ConfigAttributes
from interp.models._weights import Weights, collect_layers, detached

__all__ = ["ATTRIBUTES", "CAPS", "read_config", "read_weights", "write_weights"]

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
            "scale_attn_weights",
            "scale_attn_by_inverse_layer_idx",
        }
    ),
    # dropouts (eval mode); the sequence-summary head of GPT2DoubleHeads (not the LM); reorder_and_upcast_attn
    # computes the same scores in float32 (numerics only)
    ignores=frozenset(
        {
            "attn_pdrop",
            "embd_pdrop",
            "resid_pdrop",
            "summary_activation",
            "summary_first_dropout",
            "summary_proj_to_labels",
            "summary_type",
            "summary_use_proj",
            "reorder_and_upcast_attn",
        }
    ),
    requires={"add_cross_attention": (False,)},
)


def read_config(config: Any, *, name: str, has_unembed: bool, caps: Capabilities, family: str) -> ArchInfo:
    d_model, n_heads = config.n_embd, config.n_head
    base = (d_model // n_heads) ** -0.5 if getattr(config, "scale_attn_weights", True) else 1.0
    by_layer = bool(getattr(config, "scale_attn_by_inverse_layer_idx", False))
    return ArchInfo(
        attn_scales=tuple(base / (l + 1) if by_layer else base for l in range(config.n_layer))
        if by_layer or base == 1.0
        else (),
        name=name,
        family=family,
        n_layers=config.n_layer,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_model=d_model,
        d_head=d_model // n_heads,
        d_mlp=config.n_inner or 4 * d_model,
        d_vocab=config.vocab_size,
        n_ctx=config.n_positions,
        norm="layernorm",
        norm_placement="pre",
        parallel_attn_mlp=False,
        positional="learned",
        causal=True,
        norm_eps=config.layer_norm_epsilon,
        gated_mlp=False,
        act_fn=config.activation_function,
        has_unembed=has_unembed,
    )


def read_weights(sd: dict[str, Tensor], a: ArchInfo, caps: Capabilities):
    p = "transformer." if "transformer.wte.weight" in sd else ""
    H, dh = a.n_heads, a.d_head

    def layer(l: int) -> dict[str, Tensor]:
        b = f"{p}h.{l}."
        W_qkv = sd[b + "attn.c_attn.weight"]  # Conv1D: y = x W, W [d_model, 3*d_model]
        b_qkv = sd[b + "attn.c_attn.bias"]
        Wq, Wk, Wv = W_qkv.split(a.d_model, dim=1)
        bq, bk, bv = b_qkv.split(a.d_model)
        heads_in = lambda w: einops.rearrange(w, "m (n h) -> n m h", n=H)  # noqa: E731
        return {
            "W_Q": heads_in(Wq),
            "W_K": heads_in(Wk),
            "W_V": heads_in(Wv),
            "b_Q": bq.reshape(H, dh),
            "b_K": bk.reshape(H, dh),
            "b_V": bv.reshape(H, dh),
            "W_O": einops.rearrange(sd[b + "attn.c_proj.weight"], "(n h) m -> n h m", n=H),
            "b_O": sd[b + "attn.c_proj.bias"],
            "W_in": sd[b + "mlp.c_fc.weight"],
            "b_in": sd[b + "mlp.c_fc.bias"],
            "W_out": sd[b + "mlp.c_proj.weight"],
            "b_out": sd[b + "mlp.c_proj.bias"],
            "ln1_w": sd[b + "ln_1.weight"],
            "ln1_b": sd[b + "ln_1.bias"],
            "ln2_w": sd[b + "ln_2.weight"],
            "ln2_b": sd[b + "ln_2.bias"],
        }

    per = collect_layers(a.n_layers, layer)
    W_E = detached(sd[p + "wte.weight"])
    W_U = detached(sd["lm_head.weight"]).T.contiguous() if "lm_head.weight" in sd else W_E.T.contiguous()
    glob = dict(
        W_E=W_E,
        W_pos=detached(sd[p + "wpe.weight"]),
        W_type=None,
        W_gate=None,
        lnf_w=detached(sd[p + "ln_f.weight"]),
        lnf_b=detached(sd[p + "ln_f.bias"]),
        W_U=W_U,
        b_U=torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob


def write_weights(w: Weights, n_layers: int) -> dict[str, Tensor]:
    """TL layout -> GPT-2's parameter names (the inverse of :func:`read_weights`)."""
    sd: dict[str, Tensor] = {"transformer.wte.weight": w.W_E, "transformer.wpe.weight": w.need("W_pos")}
    heads = lambda W: einops.rearrange(W, "n m h -> m (n h)")  # noqa: E731
    for l in range(n_layers):
        p = f"transformer.h.{l}."
        sd[p + "attn.c_attn.weight"] = torch.cat([heads(w.W_Q[l]), heads(w.W_K[l]), heads(w.W_V[l])], dim=1)
        sd[p + "attn.c_attn.bias"] = torch.cat([w.b_Q[l].reshape(-1), w.b_K[l].reshape(-1), w.b_V[l].reshape(-1)])
        sd[p + "attn.c_proj.weight"] = einops.rearrange(w.W_O[l], "n h m -> (n h) m")
        sd[p + "attn.c_proj.bias"] = w.b_O[l]
        sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"] = w.W_in[l], w.b_in[l]
        sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"] = w.W_out[l], w.b_out[l]
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = w.ln1_w[l], w.ln1_b[l]
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = w.ln2_w[l], w.ln2_b[l]
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = w.need("lnf_w"), w.need("lnf_b")
    sd["lm_head.weight"] = w.need("W_U").T
    return sd
