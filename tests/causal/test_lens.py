"""logit_lens: readouts at every resid point, checked against Hugging Face's hidden states and final
norm (recomputed scale) and against cumulative sums of attribute_logits' terms (frozen scale)."""

from __future__ import annotations

import re

import plotly.graph_objects as go
import pytest
import torch

import interp
import interp.stream.internal
from interp.attribution import attribute_logits
from interp.causal import LogitLens, logit_lens
from interp.errors import ArgumentError, ResultFormatError, UnsupportedOperationError
from tiny_models import LINEAR_LOGITS, MORE_FAMILIES, tiny_hf_model, tiny_model

DECODERS = ("gpt2", "llama", "neox", *MORE_FAMILIES)
PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7 w8"]  # the second is padded
ANSWER = "w12"


def _hf_parts(family, hf):
    """(final norm module, unembedding module) of the plain HF model."""
    norm = {
        "gpt2": lambda: hf.transformer.ln_f,
        "gptj": lambda: hf.transformer.ln_f,
        "neox": lambda: hf.gpt_neox.final_layer_norm,
    }.get(family, lambda: hf.model.norm)()
    cap = getattr(hf.config, "final_logit_softcapping", None)  # Gemma 2 caps its logits: c·tanh(z / c)
    head = hf.get_output_embeddings()
    return norm, (lambda y: torch.tanh(head(y) / cap) * cap) if cap else head


@pytest.mark.parametrize("family", DECODERS)
def test_recomputed_lens_is_hf_final_norm_of_hf_hidden_states(family):
    """The usual lens: lm_head(final_norm(h_l)) of Hugging Face's own hidden states, token for token."""
    model = tiny_model(family)
    lens = logit_lens(model, PROMPTS, answer=ANSWER, top_k=4)
    hf = tiny_hf_model(family)  # the same seeded weights, run by transformers itself
    batch = interp.stream.internal.as_batch(model, PROMPTS)
    with torch.no_grad():
        out = hf(batch.tokens, attention_mask=batch.attention_mask, output_hidden_states=True)
    norm, unembed = _hf_parts(family, hf)
    L = model.arch.n_layers
    a = model.tokenizer(ANSWER, add_special_tokens=False)["input_ids"][0]
    mask = batch.attention_mask.bool()
    for l in range(L):  # hidden_states[l + 1] is block l's output (the last one is already normed)
        with torch.no_grad():
            ref = out.logits if l == L - 1 else unembed(norm(out.hidden_states[l + 1]))
        i = lens.labels.index(f"blocks.{l}.hook_resid_post")
        torch.testing.assert_close(lens.target_values[i][mask], ref[..., a][mask], rtol=1e-4, atol=1e-5)
        top = ref.topk(4, dim=-1)
        torch.testing.assert_close(lens.top_logits[i][mask], top.values[mask], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(
            lens.top_probs[i][mask], ref.softmax(-1).topk(4, -1).values[mask], rtol=1e-4, atol=1e-6
        )
        assert torch.equal(lens.top_tokens[i][mask][:, 0], top.indices[mask][:, 0])
    with torch.no_grad():
        ref0 = unembed(norm(out.hidden_states[0]))
    torch.testing.assert_close(lens.target_values[0][mask], ref0[..., a][mask], rtol=1e-4, atol=1e-5)
    assert lens.labels[0] == "blocks.0.hook_resid_pre" and lens.closure_error < 1e-4


_TERM = re.compile(r"L(\d+)\.(H\d+|attn_bias|mlp|mlp_bias)$")


def _cumulative(attr, point, arch):
    """Σ of the DLA terms written before resid point ``point`` (plus the final norm's β and b_U)."""
    m = re.fullmatch(r"blocks\.(\d+)\.hook_resid_(pre|mid|post)", point)
    layer, where = int(m[1]), m[2]
    total = torch.zeros_like(attr.values[0])
    for lab, v in zip(attr.labels, attr.values):
        t = _TERM.match(lab)
        if t is None:  # embed, pos_embed, final_bias, unembed_bias: before every point / part of the readout
            total = total + v
            continue
        l, attn_side = int(t[1]), not t[2].startswith("mlp")
        if l < layer or (l == layer and where == "post") or (l == layer and where == "mid" and attn_side):
            total = total + v
    return total


@pytest.mark.parametrize("family", ("gpt2", "llama", "neox", *LINEAR_LOGITS))  # DLA needs linear logits
def test_frozen_lens_is_the_cumulative_sum_of_dla_terms_and_ends_at_the_logits(family):
    model = tiny_model(family)
    lens = logit_lens(model, PROMPTS, scale="frozen", answer=ANSWER, wrong="w13")
    batch = interp.stream.internal.as_batch(model, PROMPTS)
    lengths = batch.attention_mask.sum(1)
    for p in range(int(lengths.min())):  # every position both prompts have
        attr = attribute_logits(model, PROMPTS, answer=ANSWER, wrong="w13", pos=[p, p], unit="head")
        for i, point in enumerate(lens.labels):
            torch.testing.assert_close(
                lens.target_values[i, :, p], _cumulative(attr, point, model.arch), rtol=1e-5, atol=1e-5
            )
    # the last readout is the model's own logits (the bridge's full forward pass)
    with torch.no_grad():
        logits = model.bridge(batch.tokens, attention_mask=batch.attention_mask)
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (ANSWER, "w13"))
    mask = batch.attention_mask.bool()
    torch.testing.assert_close(
        lens.target_values[-1][mask], (logits[..., a] - logits[..., w])[mask], rtol=1e-5, atol=1e-5
    )
    assert lens.closure_error < 1e-4


