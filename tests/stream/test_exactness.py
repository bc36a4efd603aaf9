"""Exactness of the residual-stream ledger (docs/math.md §2-4).

Every decomposition must (a) close: Σ contributions == total at every read and resid point,
and (b) be right: the totals and the per-component terms equal tensors read off a separately
built Hugging Face copy of the model (hidden_states, logits, the attention output projection,
the MLP, the norm modules' parameters), never the trace's own hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from interp.stream import trace

from tiny_models import tiny_hf_model, tiny_model

from ._hf_reference import (
    Reference,
    head_writes,
    hf_reference,
    neuron_rows,
    output_bias,
    rel,
)

PROMPTS = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9"]  # padded: the second row has padding
TOL = {torch.float32: 1e-4, torch.float64: 1e-9}


@dataclass
class Case:
    family: str
    dtype: torch.dtype
    model: object
    tr: object
    ref: Reference

    @property
    def tol(self) -> float:
        return TOL[self.dtype]

    @property
    def hf_tol(self) -> float:
        """Tolerance against the HF copy. In fp64 HF's GPT-NeoX eager attention rounds its softmax
        through fp32 while the bridge's own NeoX attention does not: bridge and HF then differ by
        ~1e-8 relative (closure, which involves the bridge only, stays ≤1e-9)."""
        if self.dtype == torch.float64 and self.family == "neox":
            return 1e-6
        return self.tol

    @property
    def mask(self):
        return self.tr.attention_mask


def _family(model) -> str:
    return model.name.removeprefix("tiny-")


@pytest.fixture(scope="module", params=[torch.float32, torch.float64], ids=["fp32", "fp64"])
def case(request, family_model) -> Case:
    family = _family(family_model)
    dtype = request.param
    # fp64: HF's LlamaRMSNorm rounds through fp32 even for fp64 inputs; interp's loader makes it
    # compute in fp64 for fp64 models, and the HF reference is patched the same way.
    model = family_model if dtype == torch.float32 else tiny_model(family, dtype=dtype)
    tr = trace(model, PROMPTS)
    assert bool((tr.attention_mask == 0).any()), "the batch must contain padding"
    ref = hf_reference(family, tr.tokens, tr.attention_mask, dtype=dtype, exact_norms=dtype == torch.float64)
    return Case(family, dtype, model, tr, ref)


# ---- closure --------------------------------------------------------------------------------


def test_closes_at_every_read_and_resid_point(case):
    points = case.tr.reads + case.tr.resid_points
    assert len(case.tr.resid_points) >= 2 * case.model.arch.n_layers
    worst = 0.0
    for point in points:
        d = case.tr.decompose(point)
        # the reported figures, and an own recomputation of them
        own = rel(d.contributions.sum(0), d.total, case.mask)
        assert d.relative_error <= case.tol, (point, d.relative_error)
        assert own <= case.tol, (point, own)
        assert abs(own - d.relative_error) <= 1e-6 + 0.01 * own
        worst = max(worst, own)
    print(f"\n{case.family} {case.dtype}: worst closure over {len(points)} points = {worst:.2e}")


# ---- totals against HF ----------------------------------------------------------------------


def test_totals_equal_hf_tensors_at_every_point(case):
    for point in case.tr.reads + case.tr.resid_points:
        d = case.tr.decompose(point)
        want = case.ref.at(point)
        assert rel(d.total, want, case.mask) <= case.hf_tol, (point, "total", rel(d.total, want, case.mask))
        assert rel(d.contributions.sum(0), want, case.mask) <= case.hf_tol, (point, "sum")


def test_final_read_is_hf_last_hidden_state(case):
    """Decoders: HF's hidden_states[-1] is the final norm's OUTPUT (the unembed read);
    BERT: it is the last layer's post-norm output (the 'final' read)."""
    last = case.tr.reads[-1]
    assert last == ("final" if case.family == "bert" else "unembed")
    d = case.tr.decompose(last)
    hs = case.ref.hidden_states
    assert len(hs) == case.model.arch.n_layers + 1
    assert rel(d.contributions.sum(0), hs[-1], case.mask) <= case.hf_tol
    if case.family != "bert":  # and the final norm's input is the last resid_post
        L = case.model.arch.n_layers
        d_post = case.tr.decompose(f"blocks.{L - 1}.hook_resid_post")
        assert rel(d_post.contributions.sum(0), case.ref.glob["final_in"], case.mask) <= case.hf_tol
        assert rel(d.total, case.ref.glob["final_out"], case.mask) <= case.hf_tol


