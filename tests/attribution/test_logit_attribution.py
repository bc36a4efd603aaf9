"""attribute_logits / attribute_direction against independent computations.

References: the plain HF model's logits (totals), transformer-lens's direct_logit_attribution
on a separate compatibility-mode bridge (per-head terms), and per-head writes recomputed
from HF forward hooks (tiny models).
"""

import re

import pytest
import torch
import transformers

import interp
import interp.stream.internal
from interp.attribution import attribute_direction, attribute_logits
from interp.errors import (
    ArgumentError,
    InterpError,
    UnsupportedArchitectureError,
    UnsupportedOperationError,
)
from tiny_models import LINEAR_LOGITS, hooked_forward, tiny_hf_model, tiny_model, tiny_tokenizer
from interp.models import model_from_hf_unchecked as model_from_hf

DECODERS = ("gpt2", "llama", "neox", *LINEAR_LOGITS)
PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10 w11"]


def _hf_logit_diff(family, model, prompts, ans, wrong):
    hf = tiny_hf_model(family)
    toks = model.to_tokens(prompts)
    mask = torch.zeros_like(toks)
    for i, p in enumerate(prompts):
        mask[i, : len(p.split()) + 1] = 1
    with torch.no_grad():
        lg = hf(toks, attention_mask=mask).logits
    last = mask.sum(1) - 1
    rows = torch.arange(len(prompts))
    ia, iw = (model.tokenizer.convert_tokens_to_ids(t) for t in (ans, wrong))
    return lg[rows, last, ia] - lg[rows, last, iw]


@pytest.mark.parametrize("family", DECODERS)
@pytest.mark.parametrize("unit", ["head", "component", "neuron"])
def test_terms_sum_to_hf_logit_difference(family, unit):
    m = tiny_model(family)
    if unit == "neuron" and m.arch.n_experts:  # Mixtral: an expert MLP's neurons are not split yet
        with pytest.raises(UnsupportedArchitectureError, match="mixture-of-experts"):
            attribute_logits(m, PROMPTS, answer="w3", wrong="w5", unit=unit)
        return
    a = attribute_logits(m, PROMPTS, answer="w3", wrong="w5", unit=unit)
    ref = _hf_logit_diff(family, m, PROMPTS, "w3", "w5")
    assert torch.allclose(a.total, ref, atol=1e-5), (a.total, ref)
    assert torch.allclose(a.values.sum(0), ref, atol=1e-5)
    assert a.relative_error <= 1e-4
    assert "remainder" not in a.labels


