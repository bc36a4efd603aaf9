"""OV/QK circuits against materialised products, GQA against repeat_interleave, RoPE against the model."""

import pytest
import torch
from transformer_lens import FactoredMatrix

import interp.circuits as C
from circuits_reference import capture
from interp.circuits.internal import POSITION_NOTE
from interp.errors import ArgumentError, MemoryCapError
from interp.models import model_from_hf_unchecked as model_from_hf
from tiny_models import tiny_hf_model, tiny_tokenizer

TOL = 1e-5


def _fold_ref(model, W, gain):
    """Independent fold: LayerNorm -> P diag(γ) W (centred over d_model), RMSNorm -> diag(γ) W, post-norm: W."""
    a = model.arch
    if a.norm_placement == "post" or a.norm == "none":
        return W
    d = a.d_model
    M = torch.diag(gain) @ W
    if a.norm == "layernorm":
        P = torch.eye(d) - torch.ones(d, d) / d
        M = P @ M
    return M


def _centre_ref(model, W):
    if model.arch.norm != "layernorm":
        return W
    d = model.arch.d_model
    return W @ (torch.eye(d) - torch.ones(d, d) / d)


def _kv_expanded(model, W):
    """Reference GQA mapping: repeat each KV head for its group of query heads."""
    a = model.arch
    return W.repeat_interleave(a.n_heads // a.n_kv_heads, dim=1)


@pytest.mark.parametrize("fold", [True, False])
def test_ov_qk_equal_materialised_products(family_model, fold):
    m, w = family_model, family_model.weights
    W_K, W_V = _kv_expanded(m, w.W_K), _kv_expanded(m, w.W_V)
    for layer in range(m.arch.n_layers):
        g1 = w.ln1_w[layer]
        for h in range(m.arch.n_heads):
            Wq = _fold_ref(m, w.W_Q[layer, h], g1) if fold else w.W_Q[layer, h]
            Wk = _fold_ref(m, W_K[layer, h], g1) if fold else W_K[layer, h]
            Wv = _fold_ref(m, W_V[layer, h], g1) if fold else W_V[layer, h]
            Wo = _centre_ref(m, w.W_O[layer, h]) if fold else w.W_O[layer, h]
            ov = C.ov_circuit(m, layer, h, fold_norms=fold)
            qk = C.qk_circuit(m, layer, h, fold_norms=fold)
            assert isinstance(ov, FactoredMatrix) and ov.mdim == m.arch.d_head
            torch.testing.assert_close(ov.AB, Wv @ Wo, atol=TOL, rtol=TOL)
            torch.testing.assert_close(qk.AB, Wq @ Wk.T, atol=TOL, rtol=TOL)


def test_full_circuits_equal_materialised(tiny_models):
    for fam in ("gpt2", "llama", "neox"):
        m, w = tiny_models[fam], tiny_models[fam].weights
        layer, h = 1, 3
        g = m.arch.kv_head(h)
        W_E = _centre_ref(m, w.W_E)
        W_U = _fold_ref(m, w.W_U, w.lnf_w)
        Wv = _fold_ref(m, w.W_V[layer, g], w.ln1_w[layer])
        Wq = _fold_ref(m, w.W_Q[layer, h], w.ln1_w[layer])
        Wk = _fold_ref(m, w.W_K[layer, g], w.ln1_w[layer])
        Wo = _centre_ref(m, w.W_O[layer, h])
        torch.testing.assert_close(C.ov_circuit(m, layer, h, full=True).AB, W_E @ Wv @ Wo @ W_U, atol=TOL, rtol=TOL)
        torch.testing.assert_close(C.qk_circuit(m, layer, h, full=True).AB, W_E @ Wq @ Wk.T @ W_E.T, atol=TOL, rtol=TOL)


def test_gqa_mapping_matches_repeat_interleave(tiny_models):
    m, w = tiny_models["llama"], tiny_models["llama"].weights
    assert m.arch.n_kv_heads < m.arch.n_heads  # the tiny llama really is GQA (4 q / 2 kv)
    W_K, W_V = _kv_expanded(m, w.W_K), _kv_expanded(m, w.W_V)
    for h in range(m.arch.n_heads):
        ov = C.ov_circuit(m, 0, h, fold_norms=False)
        qk = C.qk_circuit(m, 0, h, fold_norms=False)
        assert torch.equal(ov.A, W_V[0, h]) and torch.equal(qk.B, W_K[0, h].T)
        assert ov.meta["kv_head"] == h // 2


def test_eigenvalues_of_factored_product_are_the_nonzero_eigenvalues_of_AB(family_model):
    m = family_model
    ov = C.ov_circuit(m, 1, 2)
    fm = ov.eigenvalues  # from the d_head × d_head BA
    dense = torch.linalg.eigvals(ov.A.double() @ ov.B.double())  # [d_model] eigenvalues of AB; d_model − d_head ≈ 0
    nz = dense[dense.abs() > 1e-8 * dense.abs().max()]
    assert nz.shape[0] == m.arch.d_head
    key = lambda z: sorted(z.tolist(), key=lambda c: (round(c.real, 4), round(c.imag, 4)))  # noqa: E731
    for a, b in zip(key(fm.to(torch.complex128)), key(nz)):
        assert abs(a - b) < 1e-4


def test_memory_cap_on_materialisation(tiny_models):
    m = tiny_models["llama"]
    ov = C.ov_circuit(m, 0, 0, full=True, max_bytes=1000)  # 100 × 100 floats = 40 kB
    with pytest.raises(MemoryCapError, match="max_bytes=1000") as e:
        ov.AB
    assert "ov_diagonal_stats" in str(e.value) and "[100, 100]" in str(e.value)
    assert ov.materialize(max_bytes=1 << 20).shape == (100, 100)


def test_rotary_note_and_rel_pos_errors(tiny_models):
    assert C.qk_circuit(tiny_models["llama"], 0, 0).note == POSITION_NOTE
    assert C.qk_circuit(tiny_models["neox"], 0, 0).note == POSITION_NOTE
    assert C.qk_circuit(tiny_models["llama"], 0, 0, rel_pos=2).note == ""
    assert C.qk_circuit(tiny_models["gpt2"], 0, 0).note == ""
    with pytest.raises(ArgumentError, match="rel_pos.*not rotary"):
        C.qk_circuit(tiny_models["gpt2"], 0, 0, rel_pos=1)
    with pytest.raises(ArgumentError, match="rel_pos"):
        C.qk_circuit(tiny_models["llama"], 0, 0, rel_pos=1.5)


@pytest.mark.parametrize("bad", [dict(layer=2), dict(layer=-1), dict(head=4), dict(layer=True), dict(head="0")])
def test_layer_head_out_of_range(tiny_models, bad):
    args = dict(layer=0, head=0) | bad
    name = next(iter(bad))
    with pytest.raises(ArgumentError, match=name):
        C.ov_circuit(tiny_models["llama"], args["layer"], args["head"])
    with pytest.raises(ArgumentError, match=name):
        C.qk_circuit(tiny_models["llama"], args["layer"], args["head"])


def _neox_without_qk_bias():
    hf = tiny_hf_model("neox")
    with torch.no_grad():  # zero the q and k biases so the score is exactly x QK_Δ xᵀ / sqrt(d_head)
        for layer in hf.gpt_neox.layers:
            b = layer.attention.query_key_value.bias.view(4, 3, 8)  # [heads, (q|k|v), d_head]
            b[:, :2] = 0
    return model_from_hf(hf, tiny_tokenizer(), name="tiny-neox-nobias")


@pytest.mark.parametrize("which", ["llama", "neox"])
def test_rel_pos_circuit_reproduces_the_models_attention_scores(tiny_models, which):
    """x_i W_Q M_Δ W_Kᵀ x_jᵀ / sqrt(d_head) == the bridge's hook_attn_scores[i, j] for j = i − Δ."""
    m = tiny_models["llama"] if which == "llama" else _neox_without_qk_bias()
    assert which != "neox" or m.arch.rotary_dim < m.arch.d_head  # partial rotary is exercised
    toks = torch.tensor([[1, 17, 42, 5, 63, 8, 99, 23, 4, 71, 36, 12]])
    layer = 1
    cap = capture(m, toks, [f"blocks.{layer}.ln1.hook_out", f"blocks.{layer}.attn.hook_attn_scores"])
    x = cap[f"blocks.{layer}.ln1.hook_out"][0]  # [pos, d_model], the normalised input
    scores = cap[f"blocks.{layer}.attn.hook_attn_scores"][0]  # [head, q, k]
    n = toks.shape[1]
    for h in range(m.arch.n_heads):
        for delta in (0, 1, 3, 7):
            qk = C.qk_circuit(m, layer, h, rel_pos=delta, fold_norms=False).AB
            i = torch.arange(delta, n)
            got = ((x[i] @ qk) * x[i - delta]).sum(-1) / m.arch.d_head**0.5
            torch.testing.assert_close(got, scores[h, i, i - delta], atol=2e-5, rtol=1e-4)
        # and the rotation matters: the Δ=0 circuit does not give the Δ=3 scores
        qk0 = C.qk_circuit(m, layer, h, fold_norms=False).AB
        i = torch.arange(3, n)
        wrong = ((x[i] @ qk0) * x[i - 3]).sum(-1) / m.arch.d_head**0.5
        assert (wrong - scores[h, i, i - 3]).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["qwen3", "gemma3_text", "olmo2", "olmoe"])
