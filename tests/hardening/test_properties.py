"""Property tests (hypothesis) for the identities of docs/math.md, on tiny random models of
every family (GPT-2 LayerNorm pre-norm, Llama RMSNorm + GQA + RoPE, NeoX parallel, BERT post-norm).

Costs (2-core CI): models are built once per (family, seed, n_layers) and cached for the module
(3 seeds × 3 depths × 4 families = 36 tiny models, ~0.1 s each); hypothesis varies the model among
those, the token ids, lengths, padding, answer/wrong tokens, positions, directions and matrices.
Every property runs ``N_EXAMPLES`` (= 50) examples; weight-only properties draw fresh random
matrices per example. References are always computed independently of the code under test
(a separately built Hugging Face copy of the model, materialised dense matrices, torch.kron).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from interp.attribution import attribute_direction, attribute_logits
from interp.errors import ArgumentError
from interp.stream import trace

from ._reference import dense_weights, hf_points, models, point_ref, rel, word_ids

N_EXAMPLES = 50
FAMILIES = ("gpt2", "llama", "neox", "bert")
DECODERS = ("gpt2", "llama", "neox")
VOCAB = 100
SEEDS = (0, 1, 2)
DEPTHS = (1, 2, 3)

PROPERTY = settings(
    max_examples=N_EXAMPLES,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# ---- strategies ----------------------------------------------------------------------------


@st.composite
def model_choice(draw, families=FAMILIES):
    return draw(st.sampled_from(families)), draw(st.sampled_from(SEEDS)), draw(st.sampled_from(DEPTHS))


@st.composite
def id_batch(draw, *, max_batch: int = 3, max_len: int = 9, padded: bool = True):
    """(tokens [b, n], right-padded attention mask [b, n]); pad slots hold arbitrary ids."""
    b = draw(st.integers(1, max_batch))
    lengths = [draw(st.integers(1, max_len)) for _ in range(b)]
    if not padded:
        lengths = [lengths[0]] * b
    n = max(lengths)
    ids = draw(st.lists(st.integers(0, VOCAB - 1), min_size=b * n, max_size=b * n))
    tokens = torch.tensor(ids, dtype=torch.long).reshape(b, n)
    mask = torch.zeros(b, n, dtype=torch.long)
    for i, k in enumerate(lengths):
        mask[i, :k] = 1
    return tokens, mask


@st.composite
def prompts(draw, *, max_batch: int = 3, max_len: int = 7):
    """Text prompts of the tiny tokenizer's words ('w0'...'w95'), with their word indices."""
    b = draw(st.integers(1, max_batch))
    words = [draw(st.lists(st.integers(0, 95), min_size=1, max_size=max_len)) for _ in range(b)]
    return [" ".join(f"w{w}" for w in ws) for ws in words], words


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


seeds = st.integers(0, 2**31 - 1)


# ---- 1. decomposition closure at every read and resid point (Math 1–3) ----------------------


def _check_closure_everywhere(family: str, seed: int, depth: int, tokens, mask, neurons: bool) -> None:
    model, hf = models(family, seed, depth)
    tr = trace(model, tokens, attention_mask=mask, neurons=neurons)
    pts, _ = hf_points(family, hf, tokens, mask)
    points = tr.reads + tr.resid_points
    assert len(points) >= 3 * depth
    for point in points:
        d = tr.decompose(point)
        ref = point_ref(pts, point)
        summed = d.contributions.sum(0)
        assert summed.shape == ref.shape, point
        # Σ terms against HF's own tensor at that point, at real positions only
        assert rel(summed, ref, mask) <= 1e-4, (family, point, rel(summed, ref, mask))
        # the reported closure is the real one
        assert d.relative_error <= 1e-4, (point, d.relative_error)


def _closure_test(family):
    @pytest.mark.slow
    @PROPERTY
    @given(m=model_choice(families=(family,)), batch=id_batch(), neurons=st.booleans())
    def test(m, batch, neurons):
        _check_closure_everywhere(*m, *batch, neurons)

    test.__name__ = f"test_decomposition_closes_at_every_point_{family}"
    return test


test_decomposition_closes_at_every_point_gpt2 = _closure_test("gpt2")
test_decomposition_closes_at_every_point_llama = _closure_test("llama")
test_decomposition_closes_at_every_point_neox = _closure_test("neox")
test_decomposition_closes_at_every_point_bert = _closure_test("bert")


