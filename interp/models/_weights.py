"""Frozen per-layer weights in TransformerLens's layout, read straight from the HF module, and
the inverse map (TL layout -> HF parameter names) that writes edited weights back.

Row-vector convention (TL): a head's query is q = x W_Q + b_Q, its write is z W_O, so

    W_Q [n_layers, n_heads, d_model, d_head]     W_K, W_V [n_layers, n_kv_heads, d_model, d_head]
    W_O [n_layers, n_heads, d_head, d_model]     W_in [n_layers, d_model, d_mlp]
    W_out [n_layers, d_mlp, d_model]             W_U [d_model, d_vocab]

K and V keep their ``n_kv_heads`` (GQA is not expanded: query head h reads KV head
``arch.kv_head(h)``). Norm gains/biases are kept unfolded: these are the model's own weights,
not TransformerLens's folded "compatibility mode" ones. Tensors are detached copies, so
nothing here holds the model or its autograd graph.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any, Iterator, Optional

import einops
import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import UnsupportedOperationError
from interp.models._arch import ArchInfo

__all__ = ["Weights", "hf_state_from_weights", "hf_writable", "weights_from_hf"]


@dataclass(frozen=True)
class Weights:
    """Stacked weights of one model (see module docstring for shapes). Optional ones are None."""

    W_E: Float[Tensor, "d_vocab d_model"]
    W_pos: Optional[Float[Tensor, "n_ctx d_model"]]
    W_type: Optional[Float[Tensor, "n_types d_model"]]
    W_Q: Float[Tensor, "n_layers n_heads d_model d_head"]
    W_K: Float[Tensor, "n_layers n_kv_heads d_model d_head"]
    W_V: Float[Tensor, "n_layers n_kv_heads d_model d_head"]
    W_O: Float[Tensor, "n_layers n_heads d_head d_model"]
    b_Q: Float[Tensor, "n_layers n_heads d_head"]
    b_K: Float[Tensor, "n_layers n_kv_heads d_head"]
    b_V: Float[Tensor, "n_layers n_kv_heads d_head"]
    b_O: Float[Tensor, "n_layers d_model"]
    W_in: Float[Tensor, "n_layers d_model d_mlp"]
    W_gate: Optional[Float[Tensor, "n_layers d_model d_mlp"]]
    b_in: Float[Tensor, "n_layers d_mlp"]
    W_out: Float[Tensor, "n_layers d_mlp d_model"]
    b_out: Float[Tensor, "n_layers d_model"]
    ln1_w: Float[Tensor, "n_layers d_model"]
    ln1_b: Float[Tensor, "n_layers d_model"]
    ln2_w: Float[Tensor, "n_layers d_model"]
    ln2_b: Float[Tensor, "n_layers d_model"]
    lnf_w: Optional[Float[Tensor, "d_model"]]
    lnf_b: Optional[Float[Tensor, "d_model"]]
    W_U: Optional[Float[Tensor, "d_model d_vocab"]]
    b_U: Optional[Float[Tensor, "d_vocab"]]
    ln_emb_w: Optional[Float[Tensor, "d_model"]] = None  # post-norm encoders' embedding norm
    ln_emb_b: Optional[Float[Tensor, "d_model"]] = None
    b_gate: Optional[Float[Tensor, "n_layers d_mlp"]] = None  # gated MLPs (zeros unless the gate has a bias)
    ln1_post_w: Optional[Float[Tensor, "n_layers d_model"]] = None  # sandwich norms: on the attention output
    ln2_post_w: Optional[Float[Tensor, "n_layers d_model"]] = None  # and on the MLP output (Gemma 2/3)
    # QK-norm gains: [n_layers, d_head] (scope "head": one gain shared by the heads) or [n_layers, n_heads,
    # d_head] / [n_layers, n_kv_heads, d_head] (scope "projection": the projection-wide gain split per head)
    q_norm_w: Optional[Float[Tensor, "n_layers *heads d_head"]] = None
    k_norm_w: Optional[Float[Tensor, "n_layers *heads d_head"]] = None
    # a mixture-of-experts MLP (Mixtral): the router and each expert's gated MLP (the dense W_in, W_gate, W_out
    # are then empty, d_mlp wide 0)
    W_router: Optional[Float[Tensor, "n_layers d_model n_experts"]] = None
    W_in_e: Optional[Float[Tensor, "n_layers n_experts d_model d_mlp"]] = None
    W_gate_e: Optional[Float[Tensor, "n_layers n_experts d_model d_mlp"]] = None
    W_out_e: Optional[Float[Tensor, "n_layers n_experts d_mlp d_model"]] = None

    def to(self, device: Any = None, dtype: Any = None) -> "Weights":
        """A copy with every tensor moved/cast."""
        moved: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            moved[f.name] = None if v is None else v.to(device=device, dtype=dtype)
        return Weights(**moved)

    def need(self, name: str) -> Tensor:
        """The weight ``name`` (e.g. ``"W_U"``, ``"lnf_w"``), or an UnsupportedOperationError naming it
        when this model has none (an encoder has no W_U, a norm-free model no final-norm gain)."""
        v = getattr(self, name)
        if v is None:
            raise UnsupportedOperationError(f"this model has no weights.{name}, which this operation needs")
        return v

    def with_updates(self, **updates: Any) -> "Weights":
        """A copy with some fields replaced (used by basis rotation)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(updates)
        return Weights(**values)