def test_frozen_and_recomputed_agree_only_at_the_last_point():
    model = tiny_model("llama")
    rec = logit_lens(model, PROMPTS, answer=ANSWER)
    fro = logit_lens(model, PROMPTS, scale="frozen", answer=ANSWER)
    mask = rec.attention_mask.bool()
    torch.testing.assert_close(rec.target_values[-1][mask], fro.target_values[-1][mask], rtol=1e-5, atol=1e-6)
    gap = (rec.target_values[:-1] - fro.target_values[:-1]).abs()[:, mask]
    assert float(gap.min(dim=1).values.max()) > 1e-3  # every earlier point differs somewhere
    assert rec.scale == "recomputed" and fro.scale == "frozen"


def test_toy_without_final_norm_has_one_lens():
    toy = interp.load_model("toy-attn-only-2l")
    ids = torch.tensor([[1, 5, 9, 12, 5, 9]])
    rec = logit_lens(toy, ids, answer=12)
    fro = logit_lens(toy, ids, scale="frozen", answer=12)
    assert rec.labels == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert torch.equal(rec.target_values, fro.target_values) and torch.equal(rec.top_tokens, fro.top_tokens)
    with torch.no_grad():
        logits = toy.bridge(ids)
    torch.testing.assert_close(rec.target_values[-1], logits[..., 12], rtol=1e-5, atol=1e-5)


def test_one_position_per_prompt_equals_the_full_lens_there():
    model = tiny_model("gpt2")
    full = logit_lens(model, PROMPTS, answer=ANSWER)
    last = logit_lens(model, PROMPTS, answer=ANSWER, pos=-1)
    lengths = full.attention_mask.sum(1)
    assert last.positions[:, 0].tolist() == (lengths - 1).tolist()
    for b in range(2):
        p = int(lengths[b]) - 1
        torch.testing.assert_close(last.target_values[:, b, 0], full.target_values[:, b, p])
        assert torch.equal(last.top_tokens[:, b, 0], full.top_tokens[:, b, p])