# ---- 2. DLA closure for random answer / wrong / pos (Math 5) --------------------------------


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(families=DECODERS), p=prompts(), data=st.data())
def test_dla_terms_sum_to_hf_logit(m, p, data):
    family, seed, depth = m
    model, hf = models(family, seed, depth)
    texts, words = p
    b = len(texts)
    rows = [[1] + word_ids(ws) for ws in words]  # BOS + words (the tiny tokenizer)
    n = max(len(r) for r in rows)
    tokens = torch.zeros(b, n, dtype=torch.long)
    mask = torch.zeros(b, n, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    answer = data.draw(
        st.one_of(st.integers(0, VOCAB - 1), st.lists(st.integers(0, VOCAB - 1), min_size=b, max_size=b))
    )
    wrong = data.draw(
        st.one_of(st.none(), st.integers(0, VOCAB - 1), st.lists(st.integers(0, VOCAB - 1), min_size=b, max_size=b))
    )
    pos = data.draw(
        st.one_of(
            st.integers(-min(len(r) for r in rows), -1),
            st.lists(st.integers(0, 50), min_size=b, max_size=b).map(lambda xs: [x % len(r) for x, r in zip(xs, rows)]),
        )
    )
    unit = data.draw(st.sampled_from(("head", "component", "neuron")))
    ans = [answer] * b if isinstance(answer, int) else answer
    wr = None if wrong is None else ([wrong] * b if isinstance(wrong, int) else wrong)
    if wr is not None and any(x == y for x, y in zip(ans, wr)):  # logit[a] − logit[a]: refused, not 0 terms
        with pytest.raises(ArgumentError, match="the answer and the wrong token are the same token"):
            attribute_logits(model, texts, answer=answer, wrong=wrong, pos=pos, unit=unit)
        return
    a = attribute_logits(model, texts, answer=answer, wrong=wrong, pos=pos, unit=unit)

    with torch.no_grad():
        logits = hf(input_ids=tokens, attention_mask=mask).logits.double()
    lengths = [len(r) for r in rows]
    at = [(p_ if p_ >= 0 else lengths[i] + p_) for i, p_ in enumerate([pos] * b if isinstance(pos, int) else pos)]
    for i in range(b):
        row = logits[i, at[i]]
        ref = row[ans[i]] - (row[wr[i]] if wr is not None else 0.0)
        scale = float(row.abs().max())
        assert abs(float(a.values[:, i].double().sum()) - float(ref)) <= 1e-4 * scale, (i, unit)
        assert abs(float(a.total[i]) - float(ref)) <= 1e-4 * scale
    assert a.positions.tolist() == at
    assert a.values.shape == (len(a.labels), b)


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(), batch=id_batch(padded=False), seed=seeds, data=st.data())
def test_direction_attribution_sums_to_hf_hidden_state(m, batch, seed, data):
    family, mseed, depth = m
    model, hf = models(family, mseed, depth)
    tokens, _ = batch
    b, n = tokens.shape
    per_prompt = data.draw(st.booleans())
    u = torch.randn((b, model.arch.d_model) if per_prompt else (model.arch.d_model,), generator=gen(seed))
    pos = data.draw(st.one_of(st.just("mean"), st.integers(-n, n - 1)))
    res = attribute_direction(model, tokens, u, pos=pos)
    pts, _ = hf_points(family, hf, tokens, torch.ones_like(tokens))
    h = pts["final" if family == "bert" else "unembed"].double()  # [b, n, d]
    proj = (h * (u.double()[:, None] if per_prompt else u.double())).sum(-1)  # [b, n]
    ref = proj.mean(1) if pos == "mean" else proj[:, pos]
    scale = float(h.abs().max() * u.abs().sum())
    assert torch.allclose(res.values.double().sum(0), ref, atol=1e-5 * scale, rtol=0), (res.values.sum(0), ref)


# ---- 3. projected == full @ Uᵀ --------------------------------------------------------------


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(), batch=id_batch(), seed=seeds, data=st.data())
def test_projected_equals_full_times_directions(m, batch, seed, data):
    model, _ = models(*m)
    tokens, mask = batch
    tr = trace(model, tokens, attention_mask=mask)
    point = data.draw(st.sampled_from(tr.reads + tr.resid_points))
    k = data.draw(st.integers(1, 4))
    per_prompt = data.draw(st.booleans())
    d = model.arch.d_model
    U = torch.randn((tokens.shape[0], k, d) if per_prompt else (k, d), generator=gen(seed))
    full = tr.decompose(point)
    proj = tr.decompose(point, project_onto=U)
    assert proj.labels == full.labels
    Ub = U if per_prompt else U[None].expand(tokens.shape[0], k, d)
    expect = torch.einsum("tbpd,bkd->tbpk", full.contributions.double(), Ub.double())
    expect_total = torch.einsum("bpd,bkd->bpk", full.total.double(), Ub.double())
    scale = float(full.contributions.abs().max() * U.abs().sum(-1).max()) + 1e-30
    m_ = mask.bool()[None, :, :, None]
    assert float(((proj.contributions.double() - expect).abs() * m_).max()) <= 1e-5 * scale, point
    assert float(((proj.total.double() - expect_total).abs() * m_[0]).max()) <= 1e-5 * scale, point


