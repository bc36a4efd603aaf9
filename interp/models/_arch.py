"""ArchInfo: the shape and block structure of a model, read off its Hugging Face config.

The block layouts (docs/math.md §1):

* pre-norm (GPT-2 LayerNorm; Llama, Qwen, Mistral, Phi-3, Gemma RMSNorm + GQA + RoPE):
      x_mid = x + Attn(N1(x));  x_out = x_mid + MLP(N2(x_mid))
* sandwich (Gemma 2/3): x_mid = x + N1'(Attn(N1(x)));  x_out = x_mid + N2'(MLP(N2(x_mid)))
* output norms only (OLMo 2, ``pre_norms=False``): x_mid = x + N1'(Attn(x));  x_out = x_mid + N2'(MLP(x_mid))
* mixture of experts (Mixtral, OLMoE, ``n_experts``): the MLP is Σ_{e ∈ top-k(x)} r_e(x) · MLP_e(N2(x_mid)), r
  the router's softmax, renormalised over the top k (Mixtral) or not (OLMoE)
* parallel (GPT-NeoX; GPT-J with one norm for both): x_out = x + Attn(N1(x)) + MLP(N2(x))
* post-norm encoder (BERT): x_mid = N1(x + Attn(x));  x_out = N2(x_mid + MLP(x_mid))

and the capabilities every forward implements (score scales, sliding windows, rotary layout, QK-norm,
soft-caps, embedding scale). Each family's config reader, which fills these in, is its own file under
``interp/models/_families/`` (the builder table): the one place that knows families.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

__all__ = ["ArchInfo", "with_module_scales"]


@dataclass(frozen=True)
class ArchInfo:
    """What a model is, in the terms the decompositions need.

    ``family`` is the block family (a ``model_type`` of the builder table, ``interp.models.SUPPORTED_FAMILIES``,
    or "native" for
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
      renormalised to sum to 1 (``router_renormalise``, Mixtral) or left as they are (OLMoE), MLP(h) =
      Σ_{e ∈ top k} r_e MLP_e(h); the expert weights are ``Weights.W_in_e`` etc. and the dense ``W_in`` /
      ``W_out`` are empty;
    * ``qk_norm`` with ``qk_norm_scope`` — "head": q_h ↦ γ ⊙ q_h / rms(q_h) per head over d_head (one γ
      [d_head] shared by the heads); "projection": q ↦ γ ⊙ q / rms(q) over the whole projected q
      [n_heads·d_head] (k over n_kv_heads·d_head), one σ per position shared by every head, and γ
      [n_heads, d_head] per head (OLMo 2).

    The block program (the order of writes and reads) is :func:`interp.models.internal.build_program`.
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
    router_renormalise: bool = True  # the top k router weights rescaled to sum to 1 (Mixtral); False: kept (OLMoE)
    attn_softcap: float = 0.0  # scores ↦ c·tanh(scores/c) before the mask (Gemma 2); 0 = none
    final_softcap: float = 0.0  # logits ↦ c·tanh(logits/c) (Gemma 2); 0 = none

    @property
    def has_logits(self) -> bool:
        """A linear unembedding after the last block (pre-norm decoders): logits decompose exactly."""
        return self.has_unembed and self.norm_placement == "pre"

    def attn_scale(self, layer: int) -> float:
        """The factor on layer ``layer``'s attention scores q·k (d_head^-1/2 unless the model says otherwise:
        Gemma's ``query_pre_attn_scalar``^-1/2, GPT-2's per-layer flags, the toys' own)."""
        return self.attn_scales[layer] if self.attn_scales else self.d_head**-0.5

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
