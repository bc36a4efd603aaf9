"""BERT (``model_type`` "bert", MiniLM included): the post-norm encoder, learned absolute positions and token
types, bidirectional attention.

    x_mid = LN1(x + Attn(x));  x_out = LN2(x_mid + MLP(x_mid))

Its MLM head (dense -> GELU -> LayerNorm -> decoder) is not a linear unembedding, so no exact logit
decomposition exists through it: interp analyses BERT's hidden states and reports has_unembed=False (and
Weights.W_U=None) whether or not a head is present.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from interp.models._arch import ArchInfo
from interp.models._families._spec import Capabilities, ConfigAttributes
from interp.models._weights import collect_layers, detached, split_heads_in, split_heads_out

__all__ = ["ATTRIBUTES", "CAPS", "read_config", "read_weights"]

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
        }
    ),
    # dropouts (eval mode); the token-type table's size is the weights' own
    ignores=frozenset({"attention_probs_dropout_prob", "hidden_dropout_prob", "classifier_dropout", "type_vocab_size"}),
    # a decoder BERT is causal and may cross-attend; relative position embeddings are another maths
    requires={"is_decoder": (False,), "add_cross_attention": (False,), "position_embedding_type": ("absolute",)},
)


def read_config(config: Any, *, name: str, has_unembed: bool, caps: Capabilities, family: str) -> ArchInfo:
    n_heads = config.num_attention_heads
    return ArchInfo(
        name=name,
        family=family,
        n_layers=config.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_model=config.hidden_size,
        d_head=config.hidden_size // n_heads,
        d_mlp=config.intermediate_size,
        d_vocab=config.vocab_size,
        n_ctx=config.max_position_embeddings,
        norm="layernorm",
        norm_placement="post",
        parallel_attn_mlp=False,
        positional="learned",
        causal=False,
        norm_eps=config.layer_norm_eps,
        gated_mlp=False,
        act_fn=config.hidden_act,
        has_unembed=False,
    )


def read_weights(sd: dict[str, Tensor], a: ArchInfo, caps: Capabilities):
    H = a.n_heads
    p = "bert." if "bert.embeddings.word_embeddings.weight" in sd else ""

    def layer(l: int) -> dict[str, Tensor]:
        b = f"{p}encoder.layer.{l}."
        s = b + "attention.self."
        return {
            "W_Q": split_heads_in(sd[s + "query.weight"], H),
            "W_K": split_heads_in(sd[s + "key.weight"], H),
            "W_V": split_heads_in(sd[s + "value.weight"], H),
            "b_Q": sd[s + "query.bias"].reshape(H, -1),
            "b_K": sd[s + "key.bias"].reshape(H, -1),
            "b_V": sd[s + "value.bias"].reshape(H, -1),
            "W_O": split_heads_out(sd[b + "attention.output.dense.weight"], H),
            "b_O": sd[b + "attention.output.dense.bias"],
            "W_in": sd[b + "intermediate.dense.weight"].T,
            "b_in": sd[b + "intermediate.dense.bias"],
            "W_out": sd[b + "output.dense.weight"].T,
            "b_out": sd[b + "output.dense.bias"],
            "ln1_w": sd[b + "attention.output.LayerNorm.weight"],
            "ln1_b": sd[b + "attention.output.LayerNorm.bias"],
            "ln2_w": sd[b + "output.LayerNorm.weight"],
            "ln2_b": sd[b + "output.LayerNorm.bias"],
        }

    per = collect_layers(a.n_layers, layer)
    e = p + "embeddings."
    glob = dict(
        W_E=detached(sd[e + "word_embeddings.weight"]),
        W_pos=detached(sd[e + "position_embeddings.weight"]),
        W_type=detached(sd[e + "token_type_embeddings.weight"]),
        W_gate=None,
        lnf_w=None,
        lnf_b=None,
        W_U=None,
        b_U=None,
        ln_emb_w=detached(sd[e + "LayerNorm.weight"]),
        ln_emb_b=detached(sd[e + "LayerNorm.bias"]),
    )
    return per, glob