# ---- 4. padding invariance -----------------------------------------------------------------


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(), batch=id_batch(max_batch=3), data=st.data())
def test_padding_invariance(m, batch, data):
    """A prompt's decomposition at its real positions does not depend on the other prompts of
    its batch, on how much padding it gets, or on the ids sitting in the padding."""
    model, _ = models(*m)
    tokens, mask = batch
    i = data.draw(st.integers(0, tokens.shape[0] - 1))
    k = int(mask[i].sum())
    alone = trace(model, tokens[i : i + 1, :k])
    together = trace(model, tokens, attention_mask=mask)
    points = alone.reads + alone.resid_points
    chosen = data.draw(st.lists(st.sampled_from(points), min_size=1, max_size=4, unique=True))
    real = torch.ones(1, k, dtype=torch.long)
    for point in chosen:
        a, b = alone.decompose(point), together.decompose(point)
        assert a.labels == b.labels
        assert rel(b.contributions[:, i : i + 1, :k], a.contributions, real) <= 1e-5, point
        assert rel(b.total[i : i + 1, :k], a.total, real) <= 1e-5, point


# =============================================================================================
# Circuits: pure weight maths (docs/math.md §6–12). References are dense matrices built here
# from the model's weights with the documented folding convention restated independently.
# =============================================================================================

import dataclasses  # noqa: E402

from interp.circuits import (  # noqa: E402
    Circuit,
    composition_scores,
    copying_scores,
    head_operator,
    ov_circuit,
    qk_circuit,
    rotate_residual,
    virtual_weights,
)
from bridge_capture import capture  # noqa: E402
from interp.stream._inputs import as_batch  # noqa: E402

F64 = torch.float64


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5) -> bool:
    a, b = a.double(), b.double()
    return float((a - b).abs().max()) <= rtol * max(float(b.abs().max()), 1e-30)


def _same_spectrum(x: torch.Tensor, y: torch.Tensor, tol: float) -> bool:
    """Two multisets of complex numbers agree: greedy nearest matching within tol·scale."""
    x, y = list(x.to(torch.complex128)), list(y.to(torch.complex128))
    if len(x) != len(y):
        return False
    scale = max([abs(complex(v)) for v in x + y] + [1e-30])
    for v in x:
        j = min(range(len(y)), key=lambda i: abs(complex(y[i] - v)))
        if abs(complex(y[j] - v)) > tol * scale:
            return False
        y.pop(j)
    return True


@st.composite
def head_choice(draw, families=FAMILIES):
    fam, seed, depth = draw(model_choice(families=families))
    model, _ = models(fam, seed, depth)
    return model, draw(st.integers(0, depth - 1)), draw(st.integers(0, model.arch.n_heads - 1))


# ---- 5. factored == materialised ------------------------------------------------------------


