"""Composition scores: the materialised formula, transformer-lens (raw and compatibility mode), errors."""

import pytest
import torch

import interp.circuits as C
from circuits_reference import tl_composition_scores
from interp.errors import ArgumentError
from tiny_models import tiny_model


def _materialised(model, kind, fold):
    """‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F) on dense d_model × d_model circuits from ov/qk_circuit's own
    factors' *weights*, rebuilt here from model.weights (GQA by repeat_interleave)."""
    a, w = model.arch, model.weights
    rep = a.n_heads // a.n_kv_heads
    W_K, W_V = w.W_K.repeat_interleave(rep, 1).double().cpu(), w.W_V.repeat_interleave(rep, 1).double().cpu()
    W_Q, W_O = w.W_Q.double().cpu(), w.W_O.double().cpu()  # the reference on the CPU
    d = a.d_model
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d
    if fold and a.norm_placement == "pre":
        g = w.ln1_w.double().cpu()[:, None, :, None]
        W_Q, W_K, W_V = g * W_Q, g * W_K, g * W_V
        if a.norm == "layernorm":
            W_Q, W_K, W_V = P @ W_Q, P @ W_K, P @ W_V
    if fold and a.norm == "layernorm":
        W_O = W_O @ P
    OV = W_V @ W_O
    QK = W_Q @ W_K.transpose(-2, -1)
    right = {"Q": QK, "K": QK.transpose(-2, -1), "V": OV}[kind]
    L, H = a.n_layers, a.n_heads
    out = torch.full((L, H, L, H), float("nan"), dtype=torch.float64)
    for l1 in range(L):
        for h1 in range(H):
            for l2 in range(l1 + 1, L):
                for h2 in range(H):
                    A, B = OV[l1, h1], right[l2, h2]
                    out[l1, h1, l2, h2] = torch.linalg.norm(A @ B) / (torch.linalg.norm(A) * torch.linalg.norm(B))
    return out


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
@pytest.mark.parametrize("fold", [True, False])
def test_equals_materialised_formula(family_model, kind, fold):
    got = C.composition_scores(family_model, kind, fold_norms=fold)
    ref = _materialised(family_model, kind, fold)
    got = got.to("cpu")  # compared with the CPU reference
    assert torch.equal(got.mask, ~torch.isnan(ref))
    torch.testing.assert_close(got.scores[got.mask].double(), ref[got.mask], atol=1e-5, rtol=1e-5)
    assert float(got.scores[got.mask].min()) >= 0 and float(got.scores[got.mask].max()) <= 1


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_matches_transformer_lens_raw_weights(family_model, kind):
    """The bridge outside compatibility mode exposes the raw HF weights: compare with fold_norms=False."""
    tl = family_model.bridge.all_composition_scores(kind).scores.detach()  # TL zeros where undefined
    got = C.composition_scores(family_model, kind, fold_norms=False)
    torch.testing.assert_close(got.scores[got.mask], tl[got.mask], atol=1e-5, rtol=1e-4)
    assert float(tl[~got.mask].abs().max()) == 0.0
    # the chunked TL reference used on smollm2 is TL's own call on these models
    torch.testing.assert_close(tl_composition_scores(family_model.bridge, kind)[got.mask], tl[got.mask])


@pytest.mark.parametrize("family", ["gpt2", "llama", "neox", "bert"])
def test_matches_transformer_lens_compatibility_mode_with_folded_weights(family):
    """enable_compatibility_mode() folds norms and centres writes as fold_norms=True does."""
    ours = C.composition_scores(tiny_model(family), "K", fold_norms=True)
    m = tiny_model(family)  # a fresh copy: compatibility mode rewrites the bridge's weights in place
    m.bridge.enable_compatibility_mode(disable_warnings=True)
    tl = m.bridge.all_composition_scores("K").scores.detach()
    torch.testing.assert_close(ours.scores[ours.mask], tl[ours.mask], atol=1e-5, rtol=1e-4)


def test_folding_changes_the_scores(tiny_models):
    """Not a no-op: with random gains the folded and raw conventions differ."""
    a = C.composition_scores(tiny_models["llama"], "K", fold_norms=True)
    b = C.composition_scores(tiny_models["llama"], "K", fold_norms=False)
    assert (a.scores[a.mask] - b.scores[b.mask]).abs().max() > 1e-3


def test_result_structure(tiny_models):
    s = C.composition_scores(tiny_models["gpt2"], "Q")
    df = s.to_dataframe()
    assert len(df) == int(s.mask.sum()) == 4 * 4  # 2 layers: only L0 → L1 pairs
    assert set(df["src"]).issubset({f"L0.H{h}" for h in range(4)})
    top = s.top(3)
    assert list(top["score"]) == sorted(df["score"], reverse=True)[:3]
    fig = s.plot()
    assert fig.data[0].type == "heatmap" and len(fig.data[0].x) == 8


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(kind="X"), "kind"),
        (dict(kind="q"), "kind"),
        (dict(kind="K", fold_norms=1), "fold_norms"),
        (dict(kind="K", dtype=torch.float16), "dtype"),
    ],
)
def test_bad_arguments(tiny_models, kwargs, name):
    with pytest.raises(ArgumentError, match=name):
        C.composition_scores(tiny_models["llama"], **kwargs)
    with pytest.raises(ArgumentError, match="k="):
        C.composition_scores(tiny_models["llama"], "K").top(0)