@pytest.mark.parametrize("family", DECODERS)
def test_units_are_consistent(family):
    m = tiny_model(family)
    head = attribute_logits(m, PROMPTS, answer="w3", unit="head")
    comp = attribute_logits(m, PROMPTS, answer="w3", unit="component")
    neur = None if m.arch.n_experts else attribute_logits(m, PROMPTS, answer="w3", unit="neuron")
    for l in range(m.arch.n_layers):
        heads = sum(head[f"L{l}.H{h}"] for h in range(m.arch.n_heads))
        if f"L{l}.attn_bias" in head.labels:
            heads = heads + head[f"L{l}.attn_bias"]
        torch.testing.assert_close(comp[f"L{l}.attn"], heads, atol=1e-6, rtol=1e-5)
        if neur is None:  # a mixture of experts: no neuron unit (refused, test_terms_sum_to_hf_logit_difference)
            continue
        neurons = sum(neur[f"L{l}.N{n}"] for n in range(m.arch.d_mlp))
        if f"L{l}.mlp_bias" in neur.labels:
            neurons = neurons + neur[f"L{l}.mlp_bias"]
        torch.testing.assert_close(neurons, head[f"L{l}.mlp"], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", DECODERS)
def test_head_terms_match_hf_head_outputs(family):
    """Each head's term = (its own output z_h W_O^h, read off the HF model) through the frozen final norm."""
    m = tiny_model(family)
    hf = tiny_hf_model(family)
    toks = m.to_tokens("w1 w2 w3 w4")
    a = attribute_logits(m, toks, answer="w7")
    # independent: capture each layer's input to the output projection (the concatenated z)
    oproj = {
        "gpt2": lambda l: hf.transformer.h[l].attn.c_proj,
        "gptj": lambda l: hf.transformer.h[l].attn.out_proj,
        "neox": lambda l: hf.gpt_neox.layers[l].attention.dense,
    }.get(family, lambda l: hf.model.layers[l].self_attn.o_proj)
    zs, final_in, attn_out = {}, {}, {}
    hs = [
        oproj(l).register_forward_pre_hook(lambda mod, args, l=l: zs.__setitem__(l, args[0].detach()))
        for l in range(m.arch.n_layers)
    ]
    hs += [
        oproj(l).register_forward_hook(lambda mod, args, out, l=l: attn_out.__setitem__(l, out.detach()))
        for l in range(m.arch.n_layers)
    ]
    norm = {
        "gpt2": lambda: hf.transformer.ln_f,
        "gptj": lambda: hf.transformer.ln_f,
        "neox": lambda: hf.gpt_neox.final_layer_norm,
    }.get(family, lambda: hf.model.norm)()
    hs.append(norm.register_forward_pre_hook(lambda mod, args: final_in.__setitem__("x", args[0].detach())))
    hooked_forward(hf, hs, toks)
    x = final_in["x"][0, -1]
    if m.arch.norm == "layernorm":
        sigma = torch.sqrt(x.var(unbiased=False) + m.arch.norm_eps)
    else:
        sigma = torch.sqrt(x.pow(2).mean() + m.arch.norm_eps)
    gamma = norm.weight.detach() + (1.0 if family.startswith("gemma") else 0.0)  # Gemma's RMSNorm: 1 + w
    u = m.weights.W_U[:, m.tokenizer.convert_tokens_to_ids("w7")]
    dh = m.arch.d_head
    for l in range(m.arch.n_layers):
        z = zs[l][0, -1].reshape(m.arch.n_heads, dh)
        for h in range(m.arch.n_heads):
            write = z[h] @ m.weights.W_O[l, h]
            if m.arch.sandwich_norms:  # the layer's output norm, its σ' from the HF attention output
                post = hf.model.layers[l].post_attention_layernorm
                o = attn_out[l][0, -1]
                eps = post.eps if hasattr(post, "eps") else post.variance_epsilon
                write = (
                    write
                    * (post.weight.detach() + (1.0 if family.startswith("gemma") else 0.0))
                    / torch.sqrt(o.pow(2).mean() + eps)
                )
            if m.arch.norm == "layernorm":
                write = write - write.mean()
            expected = (gamma * write / sigma) @ u
            assert abs(a[f"L{l}.H{h}"].item() - expected.item()) < 1e-5


@pytest.mark.parametrize("family", [f for f in DECODERS if f not in ("gemma3_text", "olmo2")])
def test_matches_transformer_lens_dla_per_head(family):
    """transformer-lens's DLA (compatibility mode, value biases not folded) gives the same per-head values.
    (Not Gemma 3: transformer-lens's per-head DLA ignores the sandwich norm a head's write passes; not OLMo 2:
    its bridge cannot fold the final norm, which transformer-lens's DLA requires. Both are checked against
    the HF model's own modules in test_head_terms_match_hf_head_outputs.)"""
    from transformer_lens.tools.analysis.direct_logit_attribution import direct_logit_attribution

    m = tiny_model(family)
    other = model_from_hf(tiny_hf_model(family), tiny_tokenizer(), name="tl-copy")
    other.bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False)
    toks = m.to_tokens("w1 w2 w3 w4 w5")
    a = attribute_logits(m, toks, answer="w9", wrong="w4")
    r = direct_logit_attribution(
        other.bridge,
        toks,
        answer_tokens=torch.tensor([m.tokenizer.convert_tokens_to_ids("w9")]),
        incorrect_tokens=torch.tensor([m.tokenizer.convert_tokens_to_ids("w4")]),
        unit="head",
    )
    tl = {re.sub(r"L(\d+)H(\d+)", r"L\1.H\2", lab): v for lab, v in zip(r.labels, r.attribution.flatten().tolist())}
    heads = [lab for lab in tl if re.fullmatch(r"L\d+\.H\d+", lab)]
    assert len(heads) == m.arch.n_layers * m.arch.n_heads
    worst = max(abs(tl[h] - a[h].item()) for h in heads)
    assert worst < 1e-4, worst