@pytest.mark.slow
@PROPERTY
@given(choice=head_choice(), fold=st.booleans(), which=st.sampled_from(["ov", "qk"]), seed=seeds)
def test_circuit_equals_materialised_product(choice, fold, which, seed):
    model, l, h = choice
    W_Q, W_K, W_V, W_O, W_E, W_U = dense_weights(model, fold)
    c = (ov_circuit if which == "ov" else qk_circuit)(model, l, h, fold_norms=fold)
    assert isinstance(c, Circuit)
    dense = W_V[l, h] @ W_O[l, h] if which == "ov" else W_Q[l, h] @ W_K[l, h].T  # [d, d]
    assert _close(c.AB, dense), (which, fold)
    # queries of the factored form against the dense matrix
    assert abs(float(c.norm()) - float(torch.linalg.matrix_norm(dense))) <= 1e-5 * float(
        torch.linalg.matrix_norm(dense)
    )
    S = torch.linalg.svdvals(dense)[: c.mdim]
    assert _close(c.S, S)
    v = torch.randn(model.arch.d_model, dtype=F64, generator=gen(seed))
    assert _close(c @ v.to(c.A.dtype), dense @ v)
    lam = torch.linalg.eigvals(dense)
    top = lam[lam.abs().argsort(descending=True)][: c.mdim]
    assert _same_spectrum(c.eigenvalues, top, 1e-3)
    # full circuits: W_E … W_U (decoders) / W_E … W_Eᵀ
    if model.arch.has_unembed:
        full = (ov_circuit if which == "ov" else qk_circuit)(model, l, h, full=True, fold_norms=fold)
        ref = W_E @ dense @ (W_U if which == "ov" else W_E.T)
        assert _close(full.AB, ref), ("full", which, fold)


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(), fold=st.booleans(), data=st.data())
def test_virtual_weight_equals_dense_product(m, fold, data):
    from interp.circuits import read_labels, write_labels

    model, _ = models(*m)
    a = model.arch
    src = data.draw(st.sampled_from(write_labels(model)))
    reads = [r for r in read_labels(model) if not r.endswith(".mlp.gate")]
    dst = data.draw(st.sampled_from(reads))
    try:
        c = virtual_weights(model, src, dst, fold_norms=fold)
    except ArgumentError:
        assume(False)  # dst does not read after src: refused (the bad-input suite checks that)
    W_Q, W_K, W_V, W_O, W_E, W_U = dense_weights(model, fold)
    w = model.weights
    ln = a.norm == "layernorm"
    d = a.d_model
    P = torch.eye(d, dtype=F64) - 1.0 / d
    if src == "embed":
        left = W_E
    elif src == "pos_embed":
        left = w.W_pos.double() @ (P if (fold and ln) else torch.eye(d, dtype=F64))
    elif src.endswith(".mlp"):
        left = w.W_out[int(src[1 : src.index(".")])].double() @ (P if (fold and ln) else torch.eye(d, dtype=F64))
    else:
        l, h = (int(x) for x in src[1:].split(".H"))
        left = W_O[l, h]
    if dst == "unembed":
        right = W_U
    elif dst.endswith(".mlp.in"):
        l = int(dst[1 : dst.index(".")])
        right = w.W_in[l].double()
        if fold and a.norm_placement == "pre":
            right = torch.diag(w.ln2_w[l].double()) @ right
            right = P @ right if ln else right
    else:
        l = int(dst[1 : dst.index(".")])
        kind, idx = dst[dst.index("attn.") + 5], int(dst[dst.index("[H") + 2 : -1])
        if kind == "q":
            right = W_Q[l, idx]
        else:  # k / v are indexed by KV head: take any query head of that group
            h = next(q for q in range(a.n_heads) if a.kv_head(q) == idx)
            right = (W_K if kind == "k" else W_V)[l, h]
    assert _close(c.AB, left @ right), (src, dst, fold)


# ---- 6. low rank: eigenvalues and norms against the materialised AB -------------------------


@PROPERTY
@given(n=st.integers(2, 12), data=st.data(), seed=seeds)
def test_low_rank_eigen_and_norm_identities(n, data, seed):
    k = data.draw(st.integers(1, n))
    g = gen(seed)
    A = torch.randn(n, k, dtype=F64, generator=g)
    B = torch.randn(k, n, dtype=F64, generator=g)
    c = Circuit(A, B)
    AB = A @ B
    lam_AB = torch.linalg.eigvals(AB)
    nonzero = lam_AB[lam_AB.abs().argsort(descending=True)][:k]
    # nonzero eig(AB) = eig(BA), which is what the factored form computes
    assert _same_spectrum(torch.linalg.eigvals(B @ A), nonzero, 1e-6)
    assert _same_spectrum(c.eigenvalues, nonzero, 1e-6)
    # the remaining n − k eigenvalues of AB are zero
    rest = lam_AB[lam_AB.abs().argsort(descending=True)][k:]
    if rest.numel():
        assert float(rest.abs().max()) <= 1e-8 * float(lam_AB.abs().max())
    # ‖AB‖_F² = tr(AᵀA BBᵀ), and the factored norm
    fro2 = float((AB**2).sum())
    assert abs(float(torch.trace(A.T @ A @ B @ B.T)) - fro2) <= 1e-9 * fro2
    assert abs(float(c.norm()) ** 2 - fro2) <= 1e-9 * fro2
    # traces of powers (Σλ, Σλ²) agree
    assert abs(float(torch.trace(B @ A)) - float(torch.trace(AB))) <= 1e-9 * float(AB.abs().sum())


# ---- 7. head as a tensor product: (A ⊗ W) vec(X) = vec(W X Aᵀ) --------------------------------