def test_unembed_sum_gives_hf_logits(case):
    if case.family == "bert":  # post-norm encoder: its last read is 'final' (tested above)
        assert "unembed" not in case.tr.reads
        return
    d = case.tr.decompose("unembed")
    head = case.ref.hf.get_output_embeddings()
    with torch.no_grad():
        logits = head(d.contributions.sum(0))
    assert rel(logits, case.ref.logits, case.mask) <= case.hf_tol
    # projecting the contributions onto W_U one term at a time gives the same logits (DLA, Math 5)
    b_U = output_bias(head, case.model.arch.d_model, logits)
    per_term = torch.einsum("nbpd,vd->nbpv", d.contributions, head.weight.detach())
    assert rel(per_term.sum(0) + b_U, case.ref.logits, case.mask) <= case.hf_tol


# ---- per-component terms against HF ---------------------------------------------------------


def _first_point_after_attn(case, l: int) -> str:
    return f"blocks.{l}.hook_resid_post" if case.model.arch.parallel_attn_mlp else f"blocks.{l}.hook_resid_mid"


def test_heads_sum_to_hf_attention_output(case):
    arch = case.model.arch
    for l in range(arch.n_layers):
        for point in (_first_point_after_attn(case, l), case.tr.reads[-1]):
            d = case.tr.decompose(point)
            heads = torch.stack([d[f"L{l}.H{h}"] for h in range(arch.n_heads)])
            total = heads.sum(0) + (d[f"L{l}.attn_bias"] if f"L{l}.attn_bias" in d.labels else 0)
            want = case.ref.carry(case.ref.layer["attn_out"][l], layer=l, sub="attn", point=point)
            assert rel(total, want, case.mask) <= case.hf_tol, (l, point)
            # each head alone: z_h W_O^h from HF's own output projection
            per_head = torch.stack(
                [case.ref.carry(w, layer=l, sub="attn", point=point) for w in head_writes(case.ref, l, arch.n_heads)]
            )
            assert rel(heads, per_head, case.mask) <= case.hf_tol, (l, point, "per head")


def test_mlp_and_embedding_terms_equal_hf(case):
    arch = case.model.arch
    last = case.tr.reads[-1]
    for l in range(arch.n_layers):
        for point in (f"blocks.{l}.hook_resid_post", last):
            d = case.tr.decompose(point)
            want = case.ref.carry(case.ref.layer["mlp_out"][l], layer=l, sub="mlp", point=point)
            assert rel(d[f"L{l}.mlp"], want, case.mask) <= case.hf_tol, (l, point)
    emb = case.ref.hf.get_input_embeddings()
    with torch.no_grad():
        raw = emb(case.tr.tokens)
    for point in ("blocks.0.hook_resid_pre", last):
        d = case.tr.decompose(point)
        want = case.ref.carry(raw, layer=0, sub="embed", point=point)
        assert rel(d["embed"], want, case.mask) <= case.hf_tol, point


def test_norm_bias_terms_are_the_betas(case):
    """Each norm β is its own term: broadcast over positions, unscaled by σ."""
    if case.family == "llama":
        assert not [t for t in case.tr.decompose("unembed").labels if "bias" in t]
        return
    if case.family == "bert":
        d = case.tr.decompose("blocks.0.hook_resid_post")
        beta = case.ref.norms["ln2.0"].bias
        label = "L0.ln2_bias"
    else:
        d = case.tr.decompose("unembed")
        beta = case.ref.norms["final"].bias
        label = "final_bias"
    want = beta.expand_as(d[label])
    assert rel(d[label], want, case.mask) <= case.hf_tol


