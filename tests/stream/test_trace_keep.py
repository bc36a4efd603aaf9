"""A trace you can keep: ResidualTrace.save/load, trace(..., keep=...) and batched attention patterns.

References: the plain HF model's attention weights (``output_attentions=True``) and the input of
each layer's output projection (the concatenated z, from an HF forward pre-hook) — no interp and
no transformer-lens code; a loaded trace against the trace it was saved from, bit for bit.
"""

import pytest
import torch

import interp
from interp.errors import ArgumentError, ExportError, ResultFormatError
from interp.stream import AttentionPatternBatch, ResidualTrace, attention_patterns
from interp.stream.internal import as_batch
from rounding import assert_same_up_to_rounding, rounding_tolerance
from tiny_models import FAMILIES, hooked_forward, tiny_hf_model, tiny_model

PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]
_OPROJ = {
    "gpt2": lambda hf, l: hf.transformer.h[l].attn.c_proj,
    "llama": lambda hf, l: hf.model.layers[l].self_attn.o_proj,
    "neox": lambda hf, l: hf.gpt_neox.layers[l].attention.dense,
    "bert": lambda hf, l: hf.bert.encoder.layer[l].attention.output.dense,
    "qwen3": lambda hf, l: hf.model.layers[l].self_attn.o_proj,
    "gemma3_text": lambda hf, l: hf.model.layers[l].self_attn.o_proj,
    "olmo2": lambda hf, l: hf.model.layers[l].self_attn.o_proj,
    "olmoe": lambda hf, l: hf.model.layers[l].self_attn.o_proj,
}


def _hf_pass(family, batch):
    """(attention weights per layer [b, H, q, k], o-projection inputs per layer [b, pos, H*d_head])."""
    hf = tiny_hf_model(family)
    zs = {}
    hooks = [
        _OPROJ[family](hf, l).register_forward_pre_hook(lambda mod, args, l=l: zs.__setitem__(l, args[0]))
        for l in range(hf.config.num_hidden_layers if family != "gpt2" else hf.config.n_layer)
    ]
    out = hooked_forward(hf, hooks, batch.tokens, attention_mask=batch.attention_mask, output_attentions=True)
    return out.attentions, zs


def _real(mask, b):
    return mask[b].bool()


@pytest.mark.parametrize(
    "family", [*FAMILIES, "qwen3", "gemma3_text", "olmo2", "olmoe"]
)  # QK-norm: the normed q, k kept
def test_kept_patterns_q_k_v_are_the_models(family):
    m = tiny_model(family)
    tr = interp.trace(m, PROMPTS, keep=("patterns", "q", "k", "v"))
    batch = as_batch(m, PROMPTS)
    attn, zs = _hf_pass(family, batch)
    a = m.arch
    assert tr.patterns.shape == (a.n_layers, 3, a.n_heads, batch.tokens.shape[1], batch.tokens.shape[1])
    assert tr.k.shape[-2:] == (a.n_kv_heads, a.d_head) and tr.q.shape[-2:] == (a.n_heads, a.d_head)
    for l in range(a.n_layers):
        for b in range(3):
            r = _real(batch.attention_mask, b)
            # the pattern is HF's attention weights
            torch.testing.assert_close(
                tr.patterns[l, b][:, r][:, :, r], attn[l][b][:, r][:, :, r], atol=1e-6, rtol=1e-5
            )
            # q·kᵀ/√d_head, masked and softmaxed, is the pattern (after RoPE for rotary models)
            q, k = tr.q[l, b][r], tr.k[l, b][r].repeat_interleave(a.group_size, dim=1)  # [pos, H, dh]
            s = torch.einsum("qhd,khd->hqk", q, k) * a.attn_scale(l)  # 1/√d_head unless the model says otherwise
            if a.causal:
                s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
            if a.window(l):  # a sliding window: keys t − w < s ≤ t only
                s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).tril(-a.window(l)), float("-inf"))
            torch.testing.assert_close(torch.softmax(s, -1), attn[l][b][:, r][:, :, r], atol=1e-5, rtol=1e-4)
            # pattern · v is the input of the output projection (z), head by head
            v = tr.v[l, b][r].repeat_interleave(a.group_size, dim=1)  # [pos, H, dh]
            z = torch.einsum("hqk,khd->qhd", tr.patterns[l, b][:, r][:, :, r], v).reshape(int(r.sum()), -1)
            torch.testing.assert_close(z, zs[l][b][r], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", [*FAMILIES, "toy"])
def test_saved_trace_decomposes_identically(family, tmp_path):
    if family == "toy":
        m = interp.load_model("toy-attn-only-2l")
        tr = interp.trace(m, torch.tensor([[0, 5, 6, 7], [3, 4, 5, 6]]), keep=("patterns",))
    else:
        m = tiny_model(family)
        tr = interp.trace(m, PROMPTS, neurons=[1], keep=("patterns", "k"))
    path = tr.save(tmp_path / "t.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.safetensors"]  # atomic: no temporary left
    back = ResidualTrace.load(path)
    assert back.writes == tr.writes and back.reads == tr.reads and back.str_tokens == tr.str_tokens
    assert torch.equal(back.tokens, tr.tokens) and torch.equal(back.attention_mask, tr.attention_mask)
    assert torch.equal(back.patterns, tr.patterns)
    if family != "toy":
        assert torch.equal(back.k, tr.k)
    for point in tr.reads + tr.resid_points:
        d, e = tr.decompose(point), back.decompose(point)
        assert d.labels == e.labels, point
        assert_same_up_to_rounding(e.contributions, d.contributions, point)
        assert_same_up_to_rounding(e.total, d.total, point)
        assert e.closure_error == pytest.approx(d.closure_error, abs=rounding_tolerance(d.total))
    u = torch.randn(3, m.arch.d_model, generator=torch.Generator().manual_seed(0))
    last = tr.reads[-1]
    assert_same_up_to_rounding(
        back.decompose(last, project_onto=u).contributions, tr.decompose(last, project_onto=u).contributions
    )
    # only the weights a decomposition reads are in the file
    assert back.weights.W_E is None and back.weights.W_Q is None and back.weights.W_U is None
    assert torch.equal(back.weights.W_O, m.weights.W_O)


@pytest.mark.slow
def test_saved_projection_mode_and_default_directions(tmp_path):
    m = tiny_model("llama")
    u = torch.randn(2, m.arch.d_model)
    tp = interp.trace(m, PROMPTS, project={"unembed": u, "L1.attn.q[H2]": u[:1]})
    back = ResidualTrace.load(tp.save(tmp_path / "p.safetensors"))
    for read in ("unembed", "L1.attn.q[H2]"):
        d, e = tp.decompose(read), back.decompose(read)
        assert d.labels == e.labels
        assert_same_up_to_rounding(e.contributions, d.contributions, read)
        assert_same_up_to_rounding(e.total, d.total, read)
    td = interp.trace(m, PROMPTS, project_onto=u)
    back = ResidualTrace.load(td.save(tmp_path / "d.safetensors"))
    assert_same_up_to_rounding(back.decompose("unembed").contributions, td.decompose("unembed").contributions)


def test_save_load_bad_input(tmp_path):
    m = tiny_model("gpt2")
    tr = interp.trace(m, "w1 w2")
    with pytest.raises(ExportError, match="path="):
        tr.save(tmp_path / "t.pt")
    with pytest.raises(ExportError, match="does not exist"):
        tr.save(tmp_path / "nowhere" / "t.safetensors")
    with pytest.raises(ResultFormatError, match="does not exist"):
        ResidualTrace.load(tmp_path / "missing.safetensors")
    other = tr.decompose("unembed").save(tmp_path / "d.safetensors")
    with pytest.raises(ResultFormatError, match="not a ResidualTrace"):
        ResidualTrace.load(other)
    good = tr.save(tmp_path / "t.safetensors")
    bad = tmp_path / "cut.safetensors"
    bad.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ResultFormatError, match="truncated"):
        ResidualTrace.load(bad)


