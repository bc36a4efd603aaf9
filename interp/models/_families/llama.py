"""The Llama-shaped families: pre-norm RMSNorm, GQA, rotary (halves), gated MLP — one config reader and one
weight reader, and one capability line and one attribute list per family.

    x_mid = x + Attn(N1(x));  x_out = x_mid + MLP(N2(x_mid))

with each family's capabilities (:class:`~interp.models._families._spec.Capabilities`): Gemma's (1 + w) norm
gains and √d_model embedding scale (folded into the weights); Gemma 2/3's sandwich norms,
x_mid = x + N1'(Attn(N1(x))); OLMo 2's output norms without input norms, x_mid = x + N1'(Attn(x)); QK-norm per
head (Qwen 3, Gemma 3) or over the whole projection (OLMo 2); Mixtral's experts, MLP(h) = Σ_{e ∈ top-k} r_e
MLP_e(h); Gemma 2/3's soft-caps. Read off the config: Qwen 2's q/k/v biases (in the weights), sliding windows
(Mistral, Qwen 2/3, Phi-3, Mixtral, Gemma 2/3), Phi-3's partial rotary factor and fused matrices. Every
family's score scale is read off the loaded modules (:func:`interp.models._arch.with_module_scales`).
"""

from __future__ import annotations

from typing import Any, Callable

import einops
import torch
from torch import Tensor

from interp.models._arch import ArchInfo
from interp.models._families._spec import Capabilities, ConfigAttributes
from interp.models._weights import Weights, collect_layers, detached, split_heads_in, split_heads_out

__all__ = ["ATTRIBUTES", "CAPS", "read_config", "read_weights", "write_weights"]

#: family -> what its readers branch on (one line each)
CAPS: dict[str, Capabilities] = {
    "llama": Capabilities(),
    "qwen2": Capabilities(),
    "mistral": Capabilities(),
    "phi3": Capabilities(),
    "gemma": Capabilities(gain_offset=1.0, embed_scale=True),
    "qwen3": Capabilities(qk_norm="head"),
    "olmo2": Capabilities(qk_norm="projection", sandwich_norms=True, pre_norms=False),
    "mixtral": Capabilities(experts=True),
    "gemma2": Capabilities(gain_offset=1.0, embed_scale=True, sandwich_norms=True, softcaps=True),
    "gemma3_text": Capabilities(gain_offset=1.0, embed_scale=True, sandwich_norms=True, softcaps=True, qk_norm="head"),
}

_SHAPE = frozenset(
    {
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "rms_norm_eps",
        "hidden_act",
        "rope_parameters",
    }
)
_BIASES = frozenset({"attention_bias", "mlp_bias"})
_WINDOWS = frozenset({"sliding_window", "use_sliding_window", "layer_types"})
_DROPOUT = frozenset({"attention_dropout"})  # eval mode
#: the score scale (Gemma's query_pre_attn_scalar) is read off the loaded modules; Qwen's max_window_layers and
#: Gemma 3's _sliding_window_pattern are already folded into layer_types by the config itself; Phi-3's
#: original_max_position_embeddings is the rotary module's (interp reads the tables off it)
_GEMMA = dict(requires={"use_bidirectional_attention": (False, None)})


def _attrs(*reads: frozenset[str] | str, ignores: tuple[str, ...] = (), **kw: Any) -> ConfigAttributes:
    names: set[str] = set()
    for r in reads:
        names |= {r} if isinstance(r, str) else set(r)
    return ConfigAttributes(reads=frozenset(names), ignores=_DROPOUT | frozenset(ignores), **kw)


