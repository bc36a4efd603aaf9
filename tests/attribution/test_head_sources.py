"""unit="head_source" and ov_at against independent computations.

References: unit="head" (each head's whole term, itself checked against HF in
test_logit_attribution.py), and a hand computation from the attention pattern, v and the final
norm's input captured with transformer-lens's own ``run_with_cache`` on the bridge:
A[dst, src] · (v_src W_O^h), centred (LayerNorm), × γ_f / σ_dst, · (W_U[:, a] − W_U[:, w]).
"""

import pytest
import torch

import interp
from interp.attribution import OVAt, attribute_logits, ov_at
from interp.errors import ArgumentError, UnsupportedOperationError
from interp.labels import HeadSource
from interp.models.internal import readable_token
from interp.plots import head_source_heatmap
from interp.plots._common import quoted
from tiny_models import tiny_model

DECODERS = (
    "gpt2",
    "llama",
    "neox",
    "gemma3_text",
    "olmo2",
)  # Gemma 3, OLMo 2: each source's term through the sandwich norm
PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10 w11"]


def _manual_source_term(m, prompt, layer, head, src, dst, u, cache=None):
    """A[dst, src] (v_src W_O^h) through the frozen final norm, · u — from the bridge's own cache."""
    if cache is None:
        toks = prompt if torch.is_tensor(prompt) else m.to_tokens(prompt)
        with torch.no_grad():
            _, cache = m.bridge.run_with_cache(toks)
    a = m.arch
    A = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, dst, src]
    v = cache[f"blocks.{layer}.attn.hook_v"][0, src, head // (a.n_heads // a.n_kv_heads)]
    write = A * (v @ m.weights.W_O[layer, head])
    if a.sandwich_norms:  # the layer's output norm at dst, its scale read off the bridge's own hook
        raw = cache[f"blocks.{layer}.ln1_post.hook_in"][0, dst]
        write = write * m.weights.ln1_post_w[layer] / torch.sqrt(raw.pow(2).mean() + a.norm_eps)
    if a.norm == "none":
        return write @ u
    x = cache["ln_final.hook_in"][0, dst]
    if a.norm == "layernorm":
        sigma = torch.sqrt(x.var(unbiased=False) + a.norm_eps)
        write = write - write.mean()
    else:
        sigma = torch.sqrt(x.pow(2).mean() + a.norm_eps)
    return (write * m.weights.lnf_w / sigma) @ u


def _models():
    return [(f, tiny_model(f)) for f in DECODERS] + [("toy", interp.load_model("toy-attn-only-2l"))]


@pytest.mark.parametrize("family", [*DECODERS, "toy"])
def test_sources_sum_to_the_head_term_and_match_the_cache(family):
    m = interp.load_model("toy-attn-only-2l") if family == "toy" else tiny_model(family)
    if family == "toy":
        inputs, ans, wr = torch.tensor([[3, 9, 4, 11, 3, 9], [5, 6, 7, 5, 6, 2]]), [4, 7], [8, 9]
    else:
        inputs, ans, wr = PROMPTS, ["w3", "w8", "w12"], "w5"
    heads = attribute_logits(m, inputs, answer=ans, wrong=wr)
    src = attribute_logits(m, inputs, answer=ans, wrong=wr, unit="head_source")
    assert src.unit == "head_source" and src.relative_error <= 1e-5
    torch.testing.assert_close(src.total, heads.total, atol=0, rtol=0)
    grid = src.source_matrix(prompt=None)  # [L, H, S]
    n_src = grid.shape[-1]
    for l in range(m.arch.n_layers):
        for h in range(m.arch.n_heads):
            whole = heads[f"L{l}.H{h}"]
            parts = torch.stack([src[f"L{l}.H{h}[src={s}]"] for s in range(n_src)])  # [S, N]
            torch.testing.assert_close(parts.sum(0), whole, atol=1e-6, rtol=1e-5)
    # the other terms are unchanged
    for lab in heads.labels:
        if not lab.startswith("L") or ".H" not in lab:
            torch.testing.assert_close(src[lab], heads[lab], atol=0, rtol=0)
    torch.testing.assert_close(src.head_matrix(), heads.head_matrix(), atol=1e-6, rtol=1e-5)
    # against A, v and the final norm's input from transformer-lens's run_with_cache, per source
    W_U = m.weights.W_U
    for i in range(2):
        if family == "toy":
            prompt, a_id, w_id = inputs[i : i + 1], ans[i], wr[i]
        else:
            prompt = PROMPTS[i]
            a_id, w_id = (m.tokenizer.convert_tokens_to_ids(t) for t in (ans[i], wr))
        dst = int(src.positions[i])
        u = W_U[:, a_id] - W_U[:, w_id]
        for l, h, s in [(0, 1, 0), (1, 2, dst), (1, 3, max(dst - 1, 0)), (m.arch.n_layers - 1, 0, 1)]:
            want = _manual_source_term(m, prompt, l, h, s, dst, u)
            got = src[str(HeadSource(l, h, s))][i]
            assert abs(float(got) - float(want)) < 1e-6, (l, h, s, float(got), float(want))
        # sources after the attributed token (and padding) get nothing: the head cannot read them
        after = src.source_matrix(prompt=i)[..., dst + 1 :]
        assert after.numel() == 0 or float(after.abs().max()) == 0.0


def test_multi_token_head_sources_sum_to_heads():
    m = tiny_model("llama")
    kw = dict(answer="w20 w21 w22", wrong={"w30", "w31"}, multi_token=True, target="logprob", wrong_agg="logsumexp")
    heads = attribute_logits(m, PROMPTS, **kw)
    src = attribute_logits(m, PROMPTS, unit="head_source", **kw)
    torch.testing.assert_close(src.head_matrix(prompt=1), heads.head_matrix(prompt=1), atol=1e-6, rtol=1e-5)
    assert src.relative_error <= 1e-5
    # answer tokens read teacher-forced: sources reach into the answer's own earlier tokens
    n_prompt = len(m.to_tokens(PROMPTS[1])[0])
    assert src.source_matrix(prompt=1).shape[-1] >= n_prompt + 2
    assert float(src.source_matrix(prompt=1)[..., n_prompt:].abs().max()) > 0


@pytest.mark.parametrize("family", [*DECODERS, "toy"])
def test_ov_at_is_the_per_source_term_divided_by_the_pattern(family):
    m = interp.load_model("toy-attn-only-2l") if family == "toy" else tiny_model(family)
    if family == "toy":
        inputs, a_id, w_id = torch.tensor([[3, 9, 4, 11, 3, 9]]), 4, 8
        ans, wr = a_id, w_id
    else:
        inputs, ans, wr = PROMPTS[0], "w3", "w5"
        a_id, w_id = (m.tokenizer.convert_tokens_to_ids(t) for t in (ans, wr))
    src = attribute_logits(m, inputs, answer=ans, wrong=wr, unit="head_source")
    dst = int(src.positions[0])
    for l, h, s in [(1, 2, 1), (0, 3, dst), (1, 0, 0)]:
        r = ov_at(m, inputs, l, h, src=s)
        assert isinstance(r, OVAt) and (r.src, r.dst, r.layer, r.head) == (s, dst, l, h)
        term = r.weight * float(r.logits[a_id] - r.logits[w_id])
        assert abs(term - float(src[f"L{l}.H{h}[src={s}]"][0])) < 1e-6
        # the logits themselves: v_src W_O through the frozen final norm, from the bridge's cache
        u = torch.eye(m.arch.d_vocab)[[a_id, w_id]].T
        manual = _manual_source_term(m, inputs, l, h, s, dst, m.weights.W_U @ u)
        if r.weight > 1e-4:
            torch.testing.assert_close(manual / r.weight, r.logits[[a_id, w_id]], atol=1e-5, rtol=1e-4)
    top = r.top(3)
    assert list(top["token"]) == r.logits.topk(3).indices.tolist()
    if m.tokenizer is not None:
        assert r.token_strs[str(int(top["token"][0]))] == readable_token(m.tokenizer, int(top["token"][0]))
        ids = inputs[0] if torch.is_tensor(inputs) else m.to_tokens(inputs)[0]
        assert r.src_token == m.to_str_tokens(ids)[s]


def test_ov_at_bad_input():
    m = tiny_model("gpt2")
    with pytest.raises(ArgumentError, match="src=4"):
        ov_at(m, "w1 w2", 0, 0, src=4)
    with pytest.raises(ArgumentError, match="src=2 .*after dst=1"):
        ov_at(m, "w1 w2 w3", 0, 0, src=2, dst=1)
    with pytest.raises(ArgumentError, match="layer=5"):
        ov_at(m, "w1 w2", 5, 0, src=0)
    with pytest.raises(ArgumentError, match="head=9"):
        ov_at(m, "w1 w2", 0, 9, src=0)
    with pytest.raises(ArgumentError, match="prompt=3"):
        ov_at(m, ["w1", "w2"], 0, 0, src=0, prompt=3)
    with pytest.raises(UnsupportedOperationError):
        ov_at(tiny_model("bert"), "w1 w2", 0, 0, src=0)
    with pytest.raises(UnsupportedOperationError, match="post-norm"):
        from interp.attribution._sources import require_head_sources

        require_head_sources(tiny_model("bert"), "unit='head_source'")


@pytest.mark.slow
def test_head_source_heatmap_is_over_prompt_i_tokens():
    m = tiny_model("neox")
    src = attribute_logits(m, PROMPTS, answer=["w3", "w8", "w12"], wrong="w5", unit="head_source")
    for i in (0, 2):
        fig = src.plot(prompt=i)
        toks = m.to_str_tokens(m.to_tokens(PROMPTS[i])[0])
        (hm,) = fig.data
        assert len(hm.x) == len(toks) and [x.split(":", 1)[1] for x in hm.x] == toks
        p = int(src.positions[i])
        assert f"at token {quoted(toks[p])} (pos {p})" in fig.layout.title.text
        assert src.prompt_targets[i] in fig.layout.title.text
        grid = src.source_matrix(prompt=i)
        for r, y in enumerate(hm.y):
            l, h = (int(t) for t in y.split(" ")[0][1:].split(".H"))
            assert torch.allclose(torch.tensor(hm.z[r], dtype=grid.dtype), grid[l, h, : len(toks)])
    fig = head_source_heatmap(src, prompt=1, heads=["L1.H2", "L0.H0"])
    assert [y.split(" ")[0] for y in fig.data[0].y] == ["L1.H2", "L0.H0"]
    with pytest.raises(ArgumentError, match="heads contains 'L7.H0'"):
        head_source_heatmap(src, heads=["L7.H0"])
    with pytest.raises(ArgumentError, match="head_source"):
        head_source_heatmap(attribute_logits(m, PROMPTS, answer="w3"))


@pytest.mark.real
@pytest.mark.slow
def test_smollm2_head_sources_sum_to_heads_and_match_the_cache(smollm2):
    prompt = "When John and Mary went to the shops, John gave the bag to"
    heads = attribute_logits(smollm2, prompt, answer=" Mary", wrong=" John")
    src = attribute_logits(smollm2, prompt, answer=" Mary", wrong=" John", unit="head_source")
    torch.testing.assert_close(src.head_matrix(), heads.head_matrix(), atol=2e-5, rtol=1e-4)
    assert src.relative_error <= 1e-4
    top = heads.top(3)["term"].tolist()
    mary, john = (smollm2.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    u = smollm2.weights.W_U[:, mary] - smollm2.weights.W_U[:, john]
    dst = int(src.positions[0])
    with torch.no_grad():
        _, cache = smollm2.bridge.run_with_cache(smollm2.to_tokens(prompt))
    for lab in top:
        if not lab.startswith("L") or ".H" not in lab:
            continue
        l, h = (int(x) for x in lab[1:].split(".H"))
        s = int(src.source_matrix()[l, h].abs().argmax())
        want = _manual_source_term(smollm2, prompt, l, h, s, dst, u, cache)
        assert abs(float(src[f"{lab}[src={s}]"][0]) - float(want)) < 1e-4
        r = ov_at(smollm2, prompt, l, h, src=s)
        assert abs(r.weight * float(r.logits[mary] - r.logits[john]) - float(want)) < 1e-4