def test_result_contract_dataframe_save_load_and_plot(tmp_path):
    model = tiny_model("gpt2")
    lens = logit_lens(model, PROMPTS, answer=ANSWER, top_k=3)
    df = lens.to_dataframe()
    n_real = int(lens.attention_mask.sum())
    assert len(df) == len(lens.labels) * n_real
    assert {"point", "depth", "prompt", "pos", "input_token", "top_token", "top_prob", "target", "value"} <= set(df)
    assert (df["value"] == df["target"]).all()
    row = df[(df.point == "blocks.1.hook_resid_post") & (df.prompt == 1) & (df.pos == 3)].iloc[0]
    assert row["top_token"] == lens.token_str(int(lens.top_tokens[-1, 1, 3, 0]))
    assert row["input_token"] == "w8"  # <bos> w6 w7 w8
    top = lens.top(4)
    assert len(top) == 4 and top["value"].abs().is_monotonic_decreasing
    r = lens["blocks.0.hook_resid_mid"]
    assert set(r) == {"top_tokens", "top_logits", "top_probs", "target"} and r["top_tokens"].shape == (2, 6, 3)
    path = lens.save(tmp_path / "lens.safetensors")
    back = LogitLens.load(path)
    assert back.labels == lens.labels and back.decoded == lens.decoded and back.target == lens.target
    for f in ("top_tokens", "top_logits", "top_probs", "target_values", "positions", "attention_mask", "tokens"):
        assert torch.equal(getattr(back, f), getattr(lens, f))
    with pytest.raises(ResultFormatError):
        interp.PatchResult.load(path)
    fig = lens.plot(prompt=1)
    assert isinstance(fig, go.Figure) and isinstance(fig.data[0], go.Heatmap)
    assert len(fig.data[0].x) == 4 and len(fig.data[0].y) == len(lens.labels)  # prompt 1's 4 real tokens
    assert "w12" in fig.layout.title.text
    top_fig = lens.plot(value="top")
    assert float(fig.data[0].zmid) == 0.0 and top_fig.data[0].zmax == 1.0
    no_target = logit_lens(model, PROMPTS)
    assert no_target.target_values is None and "target" not in no_target.to_dataframe()
    with pytest.raises(ArgumentError, match="value='target'"):
        no_target.plot(value="target")


def test_encoders_and_bad_input():
    with pytest.raises(UnsupportedOperationError, match="attribute_direction"):
        logit_lens(tiny_model("bert"), PROMPTS)
    model = tiny_model("llama")
    for kwargs, words in [
        (dict(scale="fixed"), "scale"),
        (dict(top_k=0), "top_k"),
        (dict(top_k=10**6), "top_k"),
        (dict(wrong="w3"), "wrong"),
        (dict(pos=7), "pos"),
        (dict(pos=[1]), "pos"),
        (dict(answer="w1 w2"), "answer"),
    ]:
        with pytest.raises(ArgumentError, match=words):
            logit_lens(model, PROMPTS, **kwargs)


@pytest.mark.real
def test_smollm2_frozen_lens_ends_at_the_logits_and_sums_the_ledger(smollm2):
    prompt = "When John and Mary went to the shops, John gave the bag to"
    fro = logit_lens(smollm2, prompt, scale="frozen", answer=" Mary", wrong=" John", pos=-1)
    rec = logit_lens(smollm2, prompt, answer=" Mary", wrong=" John", pos=-1)
    attr = attribute_logits(smollm2, prompt, answer=" Mary", wrong=" John")
    assert float(fro.target_values[-1, 0, 0]) == pytest.approx(float(attr.total[0]), rel=1e-5)
    assert float(rec.target_values[-1, 0, 0]) == pytest.approx(float(attr.total[0]), rel=1e-5)
    for i, point in enumerate(fro.labels):
        assert float(fro.target_values[i, 0, 0]) == pytest.approx(
            float(_cumulative(attr, point, smollm2.arch)[0]), abs=2e-4 * float(attr.values.abs().sum())
        )
    assert fro.closure_error < 1e-3 and rec.closure_error < 1e-3
    assert fro.token_str(int(fro.top_tokens[-1, 0, 0, 0])) == " Mary"