#: family -> the config attributes its reader reads, those it knowingly ignores, those it requires
ATTRIBUTES: dict[str, ConfigAttributes] = {
    "llama": _attrs(_SHAPE, _BIASES, ignores=("pretraining_tp",)),  # transformers 5 ignores pretraining_tp
    "qwen2": _attrs(_SHAPE, _WINDOWS, ignores=("max_window_layers",)),
    "mistral": _attrs(_SHAPE, "sliding_window"),
    "phi3": _attrs(
        _SHAPE,
        "sliding_window",
        "partial_rotary_factor",
        ignores=("original_max_position_embeddings", "embd_pdrop", "resid_pdrop"),
    ),
    # Gemma's modules read hidden_act (a legacy hidden_activation is unused)
    "gemma": _attrs(_SHAPE, "attention_bias", ignores=("query_pre_attn_scalar", "hidden_activation"), **_GEMMA),
    "qwen3": _attrs(_SHAPE, "attention_bias", _WINDOWS, ignores=("max_window_layers",)),
    "olmo2": _attrs(_SHAPE, "attention_bias"),
    "mixtral": _attrs(
        _SHAPE,
        "sliding_window",
        "num_local_experts",
        "num_experts_per_tok",
        ignores=("output_router_logits", "router_aux_loss_coef", "router_jitter_noise"),
    ),  # training
    "gemma2": _attrs(
        _SHAPE,
        "attention_bias",
        "hidden_activation",
        _WINDOWS,
        "attn_logit_softcapping",
        "final_logit_softcapping",
        ignores=("query_pre_attn_scalar",),
        **_GEMMA,
    ),
    "gemma3_text": _attrs(
        _SHAPE,
        "attention_bias",
        "hidden_activation",
        _WINDOWS,
        "attn_logit_softcapping",
        "final_logit_softcapping",
        ignores=("query_pre_attn_scalar", "_sliding_window_pattern"),
        **_GEMMA,
    ),
}


def read_config(config: Any, *, name: str, has_unembed: bool, caps: Capabilities, family: str) -> ArchInfo:
    """Pre-norm RMSNorm + GQA + rotary + gated MLP with ``caps``' capabilities (``config`` shows only the family's
    declared attributes: a family that does not read ``sliding_window`` gets no window)."""
    n_heads = config.num_attention_heads
    n_layers = config.num_hidden_layers
    d_head = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    rope = getattr(config, "rope_parameters", None) or {}
    partial = getattr(config, "partial_rotary_factor", None) or rope.get("partial_rotary_factor", 1.0) or 1.0
    return ArchInfo(
        name=name,
        family=family,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=getattr(config, "num_key_value_heads", None) or n_heads,
        d_model=config.hidden_size,
        d_head=d_head,
        d_mlp=config.intermediate_size,
        d_vocab=config.vocab_size,
        n_ctx=config.max_position_embeddings,
        norm="rmsnorm",
        norm_placement="pre",
        parallel_attn_mlp=False,
        positional="rotary",
        causal=True,
        norm_eps=config.rms_norm_eps,
        gated_mlp=True,
        act_fn=getattr(config, "hidden_activation", None) or config.hidden_act,
        has_unembed=has_unembed,
        rotary_dim=int(d_head * partial),
        attn_bias=bool(getattr(config, "attention_bias", False)),
        mlp_bias=bool(getattr(config, "mlp_bias", False)),
        sliding_windows=_sliding_windows(config, n_layers),
        softmax_fp32=True,
        embed_scale=float(config.hidden_size) ** 0.5 if caps.embed_scale else 1.0,
        qk_norm=bool(caps.qk_norm),
        qk_norm_scope=caps.qk_norm or "head",
        sandwich_norms=caps.sandwich_norms,
        pre_norms=caps.pre_norms,
        n_experts=int(config.num_local_experts) if caps.experts else 0,
        experts_per_token=int(config.num_experts_per_tok) if caps.experts else 0,
        attn_softcap=float(getattr(config, "attn_logit_softcapping", None) or 0.0) if caps.softcaps else 0.0,
        final_softcap=float(getattr(config, "final_logit_softcapping", None) or 0.0) if caps.softcaps else 0.0,
    )


def _sliding_windows(config: Any, n_layers: int) -> tuple[int, ...]:
    """Each layer's sliding window from the config (``layer_types`` where the config has them, else one
    ``sliding_window`` for every layer, as Mistral does); () when every layer attends globally."""
    w = getattr(config, "sliding_window", None)
    if not w or getattr(config, "use_sliding_window", True) is False:
        return ()
    types = getattr(config, "layer_types", None)
    out = tuple(int(w) if types is None or types[l] == "sliding_attention" else 0 for l in range(n_layers))
    return out if any(out) else ()


