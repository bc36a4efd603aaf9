"""EAP and EAP-IG against an independent per-edge computation, the graph, and the identities (docs/math.md §22-24).

The reference (tests/edges/_reference.py) rebuilds every reader's input from the writes with the HF
modules' own parameters; its per-edge derivatives come from autograd with one coefficient per edge.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import interp
from interp.causal import Direction, LogitDiff
from interp.edges import circuit_graph, edge_attribution
from interp.stream.internal import as_batch
from tiny_models import hooked_forward

from .conftest import CLEAN, CORRUPT, direction

FAMILIES = ("gpt2", "llama", "neox", "bert")


def _metric(model, fam):
    return Direction(direction(model.arch.d_model, model.dtype)) if fam == "bert" else LogitDiff("w12", "w13")


def _batches(model):
    return as_batch(model, CLEAN), as_batch(model, CORRUPT)


def _hf_metric(ref, fam, batch):
    """The metric from the HF model's own forward (logits / last hidden state)."""
    hf = ref.hf
    with torch.no_grad():
        if fam == "bert":
            h = hf.bert(batch.tokens, attention_mask=batch.attention_mask).last_hidden_state
            m = batch.attention_mask.to(h.dtype)
            return ((h * m[..., None]).sum(1) / m.sum(1, keepdim=True)) @ ref.direction
        logits = hf(batch.tokens, attention_mask=batch.attention_mask).logits
    last = batch.attention_mask.sum(1) - 1
    y = logits[torch.arange(len(last)), last]
    a, w = (ref.tok(t, add_special_tokens=False)["input_ids"][0] for t in ("w12", "w13"))
    return y[:, a] - y[:, w]


def _ref_writes(ref, batch):
    with torch.no_grad():
        return ref.run(batch.tokens, batch.attention_mask)


def _ref_eap(ref, model, *, frozen=False):
    bc, bk = _batches(model)
    _, wk = _ref_writes(ref, bk)
    _, wc = _ref_writes(ref, bc)
    delta = {w: wc[w] - wk[w] for w in wc}  # clean − corrupt: positive = supports M
    beta = torch.zeros(len(ref.writers), len(ref.readers), dtype=model.dtype, requires_grad=True)
    M, _ = ref.run(bc.tokens, bc.attention_mask, beta=beta, delta=delta, frozen=frozen)
    (g,) = torch.autograd.grad(M.mean(), beta)
    return ref.per_edge(g)


def _close(scores, ref_vals, rtol, atol_frac):
    got = torch.tensor([float(scores[e]) for e in ref_vals], dtype=torch.float64)
    want = torch.tensor(list(ref_vals.values()), dtype=torch.float64)
    scale = float(want.abs().max())
    assert scale > 0
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol_frac * scale)


@pytest.mark.parametrize("fam", FAMILIES)
def test_reference_is_the_model(pairs64, fam):
    """The reference with no edge touched is the HF model (so what it differentiates is the model)."""
    model, ref = pairs64[fam]
    for batch in _batches(model):
        M, _ = _ref_writes(ref, batch)
        torch.testing.assert_close(M, _hf_metric(ref, fam, batch), rtol=1e-6, atol=1e-6 if fam == "llama" else 1e-10)


@pytest.mark.parametrize("fam", FAMILIES)
def test_graph_is_every_writer_to_every_later_reader(pairs64, fam):
    model, ref = pairs64[fam]
    g = circuit_graph(model)
    assert set(g.edges) == set(ref.edges()) and len(g.edges) == len(ref.edges())
    assert g.n_edges == len(g) and str(g).count("edges") == 1 and f"{g.n_edges:,} edges" in repr(g)
    assert ("L0.H1→L0.mlp.in" in g) == (fam != "neox")  # a parallel block's MLP does not read its own heads
    assert "L1.H0→L0.attn.q[H0]" not in g and "L1.H0→L1.attn.q[H0]" not in g
    if fam == "llama":  # GQA: one k and one v reader per KV head
        assert "L0.H1→L1.attn.k[H1]" in g and "L0.H1→L1.attn.k[H2]" not in g


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("scale", ["recomputed", "frozen"])
def test_eap_equals_per_edge_autograd(pairs64, fam, scale):
    """score(w→r) = ∂M/∂β_wr of the reference, where only r's input moves by β_wr·(a_w(clean) − a_w(corrupt))."""
    model, ref = pairs64[fam]
    s = edge_attribution(model, CLEAN, CORRUPT, metric=_metric(model, fam), method="eap", scale=scale, progress=False)
    want = _ref_eap(ref, model, frozen=scale == "frozen")
    assert set(want) == set(s.edges)
    _close(s, want, rtol=1e-6, atol_frac=1e-7 if fam != "llama" else 1e-5)