# ---- neurons and projections ----------------------------------------------------------------


def test_neurons_close_and_sum_to_the_mlp_write(case):
    arch = case.model.arch
    trn = trace(case.model, PROMPTS, neurons=True)
    for point in trn.reads + trn.resid_points:
        d = trn.decompose(point)
        assert d.relative_error <= case.tol, (point, d.relative_error)
    last = trn.reads[-1]
    for l in range(arch.n_layers):
        for point in (f"blocks.{l}.hook_resid_post", last):
            d = trn.decompose(point)
            neurons = torch.stack([d[f"L{l}.N{n}"] for n in range(arch.d_mlp)])
            bias = d[f"L{l}.mlp_bias"] if f"L{l}.mlp_bias" in d.labels else 0
            assert f"L{l}.mlp" not in d.labels
            want = case.ref.carry(case.ref.layer["mlp_out"][l], layer=l, sub="mlp", point=point)
            assert rel(neurons.sum(0) + bias, want, case.mask) <= case.hf_tol, (l, point)
            # neuron n alone: its activation times row n of HF's output projection
            a, rows = case.ref.layer["down_in"][l], neuron_rows(case.ref, l)
            per = torch.einsum("bpn,nd->nbpd", a.double(), rows.double())
            per = torch.stack([case.ref.carry(x, layer=l, sub="mlp", point=point) for x in per])
            assert rel(neurons, per, case.mask) <= case.hf_tol, (l, point, "per neuron")


def test_neurons_on_some_layers_only(case):
    arch = case.model.arch
    trn = trace(case.model, PROMPTS, neurons=[arch.n_layers - 1])
    d = trn.decompose(trn.reads[-1])
    assert "L0.mlp" in d.labels and "L0.N0" not in d.labels
    assert f"L{arch.n_layers - 1}.N0" in d.labels and f"L{arch.n_layers - 1}.mlp" not in d.labels
    assert d.relative_error <= case.tol


def test_projection_equals_full_contributions_times_U(case):
    d_model, b = case.model.arch.d_model, case.tr.tokens.shape[0]
    g = torch.Generator().manual_seed(1)
    U = torch.randn(3, d_model, generator=g, dtype=case.dtype)
    Ub = torch.randn(b, 2, d_model, generator=g, dtype=case.dtype)
    for point in (case.tr.reads[0], case.tr.reads[-1], f"blocks.{case.model.arch.n_layers - 1}.hook_resid_post"):
        full = case.tr.decompose(point)
        p = case.tr.decompose(point, project_onto=U)
        assert p.labels == full.labels and p.is_projected
        assert p.contributions.shape == (*full.contributions.shape[:3], 3)
        assert rel(p.contributions, full.contributions.double() @ U.double().T, case.mask) <= case.tol
        assert rel(p.total, full.total.double() @ U.double().T, case.mask) <= case.tol
        assert p.relative_error <= case.tol
        pb = case.tr.decompose(point, project_onto=Ub)  # per-prompt directions
        want = torch.einsum("nbpd,bkd->nbpk", full.contributions.double(), Ub.double())
        assert rel(pb.contributions, want, case.mask) <= case.tol
    # a trace-level default projection applies to every decompose
    trp = trace(case.model, PROMPTS, project_onto=U)
    p = trp.decompose(case.tr.reads[-1])
    full = case.tr.decompose(case.tr.reads[-1])
    assert rel(p.contributions, full.contributions.double() @ U.double().T, case.mask) <= case.tol


# ---- fp64 precision, made explicit ---------------------------------------------------------