@PROPERTY
@given(pos=st.integers(1, 6), d=st.integers(1, 6), seed=seeds)
def test_kronecker_identity(pos, d, seed):
    g = gen(seed)
    A = torch.softmax(torch.randn(pos, pos, dtype=F64, generator=g), -1)
    W = torch.randn(d, d, dtype=F64, generator=g)
    Xc = torch.randn(d, pos, dtype=F64, generator=g)  # column convention: one column per position
    vec = lambda M: M.T.reshape(-1)  # noqa: E731  column-major vec
    assert torch.allclose(torch.kron(A, W) @ vec(Xc), vec(W @ Xc @ A.T), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@PROPERTY
@given(choice=head_choice(), batch=id_batch(max_batch=1, padded=False))
def test_head_operator_is_the_models_head(choice, batch):
    """A ⊗ W_O W_V applied to the head's real input, with the model's own pattern, gives the
    head's real write z_h W_O^h (captured from the forward pass); .matrix() agrees with .apply()."""
    model, l, h = choice
    tokens, _ = batch
    a = model.arch
    inp = f"blocks.{l}.ln1.hook_out" if a.norm_placement == "pre" else f"blocks.{l}.hook_resid_pre"
    names = [inp, f"blocks.{l}.attn.hook_pattern", f"blocks.{l}.attn.hook_z"]
    acts, _ = capture(model, as_batch(model, tokens), names)
    x, A, z = acts[inp][0], acts[names[1]][0, h], acts[names[2]][0, :, h]
    op = head_operator(model, l, h, A)
    real = z @ model.weights.W_O[l, h]  # [pos, d]
    assert _close(op.apply(x), real, 1e-4)
    lin = op.apply(x, value_bias=False)
    assert _close(op.matrix() @ x.reshape(-1), lin.reshape(-1), 1e-4)
    g = a.kv_head(h)
    assert _close(lin, A @ x @ model.weights.W_V[l, g] @ model.weights.W_O[l, h], 1e-4)


# ---- 8. composition scores: range, mask, scale invariance, dense reference -------------------


def _comp_dense(model, kind, fold, s, d):
    W_Q, W_K, W_V, W_O, *_ = dense_weights(model, fold)
    WA = W_V[s] @ W_O[s]
    WB = {"Q": W_Q[d] @ W_K[d].T, "K": W_K[d] @ W_Q[d].T, "V": W_V[d] @ W_O[d]}[kind]
    fro = torch.linalg.matrix_norm
    return float(fro(WA @ WB) / (fro(WA) * fro(WB)))


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(), kind=st.sampled_from("QKV"), fold=st.booleans(), data=st.data())
def test_composition_scores_range_mask_and_dense_value(m, kind, fold, data):
    model, _ = models(*m)
    L, H = model.arch.n_layers, model.arch.n_heads
    cs = composition_scores(model, kind, fold_norms=fold)
    s = cs.scores
    assert s.shape == (L, H, L, H)
    defined = torch.arange(L)[:, None, None, None] < torch.arange(L)[None, None, :, None]
    assert torch.equal(~torch.isnan(s), defined.expand(L, H, L, H))
    vals = s[defined.expand(L, H, L, H)]
    assert bool(((vals >= 0) & (vals <= 1 + 1e-6)).all())
    if L > 1:
        l1 = data.draw(st.integers(0, L - 2))
        l2 = data.draw(st.integers(l1 + 1, L - 1))
        h1, h2 = data.draw(st.integers(0, H - 1)), data.draw(st.integers(0, H - 1))
        ref = _comp_dense(model, kind, fold, (l1, h1), (l2, h2))
        assert abs(float(s[l1, h1, l2, h2]) - ref) <= 1e-5, (kind, fold, ref)


def _scaled(model, scales: dict[str, torch.Tensor]):
    """A model copy whose weights are multiplied per layer/head by the given factors."""
    w = model.weights
    upd = {}
    for name, c in scales.items():
        W = getattr(w, name)
        upd[name] = W * c.to(W.dtype).reshape(*c.shape, *([1] * (W.ndim - c.ndim)))
    return dataclasses.replace(model, weights=w.with_updates(**upd))


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(), kind=st.sampled_from("QKV"), fold=st.booleans(), seed=seeds)
def test_composition_scores_are_scale_invariant(m, kind, fold, seed):
    model, _ = models(*m)
    a = model.arch
    g = gen(seed)

    def factors(*shape):  # nonzero, either sign, over three orders of magnitude
        mag = 10 ** (torch.rand(*shape, generator=g) * 3 - 1.5)
        return mag * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)

    scaled = _scaled(
        model,
        {
            "W_Q": factors(a.n_layers, a.n_heads),
            "W_K": factors(a.n_layers, a.n_kv_heads),
            "W_V": factors(a.n_layers, a.n_kv_heads),
            "W_O": factors(a.n_layers, a.n_heads),
        },
    )
    s0 = composition_scores(model, kind, fold_norms=fold).scores
    s1 = composition_scores(scaled, kind, fold_norms=fold).scores
    assert torch.allclose(s0, s1, rtol=1e-4, atol=1e-6, equal_nan=True)