@pytest.mark.parametrize("fam", FAMILIES)
def test_eap_ig_inputs_equals_the_averaged_reference(pairs64, fam):
    """EAP-IG at the inputs: Δa of the plain runs times the gradient averaged over α = k/m, the token
    embedding interpolated — the reference differentiated at each point."""
    model, ref = pairs64[fam]
    m = 3
    s = edge_attribution(model, CLEAN, CORRUPT, metric=_metric(model, fam), method="eap-ig", ig_steps=m, progress=False)
    bc, bk = _batches(model)
    _, wk = _ref_writes(ref, bk)
    _, wc = _ref_writes(ref, bc)
    delta = {w: wc[w] - wk[w] for w in wc}  # clean − corrupt: positive = supports M
    total = None
    for k in range(1, m + 1):
        beta = torch.zeros(len(ref.writers), len(ref.readers), dtype=model.dtype, requires_grad=True)
        M, _ = ref.run(bc.tokens, bc.attention_mask, beta=beta, delta=delta, embed_mix=(k / m, wk["embed"]))
        (g,) = torch.autograd.grad(M.mean(), beta)
        total = g if total is None else total + g
    _close(s, ref.per_edge(total / m), rtol=1e-6, atol_frac=1e-7 if fam != "llama" else 1e-5)


@pytest.mark.parametrize("fam", ["llama", "bert"])
def test_eap_ig_activations_equals_the_mask_gradient(pairs64, fam):
    """EAP-IG at the activations: every write mixed α a_w + (1 − α) ã_w; the score is ∂M/∂coef averaged
    (coef the reference's per-edge mix toward the corrupt write, 1 − α on every edge)."""
    model, ref = pairs64[fam]
    m = 3
    s = edge_attribution(
        model,
        CLEAN,
        CORRUPT,
        metric=_metric(model, fam),
        method="eap-ig",
        ig_steps=m,
        ig_at="activations",
        progress=False,
    )
    bc, bk = _batches(model)
    _, wk = _ref_writes(ref, bk)
    total = None
    mask = ref.edge_matrix().to(model.dtype)
    for k in range(1, m + 1):
        coef = ((1 - k / m) * mask).requires_grad_(True)
        M, _ = ref.run(bc.tokens, bc.attention_mask, abl=wk, coef=coef)
        (g,) = torch.autograd.grad(M.mean(), coef)
        total = g if total is None else total + g
    # coef mixes toward the corrupt write; the score (positive = supports M) is the derivative toward the clean one
    _close(s, ref.per_edge(-total / m), rtol=1e-6, atol_frac=1e-7 if fam != "llama" else 1e-5)


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("ig_at", ["inputs", "activations"])
def test_eap_ig_completeness_error_shrinks(pairs64, fam, ig_at):
    model, _ = pairs64[fam]
    errs = [
        edge_attribution(
            model, CLEAN, CORRUPT, metric=_metric(model, fam), method="eap-ig", ig_steps=m, ig_at=ig_at, progress=False
        ).completeness_error
        for m in (1, 8, 64)
    ]
    target = abs(
        edge_attribution(model, CLEAN, CORRUPT, metric=_metric(model, fam), method="eap", progress=False).target
    )
    assert errs[2] < errs[0], errs  # a right Riemann sum: the error falls like 1/m, not always monotonically
    assert errs[2] < 0.05 * target, (errs, target)