def test_llama_fp64_is_really_fp64():
    """HF's LlamaRMSNorm computes in fp32 even for an fp64 model, which capped an fp64 Llama's
    closure at ~1e-7 behind every RMSNorm; interp's loader now keeps fp64 models in fp64.
    The unpatched HF module shows the island the loader removes."""
    model = tiny_model("llama", dtype=torch.float64)
    tr = trace(model, PROMPTS)
    assert max(tr.decompose(p).relative_error for p in tr.reads + tr.resid_points) <= 1e-12
    hf = tiny_hf_model("llama", dtype=torch.float64)  # HF as shipped
    x = tr.activations["blocks.1.ln1.hook_in"]
    with torch.no_grad():
        hf_out = hf.model.layers[1].input_layernorm(x)
    ours = tr.activations["blocks.1.ln1.hook_out"]
    assert 1e-12 < rel(hf_out, ours, tr.attention_mask) <= 1e-6


# ---- real models ----------------------------------------------------------------------------


@pytest.mark.real
def test_smollm2_closes_and_matches_hf(smollm2):
    from pathlib import Path

    from interp.models._catalog import default_cache_dir
    from interp.models._gguf import load_gguf_cached

    prompts = ["The capital of France is Paris, and the capital of Italy is", "Hello there"]
    tr = trace(smollm2, prompts)
    mask = tr.attention_mask
    hf, _, _ = load_gguf_cached(Path(smollm2.source), default_cache_dir() / "gguf", torch.float32)
    hf.eval()
    with torch.no_grad():
        out = hf(input_ids=tr.tokens, attention_mask=mask, output_hidden_states=True)
    errs = {}
    d = tr.decompose("unembed")
    errs["unembed"] = d.relative_error
    errs["sum vs HF hidden_states[-1]"] = rel(d.contributions.sum(0), out.hidden_states[-1], mask)
    assert errs["sum vs HF hidden_states[-1]"] <= 1e-4
    with torch.no_grad():
        logits = hf.lm_head(d.contributions.sum(0))
    errs["sum @ W_U vs HF logits"] = rel(logits, out.logits, mask)
    assert errs["sum @ W_U vs HF logits"] <= 1e-4
    for point, want in [
        ("blocks.0.hook_resid_pre", out.hidden_states[0]),
        ("blocks.12.hook_resid_pre", out.hidden_states[12]),
        ("blocks.20.hook_resid_post", out.hidden_states[21]),
        ("blocks.7.hook_resid_mid", None),
        ("L29.mlp.in", None),
        ("L14.attn.q[H8]", None),
        ("L14.attn.k[H2]", None),
        ("L3.attn.v[H0]", None),
    ]:
        d = tr.decompose(point)
        errs[point] = d.relative_error
        assert d.relative_error <= 1e-4, (point, d.relative_error)
        if want is not None:
            assert rel(d.contributions.sum(0), want, mask) <= 1e-4, point
    print("\nsmollm2 closure:", {k: f"{v:.1e}" for k, v in errs.items()})


@pytest.mark.real
def test_minilm_final_hidden_state_closes_and_matches_hf(minilm):
    from transformers import BertModel

    prompts = ["The quick brown fox jumps over the lazy dog.", "Post-norm encoders are hard."]
    tr = trace(minilm, prompts)
    mask = tr.attention_mask
    assert bool((mask == 0).any())
    hf = BertModel.from_pretrained(minilm.source).eval()
    with torch.no_grad():
        out = hf(input_ids=tr.tokens, attention_mask=mask, output_hidden_states=True)
    d = tr.decompose("final")
    assert d.relative_error <= 1e-4
    vs_hf = {
        "total vs HF": rel(d.total, out.last_hidden_state, mask),
        "sum vs HF": rel(d.contributions.sum(0), out.last_hidden_state, mask),
    }
    assert max(vs_hf.values()) <= 1e-4, vs_hf
    # every post-norm bias is a term, and so is the embedding norm's
    assert {"embed_ln_bias", "L0.ln1_bias", "L5.ln2_bias", "type_embed"} <= set(d.labels)
    errs = {"final": d.relative_error, **vs_hf}
    for l in (0, 3):
        for point, want in [
            (f"blocks.{l}.hook_resid_post", out.hidden_states[l + 1]),
            (f"L{l}.mlp.in", None),
            (f"blocks.{l}.hook_resid_mid", None),
        ]:
            dl = tr.decompose(point)
            errs[point] = dl.relative_error
            assert dl.relative_error <= 1e-4, point
            if want is not None:
                assert rel(dl.contributions.sum(0), want, mask) <= 1e-4, point
    print("\nminilm closure:", {k: f"{v:.1e}" for k, v in errs.items()})


