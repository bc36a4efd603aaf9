"""Tiny random models of each supported family, built offline from transformers configs.

Seeded and small (2-3 layers, d_model 32): a fresh one takes well under a second.
"""

from __future__ import annotations

import functools
import os
import tempfile

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import interp
from interp.engine import model_from_hf

FAMILIES = ("gpt2", "llama", "neox", "bert")
#: The families added on the same block maths as capabilities (the causal, attribution, lens, engine and
#: edge tests run on each): Qwen 2 (q/k/v biases), Mistral (a sliding window of 3), Gemma ((1 + w) gains,
#: √d embedding scale, MQA), Phi-3 (fused matrices, partial rotary), GPT-J (parallel block with one norm,
#: adjacent-pair partial rotary, lm_head bias), Qwen 3 (QK-norm), Gemma 2 (sandwich norms, soft-capped
#: scores and logits, alternating windows), Gemma 3 (sandwich norms, QK-norm, a rotary table per layer type),
#: OLMo 2 (output norms without pre-norms, QK-norm over the whole projection, GQA), Mixtral (mixture-of-experts
#: MLPs: 4 experts, the router's top 2), OLMoE (Mixtral's experts with the top 2 weights not renormalised, OLMo 2's
#: QK-norm over the projection, pre-norms).
MORE_FAMILIES = (
    "qwen2",
    "mistral",
    "gemma",
    "phi3",
    "gptj",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "olmo2",
    "mixtral",
    "olmoe",
)
#: Of those, the ones whose blocks EAP, edge patching and circuit evaluation implement.
EDGE_FAMILIES = (
    "qwen2",
    "mistral",
    "gemma",
    "phi3",
    "gptj",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "olmo2",
    "mixtral",
    "olmoe",
)
#: Of those, the ones whose logits are linear in the final stream (Gemma 2 soft-caps them).
LINEAR_LOGITS = tuple(f for f in MORE_FAMILIES if f != "gemma2")
#: Families whose Hugging Face forward rounds through float32 inside attention even in a float64 model
#: (GPT-J computes its scores in float32; Phi-3's attention output differs from interp's float64 forward
#: by ~1e-9 too): a float64 comparison with them agrees to float32 rounding, not to 1e-12.
FP32_ATTENTION = ("phi3", "gptj")


def fp64_tol(family: str, tol: float) -> float:
    """``tol`` for a float64 comparison with the HF forward, or 1e-7 for :data:`FP32_ATTENTION` families."""
    return 1e-7 if family in FP32_ATTENTION else tol


def fp64_decode_tol(family: str, tol: float) -> float:
    """``tol`` for a float64 comparison of a cached decoding with HF's forward, or 1e-7 where HF's attention rounds
    through float32 (:data:`FP32_ATTENTION`, or a softmax in float32, as Llama's, in a float64 model). interp takes that
    softmax in float32 too, which agrees with HF's bit for bit only where both run one kernel on one shape: a cached
    step's [1, n] score row and a full pass's [n, n] rows sum in different orders on an AVX2 CPU (AVX-512 happens to
    agree at these sizes), so the two agree to float32 rounding of the pattern, not to 1e-12."""
    return 1e-7 if family in FP32_ATTENTION or tiny_arch(family).softmax_fp32 else tol


VOCAB = 100
#: the device the suite builds its models on: ``pytest --device cuda`` or ``INTERP_TEST_DEVICE`` (tests/conftest.py
#: sets it); the plain Hugging Face reference models (:func:`tiny_hf_model`) stay on the CPU
DEVICE = os.environ.get("INTERP_TEST_DEVICE", "cpu")


@functools.lru_cache(maxsize=None)
def _tokenizer_dir(n: int = VOCAB) -> str:
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    for i in range(n - len(vocab)):
        vocab[f"w{i}"] = len(vocab)
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=t, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    d = tempfile.mkdtemp(prefix="interp-tiny-tok-")
    tok.save_pretrained(d)
    return d


def tiny_tokenizer():
    """A word-level tokenizer over 'w0 … w95' plus <pad>/<bos>/<eos>/<unk> (saved to disk: the
    bridge reloads tokenizers by name_or_path)."""
    return AutoTokenizer.from_pretrained(_tokenizer_dir())


