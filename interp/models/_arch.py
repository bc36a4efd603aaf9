"""ArchInfo: the shape and block structure of a model, read off its Hugging Face config.

The block layouts (docs/math.md §1):

* pre-norm (GPT-2 LayerNorm; Llama, Qwen, Mistral, Phi-3, Gemma RMSNorm + GQA + RoPE):
      x_mid = x + Attn(N1(x));  x_out = x_mid + MLP(N2(x_mid))
* sandwich (Gemma 2/3): x_mid = x + N1'(Attn(N1(x)));  x_out = x_mid + N2'(MLP(N2(x_mid)))
* output norms only (OLMo 2, ``pre_norms=False``): x_mid = x + N1'(Attn(x));  x_out = x_mid + N2'(MLP(x_mid))
* mixture of experts (Mixtral, ``n_experts``): the MLP is Σ_{e ∈ top-k(x)} r_e(x) · MLP_e(N2(x_mid)), r the
  router's softmax renormalised over the top k
* parallel (GPT-NeoX; GPT-J with one norm for both): x_out = x + Attn(N1(x)) + MLP(N2(x))
* post-norm encoder (BERT): x_mid = N1(x + Attn(x));  x_out = N2(x_mid + MLP(x_mid))

and, per family, the capabilities every forward implements (score scales, sliding windows, rotary layout,
QK-norm, soft-caps, embedding scale): the one place that knows families.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from interp.errors import UnsupportedArchitectureError

__all__ = ["ArchInfo", "NOT_YET_SUPPORTED", "SUPPORTED_FAMILIES", "arch_from_hf_config", "with_module_scales"]

#: HF ``model_type`` -> interp family name. Families that share a block structure share a reader:
#: Qwen 2, Mistral, Gemma and Phi-3 are Llama-shaped (pre-norm RMSNorm, GQA, rotary, gated MLP) with
#: capabilities of their own below; GPT-J is a parallel block with one norm for both sublayers.
SUPPORTED_FAMILIES: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
    "mistral": "mistral",
    "gemma": "gemma",
    "phi3": "phi3",
    "qwen3": "qwen3",
    "olmo2": "olmo2",
    "mixtral": "mixtral",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3_text",
    "gptj": "gptj",
    "gpt_neox": "gpt_neox",
    "bert": "bert",
}

#: Families transformers knows but interp does not model yet, and the capability each lacks: a model of
#: one is refused (never analysed with a forward that would silently differ from its own).
NOT_YET_SUPPORTED: dict[str, str] = {
    "gemma3": "the multimodal wrapper (load its text model, model_type 'gemma3_text')",
    "olmoe": "mixture-of-experts MLP blocks",
}


@dataclass(frozen=True)
class ArchInfo:
    """What a model is, in the terms the decompositions need.

    ``family`` is the block family (one of :data:`SUPPORTED_FAMILIES`' values, or "native" for
    transformer-lens native models such as interp's toys) — a record of where the config came
    from, never a thing to branch on;
    ``norm_eps`` the norms' epsilon; ``has_unembed`` is the loader's flag (False for encoders
    analysed through their hidden state: every BERT, MiniLM included; then ``Weights.W_U`` is None);
    ``compatibility_mode`` is True only if the
    bridge folded norms / centred weights (interp never does: weights are raw HF).

    The capabilities code branches on, one answer per question (never the family name):

    * :attr:`has_logits` — the model ends in a linear unembedding, logits = N_f(x) W_U + b_U, so
      logits decompose exactly (decoders); False: analysed through the final hidden state (encoders);
    * ``causal`` — causal self-attention (decoders: BOS prepended, no [CLS]/[SEP]); False: bidirectional;
    * ``attn_bias`` / ``mlp_bias`` — the attention / MLP output projection has a bias (b_O / b_out),
      read from the config (e.g. Llama's ``attention_bias`` / ``mlp_bias``);
    * ``parallel_attn_mlp`` — x_out = x + Attn(N1(x)) + MLP(N2(x)); ``attn_only`` — no MLP sublayer;
    * ``norm`` (kind) and ``norm_placement``; :attr:`group_size` and :meth:`kv_head` (GQA);
    * ``pre_norms`` — a pre-norm block's sublayers read N1(x) / N2(x_mid); False (OLMo 2): they read the
      raw stream x / x_mid, and the only norms are the sublayer output norms and the final one;
    * ``n_experts`` / ``experts_per_token`` — a mixture-of-experts MLP: r = softmax(h W_router), the top k
      renormalised to sum to 1, MLP(h) = Σ_{e ∈ top k} r_e MLP_e(h) (Mixtral); the expert weights are
      ``Weights.W_in_e`` etc. and the dense ``W_in`` / ``W_out`` are empty;
    * ``qk_norm`` with ``qk_norm_scope`` — "head": q_h ↦ γ ⊙ q_h / rms(q_h) per head over d_head (one γ
      [d_head] shared by the heads); "projection": q ↦ γ ⊙ q / rms(q) over the whole projected q
      [n_heads·d_head] (k over n_kv_heads·d_head), one σ per position shared by every head, and γ
      [n_heads, d_head] per head (OLMo 2).

    The block program (the order of writes and reads) is :func:`interp.models.build_program`.
    """

    name: str
    family: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    d_mlp: int
    d_vocab: int
    n_ctx: int
    norm: Literal["layernorm", "rmsnorm", "none"]
    norm_placement: Literal["pre", "post"]
    parallel_attn_mlp: bool
    positional: Literal["learned", "rotary", "none"]
    causal: bool
    norm_eps: float
    gated_mlp: bool
    act_fn: str
    has_unembed: bool
    rotary_dim: int = 0
    compatibility_mode: bool = False
    attn_only: bool = False  # no MLP sublayers (the toy models)
    attn_bias: bool = True  # attention output projection has a bias b_O
    mlp_bias: bool = True  # MLP output projection has a bias b_out
    attn_scales: tuple[float, ...] = ()  # the score scale of each layer; () = d_head^-1/2 everywhere
    sliding_windows: tuple[int, ...] = ()  # per layer: a query sees the last w keys only; 0 / () = global
    rotary_interleaved: bool = False  # RoPE rotates adjacent pairs (x0, x1) (GPT-J, the toys), not halves
    shared_block_norm: bool = False  # a parallel block's attention and MLP read one norm (GPT-J): ln2 = ln1
    softmax_fp32: bool = False  # the model's own attention softmax runs in float32 whatever the dtype
    embed_scale: float = 1.0  # the embedding is multiplied by this (Gemma: √d_model); folded into W_E
    qk_norm: bool = False  # RMSNorm of the queries and keys before RoPE (Gemma 3, Qwen 3, OLMo 2)
    qk_norm_scope: Literal["head", "projection"] = "head"  # over each head's d_head, or the whole projection
    sandwich_norms: bool = False  # a norm on each sublayer's output before it is added (Gemma 2/3, OLMo 2)
    pre_norms: bool = True  # each sublayer reads the stream through its own norm N1/N2; False: the raw stream
    n_experts: int = 0  # a mixture-of-experts MLP with this many experts per layer (Mixtral); 0 = one dense MLP
    experts_per_token: int = 0  # the router's top k: each token's MLP is its k experts weighted by the router
    attn_softcap: float = 0.0  # scores ↦ c·tanh(scores/c) before the mask (Gemma 2); 0 = none
    final_softcap: float = 0.0  # logits ↦ c·tanh(logits/c) (Gemma 2); 0 = none

    @property
    def has_logits(self) -> bool:
        """A linear unembedding after the last block (pre-norm decoders): logits decompose exactly."""
        return self.has_unembed and self.norm_placement == "pre"

    def attn_scale(self, layer: int) -> float:
        """The factor on layer ``layer``'s attention scores q·k (d_head^-1/2 unless the model says otherwise:
        Gemma's ``query_pre_attn_scalar``^-1/2, GPT-2's per-layer flags, the toys' own)."""
        return self.attn_scales[layer] if self.attn_scales else self.d_head ** -0.5

    def window(self, layer: int) -> int:
        """Layer ``layer``'s sliding window w (query t sees keys t−w+1…t), 0 when it attends globally."""
        return self.sliding_windows[layer] if self.sliding_windows else 0

    @property
    def group_size(self) -> int:
        """Query heads per KV head (1 without GQA)."""
        return self.n_heads // self.n_kv_heads

    def kv_head(self, head: int) -> int:
        """The KV head that query head ``head`` reads: h // (n_heads / n_kv_heads)."""
        return head // self.group_size

    @property
    def norm_layout(self) -> str:
        """Where a block's norms sit, in words: "pre-norm" (N1/N2 before each sublayer), "sandwich-norm" (also a
        norm on each sublayer's output: Gemma 2/3), "output-norm" (only on the outputs: OLMo 2), "post-norm" (Add &
        Norm: BERT), each "parallel ..." for a parallel block; "no norms" without any."""
        if self.norm == "none":
            return "no norms"
        if self.norm_placement == "post":
            layout = "post-norm"
        elif self.sandwich_norms:
            layout = "sandwich-norm" if self.pre_norms else "output-norm"
        else:
            layout = "pre-norm"
        return f"parallel {layout}" if self.parallel_attn_mlp else layout

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arch_from_hf_config(config: Any, *, name: str, has_unembed: bool = True) -> ArchInfo:
    """Build an :class:`ArchInfo` from a ``transformers`` config, or refuse the architecture."""
    model_type = getattr(config, "model_type", None)
    family = SUPPORTED_FAMILIES.get(str(model_type))
    if family is None:
        missing = NOT_YET_SUPPORTED.get(str(model_type))
        why = f" (interp does not model its {missing} yet)" if missing else ""
        near = difflib.get_close_matches(str(model_type), list(SUPPORTED_FAMILIES), n=1, cutoff=0.5)
        raise UnsupportedArchitectureError(
            f"model {name!r} has architecture model_type={model_type!r}{why}; interp supports "
            f"{sorted(SUPPORTED_FAMILIES)} (pre-norm LayerNorm, pre-norm RMSNorm+GQA+RoPE, "
            "parallel attn/MLP, post-norm encoder)" + (f"; the nearest supported family is {near[0]!r}" if near else "")
        )
    if family in ("llama", "qwen2", "mistral", "gemma", "phi3", "qwen3", "olmo2", "mixtral", "gemma2", "gemma3_text"):
        return _llama_like(config, name=name, family=family, has_unembed=has_unembed)
    if family == "gptj":
        d_model, n_heads = config.n_embd, config.n_head
        d_head = d_model // n_heads
        return ArchInfo(
            name=name, family=family, n_layers=config.n_layer, n_heads=n_heads, n_kv_heads=n_heads,
            d_model=d_model, d_head=d_head, d_mlp=config.n_inner or 4 * d_model, d_vocab=config.vocab_size,
            n_ctx=config.n_positions, norm="layernorm", norm_placement="pre", parallel_attn_mlp=True,
            positional="rotary", causal=True, norm_eps=config.layer_norm_epsilon, gated_mlp=False,
            act_fn=config.activation_function, has_unembed=has_unembed,
            rotary_dim=config.rotary_dim or d_head, rotary_interleaved=True, shared_block_norm=True,
            attn_bias=False, mlp_bias=True, softmax_fp32=True,
        )
    if family == "gpt2":
        d_model, n_heads = config.n_embd, config.n_head
        base = (d_model // n_heads) ** -0.5 if getattr(config, "scale_attn_weights", True) else 1.0
        by_layer = bool(getattr(config, "scale_attn_by_inverse_layer_idx", False))
        return ArchInfo(
            attn_scales=tuple(base / (l + 1) if by_layer else base for l in range(config.n_layer)) if by_layer or base == 1.0 else (),
            name=name, family=family, n_layers=config.n_layer, n_heads=n_heads,
            n_kv_heads=n_heads, d_model=d_model, d_head=d_model // n_heads,
            d_mlp=config.n_inner or 4 * d_model, d_vocab=config.vocab_size,
            n_ctx=config.n_positions, norm="layernorm", norm_placement="pre",
            parallel_attn_mlp=False, positional="learned", causal=True,
            norm_eps=config.layer_norm_epsilon, gated_mlp=False,
            act_fn=config.activation_function, has_unembed=has_unembed,
        )
    if family == "gpt_neox":
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
            name=name, family=family, n_layers=config.num_hidden_layers, n_heads=n_heads,
            n_kv_heads=n_heads, d_model=config.hidden_size, d_head=d_head,
            d_mlp=config.intermediate_size, d_vocab=config.vocab_size,
            n_ctx=config.max_position_embeddings, norm="layernorm", norm_placement="pre",
            parallel_attn_mlp=bool(config.use_parallel_residual), positional="rotary",
            causal=True, norm_eps=config.layer_norm_eps, gated_mlp=False,
            act_fn=config.hidden_act, has_unembed=has_unembed,
            rotary_dim=int(d_head * rotary_pct), attn_bias=True,
        )
    # bert. Its MLM head (dense -> GELU -> LayerNorm -> decoder) is not a linear unembedding,
    # so no exact logit decomposition exists through it: interp analyses BERT's hidden states
    # and reports has_unembed=False (and Weights.W_U=None) whether or not a head is present.
    n_heads = config.num_attention_heads
    return ArchInfo(
        name=name, family=family, n_layers=config.num_hidden_layers, n_heads=n_heads,
        n_kv_heads=n_heads, d_model=config.hidden_size, d_head=config.hidden_size // n_heads,
        d_mlp=config.intermediate_size, d_vocab=config.vocab_size,
        n_ctx=config.max_position_embeddings, norm="layernorm", norm_placement="post",
        parallel_attn_mlp=False, positional="learned", causal=False,
        norm_eps=config.layer_norm_eps, gated_mlp=False, act_fn=config.hidden_act,
        has_unembed=False,
    )


def _llama_like(config: Any, *, name: str, family: str, has_unembed: bool) -> ArchInfo:
    """Pre-norm RMSNorm + GQA + rotary + gated MLP, with each family's capabilities read off its config
    (Gemma 2/3: sandwich norms, Gemma 2: soft-capping, Gemma 3 and Qwen 3: QK-norm, Gemma 3: a rotary
    table per layer type; OLMo 2: output norms without pre-norms, QK-norm over the whole projection):
    Qwen 2's q/k/v biases (in the weights), Mistral's and Qwen 2's sliding windows, Gemma's embedding
    scale √d_model (its (1 + w) norm gains are folded into the weights; every family's score scale is
    read off the loaded modules, :func:`with_module_scales`), Phi-3's partial rotary factor."""
    n_heads = config.num_attention_heads
    n_layers = config.num_hidden_layers
    d_head = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    rope = getattr(config, "rope_parameters", None) or {}
    partial = getattr(config, "partial_rotary_factor", None) or rope.get("partial_rotary_factor", 1.0) or 1.0
    return ArchInfo(
        name=name, family=family, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=getattr(config, "num_key_value_heads", None) or n_heads, d_model=config.hidden_size,
        d_head=d_head, d_mlp=config.intermediate_size, d_vocab=config.vocab_size,
        n_ctx=config.max_position_embeddings, norm="rmsnorm", norm_placement="pre",
        parallel_attn_mlp=False, positional="rotary", causal=True,
        norm_eps=config.rms_norm_eps, gated_mlp=True,
        act_fn=getattr(config, "hidden_activation", None) or config.hidden_act,
        has_unembed=has_unembed, rotary_dim=int(d_head * partial),
        attn_bias=bool(getattr(config, "attention_bias", False)),
        mlp_bias=bool(getattr(config, "mlp_bias", False)),
        sliding_windows=_sliding_windows(config, n_layers),
        softmax_fp32=True,
        embed_scale=float(config.hidden_size) ** 0.5 if family.startswith("gemma") else 1.0,
        qk_norm=family in ("qwen3", "gemma3_text", "olmo2"),
        qk_norm_scope="projection" if family == "olmo2" else "head",
        sandwich_norms=family in ("gemma2", "gemma3_text", "olmo2"),
        pre_norms=family != "olmo2",
        n_experts=int(config.num_local_experts) if family == "mixtral" else 0,
        experts_per_token=int(config.num_experts_per_tok) if family == "mixtral" else 0,
        attn_softcap=float(getattr(config, "attn_logit_softcapping", None) or 0.0),
        final_softcap=float(getattr(config, "final_logit_softcapping", None) or 0.0),
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


def with_module_scales(arch: ArchInfo, hf_model: Any) -> ArchInfo:
    """``arch`` with each layer's attention score scale read off the loaded module itself (its
    ``scaling``, as Llama-shaped, Gemma, NeoX and BERT attention keep it; GPT-J's ``scale_attn`` divisor),
    so the scale is the model's own even where a config flag (Gemma's ``query_pre_attn_scalar``) is
    used by one version of a family and ignored by another. Unchanged when the modules hold none."""
    found: list[float] = []
    for m in hf_model.modules():
        if not type(m).__name__.endswith(("Attention", "SelfAttention")):
            continue
        if isinstance(getattr(m, "scaling", None), (int, float)):
            found.append(float(m.scaling))
        elif getattr(m, "scale_attn", None) is not None and type(m).__name__ == "GPTJAttention":
            found.append(1.0 / float(m.scale_attn))
    if len(found) != arch.n_layers:
        return arch
    return replace(arch, attn_scales=tuple(found))