# ---- 9. copying scores: ±I and the dense eigenvalues ---------------------------------------


@PROPERTY
@given(m=model_choice(families=DECODERS), sign=st.sampled_from([1.0, -1.0]), seed=seeds, data=st.data())
def test_copying_score_of_plus_minus_identity(m, sign, seed, data):
    """With W_U = W_Eᵀ and W_O^h = ±W_V^gᵀ, the full OV circuit ±(W_E W_V)(W_E W_V)ᵀ is ±PSD:
    every eigenvalue has the same sign, so the copying score is exactly ±1."""
    model, _ = models(*m)
    a, w = model.arch, model.weights
    l = data.draw(st.integers(0, a.n_layers - 1))
    h = data.draw(st.integers(0, a.n_heads - 1))
    g = gen(seed)
    W_V = w.W_V.clone()
    W_V[l, a.kv_head(h)] = torch.randn(a.d_model, a.d_head, generator=g)
    W_O = w.W_O.clone()
    W_O[l, h] = sign * W_V[l, a.kv_head(h)].T
    model2 = dataclasses.replace(model, weights=w.with_updates(W_V=W_V, W_O=W_O, W_U=w.W_E.T.clone()))
    score = copying_scores(model2, fold_norms=False).scores[l, h]
    assert abs(float(score) - sign) <= 1e-5, float(score)


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(families=DECODERS), fold=st.booleans())
def test_copying_scores_match_dense_full_ov_eigenvalues(m, fold):
    model, _ = models(*m)
    W_Q, W_K, W_V, W_O, W_E, W_U = dense_weights(model, fold)
    cs = copying_scores(model, fold_norms=fold).scores
    a = model.arch
    for l in range(a.n_layers):
        for h in range(a.n_heads):
            lam = torch.linalg.eigvals(W_E @ W_V[l, h] @ W_O[l, h] @ W_U)  # [d_vocab] (vocab 100)
            ref = float(lam.real.sum() / lam.abs().sum())
            assert abs(float(cs[l, h]) - ref) <= 1e-4, (l, h, ref)
            assert -1 - 1e-6 <= float(cs[l, h]) <= 1 + 1e-6


# ---- 10. head-basis gauge invariance --------------------------------------------------------


def _well_conditioned(n: int, g: torch.Generator) -> torch.Tensor:
    Q1, _ = torch.linalg.qr(torch.randn(n, n, dtype=F64, generator=g))
    Q2, _ = torch.linalg.qr(torch.randn(n, n, dtype=F64, generator=g))
    s = 2 ** (torch.rand(n, generator=g, dtype=F64) * 2 - 1)  # singular values in [0.5, 2]
    return Q1 @ torch.diag(s) @ Q2


@pytest.mark.slow
@PROPERTY
@given(m=model_choice(), seed=seeds, data=st.data())
def test_head_basis_gauge_invariance(m, seed, data):
    """(W_V M, M⁻¹ W_O) for a KV head and every query head reading it — and (W_Q N, W_K N⁻ᵀ) —
    leave OV and QK circuits, all composition scores and copying scores unchanged."""
    model, _ = models(*m)
    a, w = model.arch, model.weights
    l = data.draw(st.integers(0, a.n_layers - 1))
    kvh = data.draw(st.integers(0, a.n_kv_heads - 1))
    group = [h for h in range(a.n_heads) if a.kv_head(h) == kvh]
    g = gen(seed)
    M, N = _well_conditioned(a.d_head, g), _well_conditioned(a.d_head, g)
    dt = w.W_V.dtype
    W_V, b_V, W_O, W_Q, W_K = (t.clone() for t in (w.W_V, w.b_V, w.W_O, w.W_Q, w.W_K))
    W_V[l, kvh] = (W_V[l, kvh].double() @ M).to(dt)
    b_V[l, kvh] = (b_V[l, kvh].double() @ M).to(dt)
    W_K[l, kvh] = (W_K[l, kvh].double() @ torch.linalg.inv(N).T).to(dt)
    for h in group:
        W_O[l, h] = (torch.linalg.inv(M) @ W_O[l, h].double()).to(dt)
        W_Q[l, h] = (W_Q[l, h].double() @ N).to(dt)
    gauged = dataclasses.replace(model, weights=w.with_updates(W_V=W_V, b_V=b_V, W_O=W_O, W_Q=W_Q, W_K=W_K))
    for h in group:
        for fn in (ov_circuit, qk_circuit):
            assert _close(fn(gauged, l, h).AB, fn(model, l, h).AB, 1e-4), (fn.__name__, h)
    for kind in "QKV":
        s0, s1 = composition_scores(model, kind).scores, composition_scores(gauged, kind).scores
        assert torch.allclose(s0, s1, rtol=1e-4, atol=1e-5, equal_nan=True), kind
    if a.has_unembed:
        assert torch.allclose(copying_scores(model).scores, copying_scores(gauged).scores, atol=1e-5)