def test_dataset_sweep_batches_and_progress(capsys):
    m = tiny_model("gpt2")
    prompts = [f"w{i} w{i + 1} w{i + 2}" for i in range(10)]
    answers = [f"w{i + 3}" for i in range(10)]
    whole = attribute_logits(m, prompts, answer=answers, batch_size=10, progress=False)
    streamed = attribute_logits(m, prompts, answer=answers, batch_size=3, progress=True)
    assert streamed.values.shape == (len(streamed.labels), 10)
    torch.testing.assert_close(streamed.values, whole.values, atol=1e-6, rtol=1e-5)
    assert "attribute_logits" in capsys.readouterr().err  # the tqdm bar
    # one prompt alone gives the same numbers as inside the batch
    alone = attribute_logits(m, prompts[4], answer=answers[4])
    torch.testing.assert_close(alone.values[:, 0], whole.values[:, 4], atol=1e-6, rtol=1e-5)


def test_positions_per_prompt_and_padding():
    m = tiny_model("llama")
    prompts = ["w1 w2 w3 w4 w5", "w6 w7"]
    a = attribute_logits(m, prompts, answer="w3", pos=[2, 1])
    assert a.positions.tolist() == [2, 1]
    b = attribute_logits(m, ["w1 w2"], answer="w3", pos=-1)  # same prefix as prompt 0 at pos 2
    torch.testing.assert_close(a.values[:, 0], b.values[:, 0], atol=1e-6, rtol=1e-5)


def test_result_views():
    m = tiny_model("gpt2")
    a = attribute_logits(m, PROMPTS, answer="w3", wrong="w5")
    df = a.to_dataframe()
    assert list(df["term"]) == a.labels
    top = a.top(3)
    assert len(top) == 3 and top["mean_abs"].is_monotonic_decreasing
    grid = a.head_matrix()
    assert grid.shape == (m.arch.n_layers, m.arch.n_heads)
    assert torch.allclose(grid[1, 2], a.mean()[a.labels.index("L1.H2")])
    assert torch.allclose(a.mean(), a.values.mean(1))


def test_top_absolute_false_ranks_by_the_signed_mean():
    """``top(k, absolute=False)`` is not ``top(k)``: the default column is mean_abs (a magnitude), so the signed
    ranking reads ``mean`` — the terms that push the target up most — and ``absolute=True`` is the default."""
    a = attribute_logits(tiny_model("llama"), ["w1 w2 w3 w4", "w5 w6 w7 w8"], answer="w3", wrong="w4")
    df = a.to_dataframe()
    assert (df["mean"] < 0).any() and df.loc[df["mean_abs"].idxmax(), "mean"] < 0  # a negative term leads by |·|
    signed, default = a.top(5, absolute=False), a.top(5)
    assert list(signed["term"]) != list(default["term"])
    assert list(signed["term"]) == list(df.sort_values("mean", ascending=False, kind="stable")["term"][:5])
    assert list(a.top(5, absolute=True)["term"]) == list(default["term"])
    assert list(a.top(5, by="mean_abs", absolute=False)["term"]) == list(default["term"])  # by= is taken as given


@pytest.mark.parametrize(
    "kwargs, err, word",
    [
        (dict(answer="w1 w2"), ArgumentError, "answer"),
        (dict(answer=10_000), ArgumentError, "answer"),
        (dict(answer=-1), ArgumentError, "answer"),
        (dict(answer="w1", pos=7), ArgumentError, "pos"),
        (dict(answer="w1", pos=[1, 2]), ArgumentError, "pos"),
        (dict(answer=["w1", "w2"]), ArgumentError, "answer"),
        (dict(answer="w1", unit="layer"), ArgumentError, "unit"),
        (dict(answer="w1", batch_size=0), ArgumentError, "batch_size"),
        (dict(answer="w1", wrong=3.5), ArgumentError, "wrong"),
    ],
)
def test_bad_input(kwargs, err, word):
    m = tiny_model("gpt2")
    with pytest.raises(err) as e:
        attribute_logits(m, PROMPTS, **kwargs)
    assert word in str(e.value)