def test_keep_bad_input():
    m = tiny_model("gpt2")
    with pytest.raises(ArgumentError, match="keep=.*'x'"):
        interp.trace(m, "w1 w2", keep=("patterns", "x"))
    with pytest.raises(ArgumentError, match="keep"):
        interp.trace(m, "w1 w2", keep=("patterns",), project={"unembed": torch.randn(1, m.arch.d_model)})
    tr = interp.trace(m, "w1 w2", keep="q")
    assert tr.q.shape[0] == m.arch.n_layers
    with pytest.raises(ArgumentError, match=r"keep=\('patterns',\)"):
        tr.patterns


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_attention_patterns_mask_padding(family, tmp_path):
    m = tiny_model(family)
    heads = ["L0.H1", "L1.H3", "L1.H0"]
    b = attention_patterns(m, PROMPTS, heads, prompt=None)
    assert isinstance(b, AttentionPatternBatch) and b.labels == heads and b.n_prompts == 3
    batch = as_batch(m, PROMPTS)
    attn, _ = _hf_pass(family, batch)
    for i in range(3):
        one = attention_patterns(m, PROMPTS, heads, prompt=i)
        assert torch.equal(b.prompt(i).patterns, one.patterns) and b.prompt(i).str_tokens == one.str_tokens
        r = _real(batch.attention_mask, i)
        for j, (l, h) in enumerate([(0, 1), (1, 3), (1, 0)]):
            torch.testing.assert_close(b.patterns[j, i][r][:, r], attn[l][i, h][r][:, r], atol=1e-6, rtol=1e-5)
            assert float(b.patterns[j, i][~r].abs().sum()) == 0.0  # padded queries
            assert float(b.patterns[j, i][:, ~r].abs().sum()) == 0.0  # padded keys
    assert torch.equal(b["L1.H3"], b.patterns[1])
    df = b.to_dataframe()
    assert len(df) == len(heads) * sum(int(n) ** 2 for n in batch.attention_mask.sum(1))
    assert b.plot(prompt=2).layout is not None
    back = AttentionPatternBatch.load(b.save(tmp_path / "b.safetensors"))
    assert torch.equal(back.patterns, b.patterns) and back.str_tokens == b.str_tokens
    with pytest.raises(ArgumentError, match="prompt=3"):
        b.prompt(3)