def _hf_reader_tangents(model, ref, fam):
    """Σ_w score(w → r) by forward-mode AD through the HF model alone: reader r's linear output gets the
    tangent of its linearised input change, J_r Δx_r (pre-norm: Δx_r the HF residual-stream difference
    before r's norm, J_r the norm's true Jacobian by jvp of the HF norm module), nothing else does."""
    from torch.func import jvp

    bc, bk = _batches(model)
    hf = ref.hf
    dh, d = ref.dh, ref.d
    blocks = ref._blocks()

    def hidden(batch):
        keep = {}
        hooks = []
        for l, blk in enumerate(blocks):
            hooks.append(ref.ln1(l).register_forward_hook(lambda m, i, o, l=l: keep.__setitem__(("pre", l), i[0])))
            hooks.append(ref.ln2(l).register_forward_hook(lambda m, i, o, l=l: keep.__setitem__(("mid", l), i[0])))
        hooks.append(ref.ln_final().register_forward_hook(lambda m, i, o: keep.__setitem__(("final", 0), i[0])))
        hooked_forward(hf, hooks, batch.tokens, attention_mask=batch.attention_mask)
        return keep

    xc, xk = hidden(bc), hidden(bk)
    out = {}
    for r in ref.readers:
        if r == "unembed":
            key, mod = ("final", 0), ref.ln_final()
        else:
            l = ref._layer(r)
            key, mod = (("mid", l), ref.ln2(l)) if r.endswith("mlp.in") else (("pre", l), ref.ln1(l))
        _, t_norm = jvp(
            lambda x: mod(x), (xc[key],), (xc[key] - xk[key],)
        )  # J_r Δx_r (clean − corrupt) at r's norm output
        if r == "unembed":
            target, tangent = mod, t_norm
        elif r.endswith("mlp.in"):
            target, tangent = mod, t_norm
        else:
            which, h = r.split(".")[2][0], int(r.split("[H")[1][:-1])
            proj_full = {
                "gpt2": lambda l=l: blocks[l].attn.c_attn,
                "llama": lambda l=l: getattr(blocks[l].self_attn, f"{which}_proj"),
                "neox": lambda l=l: blocks[l].attention.query_key_value,
            }[fam]()
            lin = proj_full(t_norm) - (proj_full.bias if proj_full.bias is not None else 0)  # the linear part only
            tangent = torch.zeros_like(lin)
            if fam == "gpt2":
                off = {"q": 0, "k": 1, "v": 2}[which] * d + h * dh
                tangent[..., off : off + dh] = lin[..., off : off + dh]
            elif fam == "llama":
                tangent[..., h * dh : (h + 1) * dh] = lin[..., h * dh : (h + 1) * dh]
            else:
                off = h * 3 * dh + {"q": 0, "k": 1, "v": 2}[which] * dh
                tangent[..., off : off + dh] = lin[..., off : off + dh]
            target = proj_full
        hook = target.register_forward_hook(lambda m, i, o, t=tangent: fwAD.make_dual(o, t))
        try:
            with torch.no_grad(), fwAD.dual_level():
                M = _hf_metric_dual(ref, fam, bc)
                out[r] = float(fwAD.unpack_dual(M).tangent.mean())
        finally:
            hook.remove()
    return out


def _hf_metric_dual(ref, fam, batch):
    logits = ref.hf(batch.tokens, attention_mask=batch.attention_mask).logits
    last = batch.attention_mask.sum(1) - 1
    y = logits[torch.arange(len(last)), last]
    a, w = (ref.tok(t, add_special_tokens=False)["input_ids"][0] for t in ("w12", "w13"))
    return y[:, a] - y[:, w]


@pytest.mark.parametrize("fam", ["gpt2", "llama", "neox"])
def test_reader_sums_equal_the_linearised_input_change(pairs64, fam):
    """Identity: for every reader r, Σ_w score(w → r) = (J_r Δx_r)·∂M/∂(r's input) — the attribution-patching
    score of r's linearised input change — with Δx_r the HF model's own residual-stream difference (a
    pre-norm stream is the sum of its writes, so Σ_w Δa_w = Δx_r)."""
    model, ref = pairs64[fam]
    s = edge_attribution(model, CLEAN, CORRUPT, metric=_metric(model, fam), method="eap", progress=False)
    df = s.to_dataframe()
    sums = df.groupby("reader")["score"].sum()
    want = _hf_reader_tangents(model, ref, fam)
    got = torch.tensor([float(sums[r]) for r in want], dtype=torch.float64)
    ref_t = torch.tensor(list(want.values()), dtype=torch.float64)
    torch.testing.assert_close(got, ref_t, rtol=1e-6, atol=1e-6 * float(ref_t.abs().max()))