# ---- 11. residual-stream rotation invariance ------------------------------------------------


def _orthogonal(d: int, g: torch.Generator, *, fix_ones: bool) -> torch.Tensor:
    """A random orthogonal R (float64); with fix_ones, R·1 = 1 (built here, not by interp)."""
    if not fix_ones:
        Q, _ = torch.linalg.qr(torch.randn(d, d, dtype=F64, generator=g))
        return Q
    # an orthonormal basis whose first vector is 1/√d, and a rotation of the other d−1 directions
    B = torch.randn(d, d, dtype=F64, generator=g)
    B[:, 0] = 1.0
    U, _ = torch.linalg.qr(B)
    U[:, 0] = U[:, 0].sign() * U[:, 0]  # +1/√d
    Qs, _ = torch.linalg.qr(torch.randn(d - 1, d - 1, dtype=F64, generator=g))
    return U @ torch.block_diag(torch.ones(1, 1, dtype=F64), Qs) @ U.T


@pytest.mark.slow
@settings(PROPERTY)
@given(m=model_choice(families=DECODERS), seed=seeds, batch=id_batch(max_batch=2, padded=False), data=st.data())
def test_rotation_invariance(m, seed, batch, data):
    """x ↦ x R: logits, DLA terms, composition and copying scores are unchanged, and the residual
    stream of the rotated model is the original's times R (RMSNorm: any orthogonal R; LayerNorm:
    R·1 = 1)."""
    model, _ = models(*m)
    a = model.arch
    R = _orthogonal(a.d_model, gen(seed), fix_ones=a.norm == "layernorm")
    assert float((R @ torch.ones(a.d_model, dtype=F64) - 1).abs().max()) < 1e-9 or a.norm == "rmsnorm"
    rot = rotate_residual(model, R.to(model.dtype))
    tokens, _ = batch
    with torch.no_grad():
        l0, l1 = model.bridge(tokens), rot.bridge(tokens)
    assert _close(l1, l0, 1e-4)
    point = data.draw(
        st.sampled_from([f"blocks.{l}.hook_resid_{w}" for l in range(a.n_layers) for w in ("pre", "post")])
    )
    t0 = trace(model, tokens).decompose(point).total.double()
    t1 = trace(rot, tokens).decompose(point).total.double()
    assert _close(t1, t0 @ R, 1e-4), point
    ans = data.draw(st.integers(0, VOCAB - 1))
    d0 = attribute_logits(model, tokens, answer=ans, wrong=(ans + 1) % VOCAB)
    d1 = attribute_logits(rot, tokens, answer=ans, wrong=(ans + 1) % VOCAB)
    scale = float(d0.values.abs().max())
    for lab in d0.labels:
        if lab in ("final_bias", "unembed_bias"):
            continue  # the final norm's β moves into the unembedding bias when gains are folded
        assert abs(d1[lab].double() - d0[lab].double()).max() <= 1e-4 * scale, lab
    moved = lambda r: sum(
        (r[k].double() for k in ("final_bias", "unembed_bias") if k in r.labels),  # noqa: E731
        torch.zeros(tokens.shape[0], dtype=F64),
    )
    assert float((moved(d1) - moved(d0)).abs().max()) <= 1e-4 * scale
    for kind in "QKV":
        assert torch.allclose(
            composition_scores(model, kind).scores,
            composition_scores(rot, kind).scores,
            rtol=1e-3,
            atol=1e-5,
            equal_nan=True,
        ), kind
    assert torch.allclose(copying_scores(model).scores, copying_scores(rot).scores, atol=1e-4)


# ---- 12. path expansion sums to the logits (attention-only toys; docs/math.md §14) -----------

import functools  # noqa: E402

from interp.circuits._path_expansion import path_expansion  # noqa: E402
from interp.toy import ToyConfig, build_toy  # noqa: E402


@functools.lru_cache(maxsize=64)
def _toy(n_layers, n_heads, n_kv_heads, d_head, d_model, d_vocab, norm, positional, seed):
    cfg = ToyConfig(
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_head=d_head,
        d_model=d_model,
        d_vocab=d_vocab,
        n_ctx=16,
        norm=norm,
        positional=positional,
        seed=seed,
    )
    return build_toy(cfg, name=f"toy-{seed}")