def _t(x: Tensor) -> Tensor:
    return x.detach().clone()


def _zeros_like_bias(n_layers: int, *shape: int, ref: Tensor) -> Tensor:
    return torch.zeros(n_layers, *shape, dtype=ref.dtype, device=ref.device)


def _split_heads_in(w: Tensor, n: int) -> Tensor:
    """HF Linear weight [n*d_head, d_model] (y = x Wᵀ) -> TL [n, d_model, d_head]."""
    return einops.rearrange(w, "(n h) m -> n m h", n=n)


def _split_heads_out(w: Tensor, n: int) -> Tensor:
    """HF Linear weight [d_model, n*d_head] -> TL W_O [n, d_head, d_model]."""
    return einops.rearrange(w, "m (n h) -> n h m", n=n)


def weights_from_hf(hf_model: torch.nn.Module, arch: ArchInfo) -> Weights:
    """Read the weights of a loaded HF model of a supported family into TL layout."""
    sd = dict(hf_model.state_dict())  # detached tensors sharing the model's storage
    builder = {"gpt2": _gpt2, "llama": _llama, "qwen2": _llama, "mistral": _llama, "gemma": _llama,
               "phi3": _llama, "qwen3": _llama, "olmo2": _llama, "mixtral": _llama, "gemma2": _llama, "gemma3_text": _llama, "gptj": _gptj, "gpt_neox": _neox, "bert": _bert}[arch.family]
    with torch.no_grad():
        per_layer, glob = builder(sd, arch)
        stacked = {k: _stack(v) for k, v in per_layer.items()}
        if arch.embed_scale != 1.0:  # Gemma: x₀ = W_E[t] · √d_model, with the module's own (rounded) factor
            glob["W_E"] = glob["W_E"] * _embed_scale(hf_model, arch).to(glob["W_E"].dtype)
    return Weights(**stacked, **glob)


def _embed_scale(hf_model: torch.nn.Module, arch: ArchInfo) -> Tensor:
    """The factor the embedding module multiplies by: its ``embed_scale`` buffer where it keeps one (Gemma
    stores √d_model as a float32 tensor, so a float64 model scales by the float32-rounded value), else
    ``arch.embed_scale``."""
    for m in hf_model.modules():
        scale = getattr(m, "embed_scale", None)
        if isinstance(scale, Tensor):
            return scale.detach()
    return torch.tensor(arch.embed_scale)


def _stack(views: list[Tensor]) -> Tensor:
    """A new contiguous [n_layers, ...] tensor holding a copy of each per-layer view.

    Each layer is copied once, straight into place (no clone-then-stack): the (often
    transposed) views are rearranged by the copy itself. This is most of a cached load's
    weight-reading time on a 30-layer model, so it matters.
    """
    first = views[0]
    out = torch.empty((len(views), *first.shape), dtype=first.dtype, device=first.device)
    if out.device.type == "cpu":
        # numpy's copy is single-threaded: torch's intra-op-parallel copy of many small strided
        # views costs a thread synchronisation per layer, which on a busy 2-core machine made
        # this step ~10x slower (measured: 4.5 s -> 0.6 s for smollm2's 30 layers).
        dst = _as_numpy(out)
        for i, v in enumerate(views):
            np.copyto(dst[i], _as_numpy(v))
    else:
        for i, v in enumerate(views):
            out[i].copy_(v)
    return out