def test_reader_sums_post_norm_equal_the_chained_linearisation(pairs64):
    """Post-norm (BERT): Σ_w score(w → r) = (Σ_w J_{w→r} Δa_w)·∂M/∂x_r, the linearised change of r's input
    through every Add & Norm — by the reference with one coefficient per reader on every incoming edge."""
    model, ref = pairs64["bert"]
    s = edge_attribution(model, CLEAN, CORRUPT, metric=_metric(model, "bert"), method="eap", progress=False)
    sums = s.to_dataframe().groupby("reader")["score"].sum()
    bc, bk = _batches(model)
    _, wk = _ref_writes(ref, bk)
    _, wc = _ref_writes(ref, bc)
    delta = {w: wc[w] - wk[w] for w in wc}  # clean − corrupt: positive = supports M
    per_reader = torch.zeros(len(ref.readers), dtype=model.dtype, requires_grad=True)
    beta = ref.edge_matrix().to(model.dtype) * per_reader[None]
    M, _ = ref.run(bc.tokens, bc.attention_mask, beta=beta, delta=delta)
    (g,) = torch.autograd.grad(M.mean(), per_reader)
    want = dict(zip(ref.readers, g.tolist()))
    got = torch.tensor([float(sums[r]) for r in want], dtype=torch.float64)
    torch.testing.assert_close(
        got,
        torch.tensor(list(want.values()), dtype=torch.float64),
        rtol=1e-6,
        atol=1e-8 * max(abs(v) for v in want.values()),
    )


def test_scores_result_contract_and_convention(pairs64):
    model, _ = pairs64["gpt2"]
    s = edge_attribution(model, CLEAN, CORRUPT, metric=_metric(model, "gpt2"), progress=False)
    e = s.edges[5]
    assert s[e] == pytest.approx(float(s.scores[5]))
    df = s.to_dataframe()
    assert list(df.columns[:4]) == ["edge", "writer", "reader", "score"]
    assert "corrupt" in s.convention and "clean" in s.convention
    assert "completeness" in repr(s) and "error" in repr(s)
    torch.testing.assert_close(s.scores, s.per_prompt.mean(-1))
    assert s.clean == pytest.approx(float(_hf_metric(pairs64["gpt2"][1], "gpt2", as_batch(model, CLEAN)).mean()))


def test_batch_size_chunks_give_the_same_scores(pairs64):
    model, _ = pairs64["llama"]
    whole = edge_attribution(
        model, CLEAN, CORRUPT, metric=_metric(model, "llama"), method="eap-ig", ig_steps=2, progress=False
    )
    one = edge_attribution(
        model, CLEAN, CORRUPT, metric=_metric(model, "llama"), method="eap-ig", ig_steps=2, batch_size=1, progress=False
    )
    torch.testing.assert_close(one.per_prompt, whole.per_prompt, rtol=1e-9, atol=1e-12)
    assert one.completeness == pytest.approx(whole.completeness, rel=1e-9)


def test_kl_metric(pairs64):
    """KL(clean ‖ ·) sits at its minimum on the clean run: EAP's gradient there is zero; EAP-IG's path is not."""
    model, _ = pairs64["gpt2"]
    eap = edge_attribution(model, CLEAN, CORRUPT, metric=interp.KL(), method="eap", progress=False)
    assert float(eap.scores.abs().max()) < 1e-12 and eap.clean == pytest.approx(0.0, abs=1e-12)
    ig = edge_attribution(
        model, CLEAN, CORRUPT, metric=interp.KL(), method="eap-ig", ig_steps=8, ig_at="activations", progress=False
    )
    assert float(ig.scores.abs().max()) > 0 and ig.corrupt > 0
    assert ig.target == pytest.approx(ig.clean - ig.corrupt) and ig.target < 0  # KL is 0 at clean
    assert ig.completeness_error < 0.25 * abs(ig.target)


@pytest.mark.parametrize("fam", ["llama", "bert"])
def test_padded_batch_equals_prompts_one_by_one(pairs64, fam):
    """Prompts of different lengths in one batch (right padding) score as each prompt alone."""
    model, _ = pairs64[fam]
    clean, corrupt = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9"], ["w1 w2 w30 w4 w5 w6", "w7 w31 w9"]
    both = edge_attribution(model, clean, corrupt, metric=_metric(model, fam), progress=False)
    for i in range(2):
        alone = edge_attribution(model, clean[i], corrupt[i], metric=_metric(model, fam), progress=False)
        torch.testing.assert_close(both.per_prompt[:, i], alone.per_prompt[:, 0], rtol=1e-7, atol=1e-10)