def test_pos_pointing_at_padding():
    m = tiny_model("gpt2")
    with pytest.raises(ArgumentError, match="padding"):
        attribute_logits(m, ["w1 w2 w3 w4", "w5"], answer="w1", pos=3)


def test_encoder_refuses_logits_and_points_to_direction():
    m = tiny_model("bert")
    with pytest.raises(UnsupportedOperationError, match="attribute_direction"):
        attribute_logits(m, "w1 w2", answer="w3")


def test_direction_attribution_on_tiny_bert_matches_hf():
    m = tiny_model("bert")
    hf = tiny_hf_model("bert")
    prompts = ["w1 w2 w3", "w4 w5"]
    batch = interp.stream.internal.as_batch(m, prompts)
    with torch.no_grad():
        h = hf.bert(batch.tokens, attention_mask=batch.attention_mask).last_hidden_state
    u = torch.randn(m.arch.d_model)
    mask = batch.attention_mask[..., None].float()
    pooled = (h * mask).sum(1) / mask.sum(1)
    r = attribute_direction(m, prompts, u)
    torch.testing.assert_close(r.total, pooled @ u, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(r.values.sum(0), pooled @ u, atol=1e-5, rtol=1e-5)
    r0 = attribute_direction(m, prompts, u, pos=0)
    torch.testing.assert_close(r0.values.sum(0), h[:, 0] @ u, atol=1e-5, rtol=1e-5)
    for bad in (torch.randn(5), torch.tensor([float("nan")] * m.arch.d_model)):
        with pytest.raises(InterpError, match="direction"):
            attribute_direction(m, prompts, bad)


@pytest.mark.real
def test_smollm2_ioi_matches_transformer_lens(smollm2):
    from transformer_lens.tools.analysis.direct_logit_attribution import direct_logit_attribution

    prompt = "When John and Mary went to the shops, John gave the bag to"
    a = attribute_logits(smollm2, prompt, answer=" Mary", wrong=" John")
    # the model's own logit difference, from an independent plain forward pass
    toks = smollm2.to_tokens(prompt)
    with torch.no_grad():
        logits = smollm2.bridge.original_model(toks).logits[0, -1]
    mary, john = (smollm2.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    assert abs(a.total.item() - (logits[mary] - logits[john]).item()) < 1e-4
    assert a.relative_error <= 1e-4
    other = interp.load_model("smollm2-135m")
    other.bridge.enable_compatibility_mode(disable_warnings=True)
    r = direct_logit_attribution(other.bridge, prompt, answer_tokens=" Mary", incorrect_tokens=" John", unit="head")
    tl = {re.sub(r"L(\d+)H(\d+)", r"L\1.H\2", lab): v for lab, v in zip(r.labels, r.attribution.flatten().tolist())}
    heads = [lab for lab in tl if re.fullmatch(r"L\d+\.H\d+", lab)]
    assert len(heads) == 270
    assert max(abs(tl[h] - a[h].item()) for h in heads) < 1e-3


@pytest.mark.real
def test_minilm_direction_attribution_closes(minilm):
    a, b = "A man is playing a guitar.", "Someone plays an instrument."
    hf = transformers.BertModel.from_pretrained(minilm.source).eval()
    enc = minilm.tokenizer([a, b], padding=True, return_tensors="pt")
    with torch.no_grad():
        h = hf(**enc).last_hidden_state
    mask = enc.attention_mask[..., None].float()
    pooled = (h * mask).sum(1) / mask.sum(1)
    u = pooled[0] - pooled[1]
    r = attribute_direction(minilm, [a, b], u)
    torch.testing.assert_close(r.values.sum(0), pooled @ u, atol=1e-4, rtol=1e-4)
    assert r.relative_error <= 1e-4


def test_attention_only_toy_without_norms():
    """No final norm (the shipped toys): the total is the model's own logit from the full pass."""
    from interp.toy import repeated_tokens

    m = interp.load_model("toy-attn-only-2l")
    assert m.arch.norm == "none"
    toks = repeated_tokens(3, 10, m.arch.d_vocab, generator=torch.Generator().manual_seed(1))
    answer = toks[:, 12]  # the token after the repeated one at pos 11: what induction predicts
    a = attribute_logits(m, toks, answer=answer.tolist(), pos=11, unit="component")
    with torch.no_grad():
        logits = m.bridge(toks)
    ref = logits[torch.arange(3), 11, answer]
    torch.testing.assert_close(a.total, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.values.sum(0), ref, atol=1e-4, rtol=1e-5)
    assert a.top(1)["term"][0] == "L1.attn"  # the induction layer carries the prediction


def test_soft_capped_logits_first_order_plus_remainder():
    """Gemma 2 caps its logits, c·tanh(z/c): the terms split z·sech²(z/c) (each term of the pre-cap z times the
    slope) and ``softcap_remainder`` holds the rest, so they add up to the model's own capped difference."""
    m = tiny_model("gemma2")
    hf = tiny_hf_model("gemma2")
    toks = m.to_tokens("w1 w2 w3 w4")
    a = attribute_logits(m, toks, answer="w7", wrong="w9")
    ia, iw = (m.tokenizer.convert_tokens_to_ids(t) for t in ("w7", "w9"))
    with torch.no_grad():
        out = hf(toks, output_hidden_states=True)
    cap = hf.config.final_logit_softcapping
    z = out.hidden_states[-1][0, -1] @ hf.lm_head.weight.T  # the pre-cap logits, from HF's own final state
    y = out.logits[0, -1]
    torch.testing.assert_close(y, torch.tanh(z / cap) * cap, atol=1e-6, rtol=1e-5)  # HF caps as stated
    assert float(a.logit[0]) == pytest.approx(float(y[ia] - y[iw]), abs=1e-6)
    assert a.closure_error < 1e-6
    slope = 1 - (y / cap) ** 2
    first = float(slope[ia] * z[ia] - slope[iw] * z[iw])
    terms = [lab for lab in a.labels if lab != "softcap_remainder"]
    assert float(sum(a[lab] for lab in terms)) == pytest.approx(first, abs=1e-5)
    assert float(a["softcap_remainder"]) == pytest.approx(float(y[ia] - y[iw]) - first, abs=1e-5)
    assert abs(float(a["softcap_remainder"])) > 1e-4  # the cap bites on this tiny model (c = 0.3)


def test_sandwich_norm_with_an_attention_bias_closes():
    """Gemma 3 with o_proj biases: the L{l}.attn_bias term passes its layer's sandwich norm (ln1_post), not the
    MLP's — the attribution adds up to HF's logit difference and every read of the trace closes."""
    hf = tiny_hf_model("gemma3_text", attention_bias=True)
    m = model_from_hf(tiny_hf_model("gemma3_text", attention_bias=True), tiny_tokenizer(), name="tiny-gemma3-bias")
    assert m.arch.attn_bias and float(m.weights.b_O.abs().max()) > 0.01
    toks = m.to_tokens("w1 w2 w3 w4")
    a = attribute_logits(m, toks, answer="w7", wrong="w9")
    with torch.no_grad():
        y = hf(toks).logits[0, -1]
    ia, iw = (m.tokenizer.convert_tokens_to_ids(t) for t in ("w7", "w9"))
    assert float(a.logit[0]) == pytest.approx(float(y[ia] - y[iw]), abs=1e-5) and a.closure_error < 1e-5
    tr = interp.trace(m, toks)
    for point in ("blocks.0.hook_resid_mid", "blocks.1.hook_resid_post", "unembed"):
        assert tr.decompose(point).relative_error < 1e-5, point