@st.composite
def toys(draw):
    n_heads = draw(st.sampled_from([1, 2, 4]))
    return _toy(
        draw(st.integers(1, 3)),
        n_heads,
        draw(st.sampled_from([k for k in (1, 2, 4) if n_heads % k == 0])),
        draw(st.sampled_from([4, 8])),
        draw(st.sampled_from([8, 16])),
        draw(st.integers(8, 30)),
        draw(st.sampled_from(["none", "layernorm", "rmsnorm"])),
        draw(st.sampled_from(["learned", "rotary", "none"])),
        draw(st.integers(0, 3)),
    )


@pytest.mark.slow
@PROPERTY
@given(model=toys(), data=st.data())
def test_path_expansion_sums_to_the_logits(model, data):
    a = model.arch
    b, n = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    tokens = torch.tensor(data.draw(st.lists(st.integers(0, a.d_vocab - 1), min_size=b * n, max_size=b * n))).reshape(
        b, n
    )
    answer = data.draw(st.lists(st.integers(0, a.d_vocab - 1), min_size=b, max_size=b))
    pos = data.draw(st.integers(-n, n - 1))
    pe = path_expansion(model, tokens, order=a.n_layers, answer=answer, pos=pos)
    with torch.no_grad():
        logits = model.bridge(tokens).double()  # the model's own forward, no hooks
    scale = float(logits.abs().max())
    recon = pe.contributions.double().sum(0) @ model.weights.W_U.double() + model.weights.b_U.double()
    assert float((recon - logits).abs().max()) <= 1e-4 * scale  # every position, every token
    rows = torch.arange(b)
    own = logits[rows, pos % n, torch.tensor(answer)]
    assert float((pe.values.double().sum(0) + pe.unembed_bias.double() - own).abs().max()) <= 1e-4 * scale
    assert max(pe.orders) == a.n_layers and len(pe.labels) == len(set(pe.labels)) == pe.values.shape[0]
    for lab, k in zip(pe.labels, pe.orders):
        assert lab.count("→L") == k, lab


@pytest.mark.slow
@PROPERTY
@given(seed=st.integers(0, 3), positional=st.sampled_from(["learned", "rotary"]), data=st.data())
def test_path_expansion_virtual_head_term(seed, positional, data):
    """Without norms the order-2 term is A^{h2} A^{h1} X₀ W_OV^{h1} W_OV^{h2}: checked against the
    model's own patterns (captured by transformer-lens) and the weights."""
    model = _toy(2, 2, 2, 4, 8, 12, "none", positional, seed)
    w = model.weights
    n = data.draw(st.integers(2, 8))
    tokens = torch.tensor(data.draw(st.lists(st.integers(0, 11), min_size=n, max_size=n)))[None]
    h1, h2 = data.draw(st.integers(0, 1)), data.draw(st.integers(0, 1))
    pe = path_expansion(model, tokens, order=2)
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(tokens, names_filter=lambda s: s.endswith("hook_pattern"))
    A1, A2 = cache["blocks.0.attn.hook_pattern"][0, h1].double(), cache["blocks.1.attn.hook_pattern"][0, h2].double()
    X0 = w.W_E[tokens[0]].double()
    ov = lambda l, h: w.W_V[l, h].double() @ w.W_O[l, h].double()  # noqa: E731
    ref = A2 @ A1 @ X0 @ ov(0, h1) @ ov(1, h2)
    got = pe.contributions[pe.labels.index(f"embed→L0.H{h1}→L1.H{h2}")][0].double()
    assert _close(got, ref, 1e-4)


@pytest.mark.slow
@PROPERTY
@given(model=toys(), data=st.data())
def test_toy_trace_closes_at_every_point(model, data):
    """The stream decomposition on attention-only toys (no MLP, optional norms): every resid point
    against transformer-lens's own cache, and the unembed read against the model's logits."""
    a = model.arch
    b, n = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8))
    tokens = torch.tensor(data.draw(st.lists(st.integers(0, a.d_vocab - 1), min_size=b * n, max_size=b * n))).reshape(
        b, n
    )
    tr = trace(model, tokens)
    with torch.no_grad():
        logits, cache = model.bridge.run_with_cache(tokens, names_filter=lambda s: "hook_resid" in s)
    ones = torch.ones_like(tokens)
    for point in tr.resid_points:
        assert rel(tr.decompose(point).contributions.sum(0), cache[point], ones) <= 1e-4, point
    for point in tr.reads:
        assert tr.decompose(point).relative_error <= 1e-4, point
    u = tr.decompose("unembed").contributions.double().sum(0) @ model.weights.W_U.double() + model.weights.b_U.double()
    assert rel(u, logits, ones) <= 1e-4