def tiny_config(family: str, *, n_layers: int = 2):
    common = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if family == "gpt2":
        c = transformers.GPT2Config(n_layer=n_layers, n_head=4, n_embd=32, n_positions=64, **common)
    elif family == "llama":
        c = transformers.LlamaConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
    elif family == "neox":
        c = transformers.GPTNeoXConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            use_parallel_residual=True,
            rotary_pct=0.25,
            **common,
        )
    elif family == "qwen2":
        c = transformers.Qwen2Config(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
    elif family == "mistral":
        c = transformers.MistralConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            head_dim=8,
            intermediate_size=64,
            max_position_embeddings=64,
            sliding_window=3,
            **common,
        )
    elif family == "gemma":
        c = transformers.GemmaConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=1,
            hidden_size=32,
            head_dim=8,
            intermediate_size=64,
            max_position_embeddings=64,
            query_pre_attn_scalar=16,
            **common,
        )
    elif family == "phi3":
        c = transformers.Phi3Config(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            partial_rotary_factor=0.5,
            **common,
        )
    elif family == "qwen3":
        c = transformers.Qwen3Config(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            head_dim=8,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
    elif family == "olmo2":
        c = transformers.Olmo2Config(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
    elif family == "mixtral":  # 4 experts, 2 per token: each expert's MLP is d_mlp 16 wide
        c = transformers.MixtralConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            intermediate_size=16,
            max_position_embeddings=64,
            num_local_experts=4,
            num_experts_per_tok=2,
            **common,
        )
    elif family == "olmoe":  # 4 experts, 2 per token, their router weights left as the softmax gives them
        c = transformers.OlmoeConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            intermediate_size=16,
            max_position_embeddings=64,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            **common,
        )
    elif family == "gemma2":
        c = transformers.Gemma2Config(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=32,
            head_dim=8,
            intermediate_size=64,
            max_position_embeddings=64,
            query_pre_attn_scalar=16,
            sliding_window=3,
            attn_logit_softcapping=0.5,
            final_logit_softcapping=0.3,
            layer_types=["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(n_layers)],
            **common,
        )
    elif family == "gemma3_text":
        c = transformers.Gemma3TextConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            num_key_value_heads=1,
            hidden_size=32,
            head_dim=8,
            intermediate_size=64,
            max_position_embeddings=64,
            query_pre_attn_scalar=16,
            sliding_window=3,
            layer_types=["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(n_layers)],
            **common,
        )
    elif family == "gptj":
        c = transformers.GPTJConfig(n_layer=n_layers, n_head=4, n_embd=32, n_positions=64, rotary_dim=4, **common)
    elif family == "bert":
        c = transformers.BertConfig(
            num_hidden_layers=n_layers,
            num_attention_heads=4,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
    else:
        raise ValueError(family)
    c._attn_implementation = "eager"
    if family in ("mixtral", "olmoe"):  # the experts one by one (HF's default grouped GEMM refuses float64)
        c._experts_implementation = "eager"
    return c


def tiny_hf_model(
    family: str, *, seed: int = 0, n_layers: int = 2, dtype=torch.float32, bias_scale: float = 0.1, **config_overrides
):
    """The plain HF model (eval mode), with non-trivial norm gains/biases so they matter.

    ``config_overrides`` set config attributes (e.g. Llama ``attention_bias=True``); biases get
    ``bias_scale`` × N(0, 1) added.
    """
    torch.manual_seed(seed)
    c = tiny_config(family, n_layers=n_layers)
    for k, v in config_overrides.items():
        setattr(c, k, v)
    m = transformers.BertForMaskedLM(c) if family == "bert" else transformers.AutoModelForCausalLM.from_config(c)
    with torch.no_grad():  # random gains and biases: an identity norm would hide bugs
        for name, p in m.named_parameters():
            if "norm" in name.lower() or "ln_" in name:
                p.add_(0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.add_(bias_scale * torch.randn_like(p))
        if family == "gptj":  # GPT-J's lm_head has a bias (zero at init)
            m.lm_head.bias.add_(bias_scale * torch.randn_like(m.lm_head.bias))
    return m.to(dtype).eval()


def tiny_hf_dir(family: str, path) -> "os.PathLike":
    """``path`` holding the tiny ``family`` model and the tiny tokenizer as a local Hugging Face folder
    (loadable by name, e.g. from the CLI)."""
    tiny_hf_model(family).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def hooked_forward(hf, handles, *args, **kwargs):
    """``hf(*args, **kwargs)`` without gradients, then every hook in ``handles`` removed (also when it raises): the
    Hugging Face model's own forward, read through the hooks the caller registered."""
    dev = next(hf.parameters()).device  # the reference runs where the HF model is: the inputs go there
    args = tuple(a.to(dev) if isinstance(a, torch.Tensor) else a for a in args)
    kwargs = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    try:
        with torch.no_grad():
            return hf(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()


def tiny_arch(family: str, *, n_layers: int = 2) -> "interp.ArchInfo":
    """The :class:`interp.ArchInfo` of :func:`tiny_model` ``(family)`` read from its config alone (no weights, no
    forward; ``attn_scales`` left at its default, d_head^-1/2 in every layer, which is what the loaded model reads off
    its modules): for tests that need only a model's shape, such as the labels it has."""
    from interp.models._families import arch_from_hf_config

    return arch_from_hf_config(
        tiny_config(family, n_layers=n_layers), name=f"tiny-{family}", has_unembed=family != "bert"
    )


def tiny_model(family: str, *, seed: int = 0, n_layers: int = 2, dtype=torch.float32, device=None) -> "interp.Model":
    """An interp Model of a tiny random ``family`` model ('gpt2', 'llama', 'neox', 'bert'), on ``device`` (default:
    the suite's :data:`DEVICE`)."""
    hf = tiny_hf_model(family, seed=seed, n_layers=n_layers, dtype=dtype)
    return model_from_hf(hf, tiny_tokenizer(), name=f"tiny-{family}", dtype=dtype, device=device or DEVICE)