def test_qk_norm_circuit_reproduces_the_scores_up_to_the_frozen_scales(family):
    """QK-norm (Qwen 3, Gemma 3): with σ of ln1 and of each head's q and k frozen, the score is
    x_i W_Q' M_Δ W_K'ᵀ x_jᵀ · scale / (σ1_i σ1_j σq_i σk_j), W_Q' = diag(γ1) W_Q diag(g_q) (the folded circuit),
    against the bridge's hook_attn_scores of the HF model (Gemma 3: its layer's own rotary table).
    OLMo 2: no ln1 (σ1 = 1, x the raw stream), σq_i one scale of the whole projected query at i (all heads),
    σk_j of the whole projected key, and g_q^h head h's slice of the projection-wide gain."""
    from tiny_models import tiny_model

    m = tiny_model(family, n_layers=2)
    toks = torch.tensor([[1, 17, 42, 5, 63, 8, 99, 23, 4, 71, 36, 12]])
    layer = 1
    pre = m.arch.pre_norms
    names = [
        f"blocks.{layer}.hook_resid_pre",
        f"blocks.{layer}.ln1.hook_scale",
        f"blocks.{layer}.attn.hook_q",
        f"blocks.{layer}.attn.hook_k",
        f"blocks.{layer}.attn.hook_attn_scores",
    ]
    cap = capture(m, toks, names if pre else [n for n in names if "ln1" not in n])
    x = cap[names[0]][0] / cap[names[1]][0] if pre else cap[names[0]][0]  # [pos, d]: x / σ1 (RMSNorm, no centring)
    q, k = cap[names[2]][0], cap[names[3]][0]  # [pos, heads, d_head] before the QK-norm
    over = (-1,) if m.arch.qk_norm_scope == "head" else (-2, -1)  # OLMo 2: one σ over every head
    sq = torch.sqrt(q.pow(2).mean(over) + m.arch.norm_eps).reshape(len(q), -1).expand(-1, m.arch.n_heads)  # [pos, H]
    sk = torch.sqrt(k.pow(2).mean(over) + m.arch.norm_eps).reshape(len(k), -1).expand(-1, m.arch.n_kv_heads)
    scores = cap[names[4]][0]
    n = toks.shape[1]
    for h in range(m.arch.n_heads):
        g = m.arch.kv_head(h)
        for delta in (0, 2):
            qk = C.qk_circuit(m, layer, h, rel_pos=delta).AB
            i = torch.arange(delta, n)
            got = ((x[i] @ qk) * x[i - delta]).sum(-1) * m.arch.attn_scale(layer) / (sq[i, h] * sk[i - delta, g])
            torch.testing.assert_close(got, scores[h, i, i - delta], atol=2e-5, rtol=1e-4)
