"""ArchInfo: the shape and block structure of a model, read off its Hugging Face config.

interp supports four block families (docs/math.md §1):

* pre-norm LayerNorm (GPT-2):            x_mid = x + Attn(N1(x));  x_out = x_mid + MLP(N2(x_mid))
* pre-norm RMSNorm + GQA + RoPE (Llama): same, N = RMSNorm, KV heads shared by groups of query heads
* parallel attention + MLP (GPT-NeoX):   x_out = x + Attn(N1(x)) + MLP(N2(x))
* post-norm LayerNorm encoder (BERT):    x_mid = N1(x + Attn(x));  x_out = N2(x_mid + MLP(x_mid))
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from interp.errors import UnsupportedArchitectureError

__all__ = ["ArchInfo", "SUPPORTED_FAMILIES", "arch_from_hf_config"]

#: HF ``model_type`` -> interp family name.
SUPPORTED_FAMILIES: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "gpt_neox": "gpt_neox",
    "bert": "bert",
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
    * ``norm`` (kind) and ``norm_placement``; :attr:`group_size` and :meth:`kv_head` (GQA).

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

    @property
    def has_logits(self) -> bool:
        """A linear unembedding after the last block (pre-norm decoders): logits decompose exactly."""
        return self.has_unembed and self.norm_placement == "pre"

    @property
    def group_size(self) -> int:
        """Query heads per KV head (1 without GQA)."""
        return self.n_heads // self.n_kv_heads

    def kv_head(self, head: int) -> int:
        """The KV head that query head ``head`` reads: h // (n_heads / n_kv_heads)."""
        return head // self.group_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arch_from_hf_config(config: Any, *, name: str, has_unembed: bool = True) -> ArchInfo:
    """Build an :class:`ArchInfo` from a ``transformers`` config, or refuse the architecture."""
    model_type = getattr(config, "model_type", None)
    family = SUPPORTED_FAMILIES.get(str(model_type))
    if family is None:
        raise UnsupportedArchitectureError(
            f"model {name!r} has architecture model_type={model_type!r}; interp supports "
            f"{sorted(SUPPORTED_FAMILIES)} (pre-norm LayerNorm, pre-norm RMSNorm+GQA+RoPE, "
            "parallel attn/MLP, post-norm encoder)"
        )
    if family == "gpt2":
        d_model, n_heads = config.n_embd, config.n_head
        return ArchInfo(
            name=name, family=family, n_layers=config.n_layer, n_heads=n_heads,
            n_kv_heads=n_heads, d_model=d_model, d_head=d_model // n_heads,
            d_mlp=config.n_inner or 4 * d_model, d_vocab=config.vocab_size,
            n_ctx=config.n_positions, norm="layernorm", norm_placement="pre",
            parallel_attn_mlp=False, positional="learned", causal=True,
            norm_eps=config.layer_norm_epsilon, gated_mlp=False,
            act_fn=config.activation_function, has_unembed=has_unembed,
        )
    if family == "llama":
        n_heads = config.num_attention_heads
        d_head = getattr(config, "head_dim", None) or config.hidden_size // n_heads
        return ArchInfo(
            name=name, family=family, n_layers=config.num_hidden_layers, n_heads=n_heads,
            n_kv_heads=config.num_key_value_heads or n_heads, d_model=config.hidden_size,
            d_head=d_head, d_mlp=config.intermediate_size, d_vocab=config.vocab_size,
            n_ctx=config.max_position_embeddings, norm="rmsnorm", norm_placement="pre",
            parallel_attn_mlp=False, positional="rotary", causal=True,
            norm_eps=config.rms_norm_eps, gated_mlp=True, act_fn=config.hidden_act,
            has_unembed=has_unembed, rotary_dim=d_head,
            attn_bias=bool(getattr(config, "attention_bias", False)),
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
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