def _as_numpy(t: Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor (bfloat16, which numpy lacks, as its int16 bit pattern)."""
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


#: The layers a reader collects: all of them, unless :func:`only_layers` narrows it (a streamed model reads
#: one layer at a time, through the same readers).
_ONLY_LAYERS: ContextVar[Optional[tuple[int, ...]]] = ContextVar("interp_only_layers", default=None)


@contextmanager
def only_layers(*layers: int) -> Iterator[None]:
    """Within this context the readers above stack only ``layers`` (the others are never read)."""
    token = _ONLY_LAYERS.set(tuple(layers))
    try:
        yield
    finally:
        _ONLY_LAYERS.reset(token)


def _collect(n_layers: int, fn) -> dict[str, list[Tensor]]:
    out: dict[str, list[Tensor]] = {}
    only = _ONLY_LAYERS.get()
    for layer in (range(n_layers) if only is None else only):
        for k, v in fn(layer).items():
            out.setdefault(k, []).append(v)
    return out


def _gpt2(sd: dict[str, Tensor], a: ArchInfo):
    p = "transformer." if "transformer.wte.weight" in sd else ""
    H, dh = a.n_heads, a.d_head

    def layer(l: int) -> dict[str, Tensor]:
        b = f"{p}h.{l}."
        W_qkv = sd[b + "attn.c_attn.weight"]  # Conv1D: y = x W, W [d_model, 3*d_model]
        b_qkv = sd[b + "attn.c_attn.bias"]
        Wq, Wk, Wv = W_qkv.split(a.d_model, dim=1)
        bq, bk, bv = b_qkv.split(a.d_model)
        heads_in = lambda w: einops.rearrange(w, "m (n h) -> n m h", n=H)
        return {
            "W_Q": heads_in(Wq), "W_K": heads_in(Wk), "W_V": heads_in(Wv),
            "b_Q": bq.reshape(H, dh), "b_K": bk.reshape(H, dh), "b_V": bv.reshape(H, dh),
            "W_O": einops.rearrange(sd[b + "attn.c_proj.weight"], "(n h) m -> n h m", n=H),
            "b_O": sd[b + "attn.c_proj.bias"],
            "W_in": sd[b + "mlp.c_fc.weight"], "b_in": sd[b + "mlp.c_fc.bias"],
            "W_out": sd[b + "mlp.c_proj.weight"], "b_out": sd[b + "mlp.c_proj.bias"],
            "ln1_w": sd[b + "ln_1.weight"], "ln1_b": sd[b + "ln_1.bias"],
            "ln2_w": sd[b + "ln_2.weight"], "ln2_b": sd[b + "ln_2.bias"],
        }

    per = _collect(a.n_layers, layer)
    W_E = _t(sd[p + "wte.weight"])
    W_U = _t(sd["lm_head.weight"]).T.contiguous() if "lm_head.weight" in sd else W_E.T.contiguous()
    glob = dict(
        W_E=W_E, W_pos=_t(sd[p + "wpe.weight"]), W_type=None, W_gate=None,
        lnf_w=_t(sd[p + "ln_f.weight"]), lnf_b=_t(sd[p + "ln_f.bias"]),
        W_U=W_U, b_U=torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob


def _llama(sd: dict[str, Tensor], a: ArchInfo):
    H, Hkv, dh = a.n_heads, a.n_kv_heads, a.d_head

    def bias(key: str, n: int, ref: Tensor) -> Tensor:
        return sd[key].reshape(n, dh) if key in sd else torch.zeros(n, dh, dtype=ref.dtype, device=ref.device)

    # Gemma's RMSNorm multiplies by (1 + w): the gain the block applies is 1 + w, kept here as the gain
    gain = (lambda w: w + 1.0) if a.family.startswith("gemma") else (lambda w: w)

    def layer(l: int) -> dict[str, Tensor]:
        b = f"model.layers.{l}."
        if b + "self_attn.qkv_proj.weight" in sd:  # Phi-3: q | k | v rows in one matrix
            wq, wk, wv = sd[b + "self_attn.qkv_proj.weight"].split([H * dh, Hkv * dh, Hkv * dh], dim=0)
        else:
            wq, wk, wv = (sd[b + f"self_attn.{n}_proj.weight"] for n in "qkv")
        moe: dict[str, Tensor] = {}
        if a.n_experts:  # Mixtral: a router [E, d] and experts' gate | up [E, 2 d_mlp, d] and down [E, d, d_mlp]
            gu, down = sd[b + "mlp.experts.gate_up_proj"], sd[b + "mlp.experts.down_proj"]
            moe = {"W_router": sd[b + "mlp.gate.weight"].T, "W_gate_e": gu[:, : a.d_mlp].transpose(1, 2),
                   "W_in_e": gu[:, a.d_mlp:].transpose(1, 2), "W_out_e": down.transpose(1, 2)}
            w_gate = w_up = wq.new_zeros(0, a.d_model)  # the dense MLP is empty
        elif b + "mlp.gate_up_proj.weight" in sd:  # Phi-3: gate | up rows in one matrix
            w_gate, w_up = sd[b + "mlp.gate_up_proj.weight"].chunk(2, dim=0)
        else:
            w_gate, w_up = sd[b + "mlp.gate_proj.weight"], sd[b + "mlp.up_proj.weight"]
        o = sd[b + "self_attn.o_proj.weight"]
        zeros_d = torch.zeros(a.d_model, dtype=wq.dtype, device=wq.device)
        # no pre-norm (OLMo 2): the sublayers read the raw stream; ln1/ln2 kept as identity gains, never applied
        pre1 = gain(sd[b + "input_layernorm.weight"]) if a.pre_norms else torch.ones_like(zeros_d)
        pre2 = (gain(sd[b + "pre_feedforward_layernorm.weight"]) if a.pre_norms else torch.ones_like(zeros_d)) \
            if a.sandwich_norms else gain(sd[b + "post_attention_layernorm.weight"])
        qk_shape = (lambda g, n: g) if a.qk_norm_scope == "head" else (lambda g, n: g.reshape(n, dh))
        return {
            "W_Q": _split_heads_in(wq, H),
            "W_K": _split_heads_in(wk, Hkv),
            "W_V": _split_heads_in(wv, Hkv),
            "b_Q": bias(b + "self_attn.q_proj.bias", H, wq),
            "b_K": bias(b + "self_attn.k_proj.bias", Hkv, wq),
            "b_V": bias(b + "self_attn.v_proj.bias", Hkv, wq),
            "W_O": _split_heads_out(o, H),
            "b_O": sd.get(b + "self_attn.o_proj.bias", zeros_d),
            "W_in": w_up.T, "W_gate": w_gate.T,
            "b_in": sd.get(b + "mlp.up_proj.bias", wq.new_zeros(w_up.shape[0])),
            "b_gate": sd.get(b + "mlp.gate_proj.bias", wq.new_zeros(w_up.shape[0])),
            "W_out": sd[b + "mlp.down_proj.weight"].T if not a.n_experts else wq.new_zeros(0, a.d_model),
            "b_out": sd.get(b + "mlp.down_proj.bias", zeros_d), **moe,
            "ln1_w": pre1, "ln1_b": zeros_d, "ln2_w": pre2, "ln2_b": zeros_d,
            **({"ln1_post_w": gain(sd[b + "post_attention_layernorm.weight"]),
                "ln2_post_w": gain(sd[b + "post_feedforward_layernorm.weight"])} if a.sandwich_norms else {}),
            **({"q_norm_w": qk_shape(gain(sd[b + "self_attn.q_norm.weight"]), H),
                "k_norm_w": qk_shape(gain(sd[b + "self_attn.k_norm.weight"]), Hkv)} if a.qk_norm else {}),
        }

    per = _collect(a.n_layers, layer)
    W_E = _t(sd["model.embed_tokens.weight"])
    W_U = _t(sd["lm_head.weight"]).T.contiguous() if "lm_head.weight" in sd else W_E.T.contiguous()
    glob = dict(
        W_E=W_E, W_pos=None, W_type=None, lnf_w=gain(_t(sd["model.norm.weight"])),
        lnf_b=torch.zeros(a.d_model, dtype=W_E.dtype, device=W_E.device),
        W_U=W_U, b_U=torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob


def _gptj(sd: dict[str, Tensor], a: ArchInfo):
    """GPT-J: one LayerNorm ``ln_1`` feeds both sublayers of its parallel block (kept as ln1 and ln2)."""
    H = a.n_heads

    def layer(l: int) -> dict[str, Tensor]:
        b = f"transformer.h.{l}."
        wq = sd[b + "attn.q_proj.weight"]
        zeros_h = torch.zeros(H, a.d_head, dtype=wq.dtype, device=wq.device)
        return {
            "W_Q": _split_heads_in(wq, H), "W_K": _split_heads_in(sd[b + "attn.k_proj.weight"], H),
            "W_V": _split_heads_in(sd[b + "attn.v_proj.weight"], H),
            "b_Q": zeros_h, "b_K": zeros_h, "b_V": zeros_h,
            "W_O": _split_heads_out(sd[b + "attn.out_proj.weight"], H),
            "b_O": torch.zeros(a.d_model, dtype=wq.dtype, device=wq.device),
            "W_in": sd[b + "mlp.fc_in.weight"].T, "b_in": sd[b + "mlp.fc_in.bias"],
            "W_out": sd[b + "mlp.fc_out.weight"].T, "b_out": sd[b + "mlp.fc_out.bias"],
            "ln1_w": sd[b + "ln_1.weight"], "ln1_b": sd[b + "ln_1.bias"],
            "ln2_w": sd[b + "ln_1.weight"], "ln2_b": sd[b + "ln_1.bias"],
        }

    per = _collect(a.n_layers, layer)
    W_E = _t(sd["transformer.wte.weight"])
    glob = dict(
        W_E=W_E, W_pos=None, W_type=None, W_gate=None,
        lnf_w=_t(sd["transformer.ln_f.weight"]), lnf_b=_t(sd["transformer.ln_f.bias"]),
        W_U=_t(sd["lm_head.weight"]).T.contiguous(),
        b_U=_t(sd["lm_head.bias"]) if "lm_head.bias" in sd else torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob


def _neox(sd: dict[str, Tensor], a: ArchInfo):
    H, dh = a.n_heads, a.d_head
    p = "gpt_neox."

    def layer(l: int) -> dict[str, Tensor]:
        b = f"{p}layers.{l}."
        # query_key_value rows are laid out per head: [n_heads, (q|k|v), d_head]
        w = einops.rearrange(sd[b + "attention.query_key_value.weight"], "(n t h) m -> t n m h", n=H, t=3)
        bb = einops.rearrange(sd[b + "attention.query_key_value.bias"], "(n t h) -> t n h", n=H, t=3)
        return {
            "W_Q": w[0], "W_K": w[1], "W_V": w[2], "b_Q": bb[0], "b_K": bb[1], "b_V": bb[2],
            "W_O": _split_heads_out(sd[b + "attention.dense.weight"], H),
            "b_O": sd[b + "attention.dense.bias"],
            "W_in": sd[b + "mlp.dense_h_to_4h.weight"].T, "b_in": sd[b + "mlp.dense_h_to_4h.bias"],
            "W_out": sd[b + "mlp.dense_4h_to_h.weight"].T, "b_out": sd[b + "mlp.dense_4h_to_h.bias"],
            "ln1_w": sd[b + "input_layernorm.weight"], "ln1_b": sd[b + "input_layernorm.bias"],
            "ln2_w": sd[b + "post_attention_layernorm.weight"], "ln2_b": sd[b + "post_attention_layernorm.bias"],
        }

    per = _collect(a.n_layers, layer)
    W_E = _t(sd[p + "embed_in.weight"])
    glob = dict(
        W_E=W_E, W_pos=None, W_type=None, W_gate=None,
        lnf_w=_t(sd[p + "final_layer_norm.weight"]), lnf_b=_t(sd[p + "final_layer_norm.bias"]),
        W_U=_t(sd["lm_head.weight"] if "lm_head.weight" in sd else sd["embed_out.weight"]).T.contiguous(),
        b_U=torch.zeros(a.d_vocab, dtype=W_E.dtype, device=W_E.device),
    )
    return per, glob


def _bert(sd: dict[str, Tensor], a: ArchInfo):
    H = a.n_heads
    p = "bert." if "bert.embeddings.word_embeddings.weight" in sd else ""

    def layer(l: int) -> dict[str, Tensor]:
        b = f"{p}encoder.layer.{l}."
        s = b + "attention.self."
        return {
            "W_Q": _split_heads_in(sd[s + "query.weight"], H),
            "W_K": _split_heads_in(sd[s + "key.weight"], H),
            "W_V": _split_heads_in(sd[s + "value.weight"], H),
            "b_Q": sd[s + "query.bias"].reshape(H, -1), "b_K": sd[s + "key.bias"].reshape(H, -1),
            "b_V": sd[s + "value.bias"].reshape(H, -1),
            "W_O": _split_heads_out(sd[b + "attention.output.dense.weight"], H),
            "b_O": sd[b + "attention.output.dense.bias"],
            "W_in": sd[b + "intermediate.dense.weight"].T, "b_in": sd[b + "intermediate.dense.bias"],
            "W_out": sd[b + "output.dense.weight"].T, "b_out": sd[b + "output.dense.bias"],
            "ln1_w": sd[b + "attention.output.LayerNorm.weight"],
            "ln1_b": sd[b + "attention.output.LayerNorm.bias"],
            "ln2_w": sd[b + "output.LayerNorm.weight"], "ln2_b": sd[b + "output.LayerNorm.bias"],
        }

    per = _collect(a.n_layers, layer)
    e = p + "embeddings."
    glob = dict(
        W_E=_t(sd[e + "word_embeddings.weight"]), W_pos=_t(sd[e + "position_embeddings.weight"]),
        W_type=_t(sd[e + "token_type_embeddings.weight"]), W_gate=None,
        lnf_w=None, lnf_b=None, W_U=None, b_U=None,
        ln_emb_w=_t(sd[e + "LayerNorm.weight"]), ln_emb_b=_t(sd[e + "LayerNorm.bias"]),
    )
    return per, glob


# --- TL layout -> HF parameters (the inverse of the readers above) ------------------------------

def _gpt2_to_hf(w: Weights, n_layers: int) -> dict[str, Tensor]:
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


def _llama_to_hf(w: Weights, n_layers: int) -> dict[str, Tensor]:
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


def _neox_to_hf(w: Weights, n_layers: int) -> dict[str, Tensor]:
    sd: dict[str, Tensor] = {"gpt_neox.embed_in.weight": w.W_E}
    for l in range(n_layers):
        p = f"gpt_neox.layers.{l}."
        sd[p + "attention.query_key_value.weight"] = einops.rearrange(
            torch.stack([w.W_Q[l], w.W_K[l], w.W_V[l]]), "t n m h -> (n t h) m")
        sd[p + "attention.query_key_value.bias"] = einops.rearrange(
            torch.stack([w.b_Q[l], w.b_K[l], w.b_V[l]]), "t n h -> (n t h)")
        sd[p + "attention.dense.weight"] = einops.rearrange(w.W_O[l], "n h m -> m (n h)")
        sd[p + "attention.dense.bias"] = w.b_O[l]
        sd[p + "mlp.dense_h_to_4h.weight"], sd[p + "mlp.dense_h_to_4h.bias"] = w.W_in[l].T, w.b_in[l]
        sd[p + "mlp.dense_4h_to_h.weight"], sd[p + "mlp.dense_4h_to_h.bias"] = w.W_out[l].T, w.b_out[l]
        sd[p + "input_layernorm.weight"], sd[p + "input_layernorm.bias"] = w.ln1_w[l], w.ln1_b[l]
        sd[p + "post_attention_layernorm.weight"], sd[p + "post_attention_layernorm.bias"] = w.ln2_w[l], w.ln2_b[l]
    sd["gpt_neox.final_layer_norm.weight"], sd["gpt_neox.final_layer_norm.bias"] = w.need("lnf_w"), w.need("lnf_b")
    sd["lm_head.weight"] = w.need("W_U").T  # "embed_out" in older transformers (the caller renames it)
    return sd


# Qwen 2 and Mistral keep Llama's parameter names and raw gains; Gemma (folded gains and embedding
# scale), Phi-3 (fused matrices) and GPT-J have no writer yet: rotating them is refused by type.
_TO_HF = {"gpt2": _gpt2_to_hf, "llama": _llama_to_hf, "qwen2": _llama_to_hf, "mistral": _llama_to_hf,
          "gpt_neox": _neox_to_hf}


def hf_writable(arch: ArchInfo) -> bool:
    """True iff :func:`hf_state_from_weights` can write this architecture's weights back to HF."""
    return arch.family in _TO_HF


def hf_state_from_weights(w: Weights, arch: ArchInfo) -> tuple[dict[str, Tensor], str]:
    """HF parameter name -> tensor for TL-layout weights ``w`` (the inverse of :func:`weights_from_hf`),
    and the name of the unembedding module ("lm_head").

    Every bias is written, zero or not (the caller drops zero ones its HF class has no parameter for).
    """
    if not hf_writable(arch):
        raise UnsupportedOperationError(
            f"model {arch.name!r} (family {arch.family!r}) has no TL -> Hugging Face weight map; "
            f"supported: {sorted(_TO_HF)}")
    return _TO_HF[arch.family](w, arch.n_layers), "lm_head"