def read_weights(sd: dict[str, Tensor], a: ArchInfo, caps: Capabilities):
    # Gemma's RMSNorm multiplies by (1 + w): the gain the block applies is 1 + w, kept here as the gain
    gain = (lambda w: w + caps.gain_offset) if caps.gain_offset else (lambda w: w)
    per = collect_layers(a.n_layers, lambda l: _layer(sd, a, gain, f"model.layers.{l}."))
    W_E = detached(sd["model.embed_tokens.weight"])
    W_U = detached(sd["lm_head.weight"]).T.contiguous() if "lm_head.weight" in sd else W_E.T.contiguous()
    glob = dict(
        W_E=W_E,
        W_pos=None,
        W_type=None,
        lnf_w=gain(detached(sd["model.norm.weight"])),
        lnf_b=torch.zeros(a.d_model, dtype=W_E.dtype, device=W_E.device),
        W_U=W_U,
        b_U=torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob


def _layer(sd: dict[str, Tensor], a: ArchInfo, gain: Callable[[Tensor], Tensor], b: str) -> dict[str, Tensor]:
    """One layer's tensors (prefix ``b``, e.g. "model.layers.3.") in TL layout: attention, MLP, norms."""
    attn, ref = _attention(sd, a, b)
    zeros_d = torch.zeros(a.d_model, dtype=ref.dtype, device=ref.device)
    return {
        **attn,
        "b_O": sd.get(b + "self_attn.o_proj.bias", zeros_d),
        **_mlp(sd, a, b, ref, zeros_d),
        **_norms(sd, a, b, gain, zeros_d),
    }


def _attention(sd: dict[str, Tensor], a: ArchInfo, b: str) -> tuple[dict[str, Tensor], Tensor]:
    """(W_Q, W_K, W_V, b_Q, b_K, b_V, W_O by name; the raw W_q, whose dtype and device the zeros take)."""
    H, Hkv, dh = a.n_heads, a.n_kv_heads, a.d_head
    if b + "self_attn.qkv_proj.weight" in sd:  # Phi-3: q | k | v rows in one matrix
        wq, wk, wv = sd[b + "self_attn.qkv_proj.weight"].split([H * dh, Hkv * dh, Hkv * dh], dim=0)
    else:
        wq, wk, wv = (sd[b + f"self_attn.{n}_proj.weight"] for n in "qkv")

    def bias(key: str, n: int) -> Tensor:
        return sd[key].reshape(n, dh) if key in sd else torch.zeros(n, dh, dtype=wq.dtype, device=wq.device)

    out = {
        "W_Q": split_heads_in(wq, H),
        "W_K": split_heads_in(wk, Hkv),
        "W_V": split_heads_in(wv, Hkv),
        "b_Q": bias(b + "self_attn.q_proj.bias", H),
        "b_K": bias(b + "self_attn.k_proj.bias", Hkv),
        "b_V": bias(b + "self_attn.v_proj.bias", Hkv),
        "W_O": split_heads_out(sd[b + "self_attn.o_proj.weight"], H),
    }
    return out, wq


def _mlp(sd: dict[str, Tensor], a: ArchInfo, b: str, ref: Tensor, zeros_d: Tensor) -> dict[str, Tensor]:
    """The gated MLP (W_in = up, W_gate = gate, W_out = down, biases), or a mixture of experts' router and
    experts beside an empty dense MLP."""
    moe: dict[str, Tensor] = {}
    if a.n_experts:  # Mixtral: a router [E, d] and experts' gate | up [E, 2 d_mlp, d] and down [E, d, d_mlp]
        gu, down = sd[b + "mlp.experts.gate_up_proj"], sd[b + "mlp.experts.down_proj"]
        moe = {
            "W_router": sd[b + "mlp.gate.weight"].T,
            "W_gate_e": gu[:, : a.d_mlp].transpose(1, 2),
            "W_in_e": gu[:, a.d_mlp :].transpose(1, 2),
            "W_out_e": down.transpose(1, 2),
        }
        w_gate = w_up = ref.new_zeros(0, a.d_model)  # the dense MLP is empty
    elif b + "mlp.gate_up_proj.weight" in sd:  # Phi-3: gate | up rows in one matrix
        w_gate, w_up = sd[b + "mlp.gate_up_proj.weight"].chunk(2, dim=0)
    else:
        w_gate, w_up = sd[b + "mlp.gate_proj.weight"], sd[b + "mlp.up_proj.weight"]
    return {
        "W_in": w_up.T,
        "W_gate": w_gate.T,
        "b_in": sd.get(b + "mlp.up_proj.bias", ref.new_zeros(w_up.shape[0])),
        "b_gate": sd.get(b + "mlp.gate_proj.bias", ref.new_zeros(w_up.shape[0])),
        "W_out": sd[b + "mlp.down_proj.weight"].T if not a.n_experts else ref.new_zeros(0, a.d_model),
        "b_out": sd.get(b + "mlp.down_proj.bias", zeros_d),
        **moe,
    }


def _norms(
    sd: dict[str, Tensor], a: ArchInfo, b: str, gain: Callable[[Tensor], Tensor], zeros_d: Tensor
) -> dict[str, Tensor]:
    """The block's norm gains: pre-norms ln1/ln2, the sandwich norms' output gains, the q/k norms."""
    # no pre-norm (OLMo 2): the sublayers read the raw stream; ln1/ln2 kept as identity gains, never applied
    pre1 = gain(sd[b + "input_layernorm.weight"]) if a.pre_norms else torch.ones_like(zeros_d)
    pre2 = (
        (gain(sd[b + "pre_feedforward_layernorm.weight"]) if a.pre_norms else torch.ones_like(zeros_d))
        if a.sandwich_norms
        else gain(sd[b + "post_attention_layernorm.weight"])
    )
    out = {"ln1_w": pre1, "ln1_b": zeros_d, "ln2_w": pre2, "ln2_b": zeros_d}
    if a.sandwich_norms:
        out["ln1_post_w"] = gain(sd[b + "post_attention_layernorm.weight"])
        out["ln2_post_w"] = gain(sd[b + "post_feedforward_layernorm.weight"])
    if a.qk_norm:
        H, Hkv, dh = a.n_heads, a.n_kv_heads, a.d_head
        qk_shape = (lambda g, n: g) if a.qk_norm_scope == "head" else (lambda g, n: g.reshape(n, dh))
        out["q_norm_w"] = qk_shape(gain(sd[b + "self_attn.q_norm.weight"]), H)
        out["k_norm_w"] = qk_shape(gain(sd[b + "self_attn.k_norm.weight"]), Hkv)
    return out


def write_weights(w: Weights, n_layers: int) -> dict[str, Tensor]:
    """TL layout -> Llama's parameter names and raw gains (the inverse of :func:`read_weights` for the families
    that keep Llama's names and gains: Llama, Qwen 2, Mistral)."""
    sd: dict[str, Tensor] = {"model.embed_tokens.weight": w.W_E}
    heads_in = lambda W: einops.rearrange(W, "n m h -> (n h) m")  # noqa: E731
    for l in range(n_layers):
        p = f"model.layers.{l}."
        sd[p + "self_attn.q_proj.weight"] = heads_in(w.W_Q[l])
        sd[p + "self_attn.k_proj.weight"] = heads_in(w.W_K[l])
        sd[p + "self_attn.v_proj.weight"] = heads_in(w.W_V[l])
        sd[p + "self_attn.q_proj.bias"] = w.b_Q[l].reshape(-1)
        sd[p + "self_attn.k_proj.bias"] = w.b_K[l].reshape(-1)
        sd[p + "self_attn.v_proj.bias"] = w.b_V[l].reshape(-1)
        sd[p + "self_attn.o_proj.weight"] = einops.rearrange(w.W_O[l], "n h m -> m (n h)")
        sd[p + "self_attn.o_proj.bias"] = w.b_O[l]
        sd[p + "mlp.up_proj.weight"], sd[p + "mlp.up_proj.bias"] = w.W_in[l].T, w.b_in[l]
        sd[p + "mlp.down_proj.bias"] = w.b_out[l]
        sd[p + "mlp.gate_proj.weight"] = w.need("W_gate")[l].T
        if w.b_gate is not None:
            sd[p + "mlp.gate_proj.bias"] = w.b_gate[l]
        sd[p + "mlp.down_proj.weight"] = w.W_out[l].T
        sd[p + "input_layernorm.weight"] = w.ln1_w[l]
        sd[p + "post_attention_layernorm.weight"] = w.ln2_w[l]
    sd["model.norm.weight"] = w.need("lnf_w")
    sd["lm_head.weight"] = w.need("W_U").T
    return sd