# ---- position-gathered traces (interp.stream._trace_at.trace_at, used by attribution) ----------


@pytest.mark.parametrize("stop", [False, True], ids=["full-pass", "stop-before-unembed"])
def test_trace_at_equals_full_trace_at_those_positions(case, stop):
    from interp.stream.internal import as_batch, count_hooks
    from interp.stream._trace_at import trace_at

    batch = as_batch(case.model, PROMPTS)
    pos = batch.last_positions()
    rows = torch.arange(batch.tokens.shape[0])
    n_hooks = count_hooks(case.model.bridge)
    ta = trace_at(case.model, batch, pos, stop_before_unembed=stop)
    assert count_hooks(case.model.bridge) == n_hooks  # also when the pass was stopped by raising
    ones = torch.ones(len(rows), 1, dtype=torch.long)
    for point in ta.reads + ta.resid_points:
        d, full = ta.decompose(point), case.tr.decompose(point)
        assert d.labels == full.labels
        assert d.relative_error <= case.tol, point
        assert rel(d.contributions, full.contributions[:, rows, pos][:, :, None], ones) <= case.tol, point
        # and the total is the HF model's tensor at that position
        assert rel(d.total, case.ref.at(point)[rows, pos][:, None], ones) <= case.hf_tol, point


# ---- config variants of the supported families ----------------------------------------------


@pytest.mark.parametrize(
    "family, overrides",
    [
        ("llama", dict(attention_bias=True, mlp_bias=True)),  # o_proj / down_proj carry biases
        ("neox", dict(use_parallel_residual=False)),  # sequential GPT-NeoX blocks
    ],
    ids=["llama-biases", "neox-sequential"],
)
def test_config_variants_close_and_match_hf(family, overrides):
    """Regression: a Llama with attention_bias=True lost its o_proj bias (no L{l}.attn_bias term:
    closure error ~100%), and with mlp_bias=True its down_proj bias (b_out read as zeros)."""
    from interp.models import model_from_hf_unchecked as model_from_hf
    from tiny_models import tiny_tokenizer

    from ._hf_reference import variant_hf

    model = model_from_hf(variant_hf(family, **overrides), tiny_tokenizer(), name=f"tiny-{family}")
    assert model.arch.parallel_attn_mlp == overrides.get("use_parallel_residual", family == "neox")
    for neurons in (False, True):
        tr = trace(model, PROMPTS, neurons=neurons)
        ref = hf_reference(family, tr.tokens, tr.attention_mask, hf=variant_hf(family, **overrides))
        for point in tr.reads + tr.resid_points:
            d = tr.decompose(point)
            assert d.relative_error <= 1e-4, (point, neurons, d.relative_error)
            assert rel(d.contributions.sum(0), ref.at(point), tr.attention_mask) <= 1e-4, (point, neurons)
        for l in range(model.arch.n_layers):
            point = f"blocks.{l}.hook_resid_post" if model.arch.parallel_attn_mlp else f"blocks.{l}.hook_resid_mid"
            d = tr.decompose(point)
            heads = sum(d[f"L{l}.H{h}"] for h in range(model.arch.n_heads))
            assert (f"L{l}.attn_bias" in d.labels) == (family != "llama" or overrides.get("attention_bias", False))
            attn = heads + d[f"L{l}.attn_bias"]
            assert rel(attn, ref.layer["attn_out"][l], tr.attention_mask) <= 1e-4, (l, point)
            if neurons and family == "llama":
                post = tr.decompose(f"blocks.{l}.hook_resid_post")
                bias = ref.layer_module(l, "down").bias
                assert rel(post[f"L{l}.mlp_bias"], bias.expand_as(post[f"L{l}.mlp_bias"]), tr.attention_mask) <= 1e-6
