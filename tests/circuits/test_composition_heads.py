"""composition_scores(..., heads=...): only the chosen heads' factors, the same numbers as all pairs.

Checked against (1) the all-pairs tensor's entries for the chosen pairs and (2) an independent
dense ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F), formed here from ``model.weights`` for a few pairs.
"""

import pytest
import torch

import interp.circuits as C
from interp.errors import ArgumentError, LabelError
from interp.labels import Head
from tiny_models import FAMILIES, tiny_model


@pytest.fixture(scope="module", params=FAMILIES)
def model3(request):
    """A 3-layer tiny model per family, so pairs span L0→L1, L0→L2 and L1→L2."""
    return tiny_model(request.param, n_layers=3)


def _dense_pair(model, kind, fold, src, dst):
    """The score of one (src, dst) pair from dense d_model × d_model circuits (float64)."""
    a, w = model.arch, model.weights
    d = a.d_model
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d
    pre_ln = fold and a.norm_placement == "pre" and a.norm in ("layernorm", "rmsnorm")

    def reads(l, h):
        g = a.kv_head(h)
        Q, K, V = (x.double().cpu() for x in (w.W_Q[l, h], w.W_K[l, g], w.W_V[l, g]))  # the reference on the CPU
        if pre_ln:
            gain = w.ln1_w[l].double().cpu()[:, None]
            Q, K, V = gain * Q, gain * K, gain * V
            if a.norm == "layernorm":
                Q, K, V = P @ Q, P @ K, P @ V
        O = w.W_O[l, h].double().cpu()
        if fold and a.norm == "layernorm":
            O = O @ P
        return Q, K, V, O

    Qs, Ks, Vs, Os = reads(*src)
    Qd, Kd, Vd, Od = reads(*dst)
    A = Vs @ Os
    B = {"Q": Qd @ Kd.T, "K": Kd @ Qd.T, "V": Vd @ Od}[kind]
    return float(torch.linalg.norm(A @ B) / (torch.linalg.norm(A) * torch.linalg.norm(B)))


def _pairs_mask(L, H, sel):
    m = torch.zeros(L, H, L, H, dtype=torch.bool)
    for l1, h1 in sel:
        for l2, h2 in sel:
            if l1 < l2:
                m[l1, h1, l2, h2] = True
    return m


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
@pytest.mark.parametrize("fold", [True, False])
def test_subset_is_the_full_submatrix(model3, kind, fold):
    a = model3.arch
    sel = [(0, 1), (0, 3), (1, 0), (1, 2), (2, 3)]
    heads = ["L1.H0", (0, 3), Head(2, 3), "L0.H1", [1, 2], "L0.H1"]  # mixed forms, a duplicate, unsorted
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        full = C.composition_scores(model3, kind, fold_norms=fold, dtype=dtype).to("cpu")
        sub = C.composition_scores(model3, kind, heads=heads, fold_norms=fold, dtype=dtype).to("cpu")
        want = _pairs_mask(a.n_layers, a.n_heads, sel)
        assert torch.equal(sub.mask, want)
        assert sub.heads == tuple(f"L{l}.H{h}" for l, h in sel)
        torch.testing.assert_close(sub.scores[want], full.scores[want], rtol=tol, atol=tol)
    for src, dst in [((0, 1), (2, 3)), ((1, 2), (2, 3)), ((0, 3), (1, 0))]:
        ref = _dense_pair(model3, kind, fold, src, dst)
        assert abs(float(sub.scores[src + dst]) - ref) <= 1e-5 * max(1.0, ref), (src, dst)


def test_subset_without_later_heads_is_all_nan(tiny_models):
    s = C.composition_scores(tiny_models["llama"], "K", heads=["L1.H0", "L1.H3"])
    assert not bool(s.mask.any()) and s.heads == ("L1.H0", "L1.H3")
    assert len(s.to_dataframe()) == 0


def test_subset_result_contract(tiny_models, tmp_path):
    s = C.composition_scores(tiny_models["gpt2"], "V", heads=["L0.H0", "L0.H2", "L1.H1"])
    df = s.to_dataframe()
    assert set(zip(df["src"], df["dst"])) == {("L0.H0", "L1.H1"), ("L0.H2", "L1.H1")}
    fig = s.plot()
    assert list(fig.data[0].x) == ["L0.H0", "L0.H2", "L1.H1"]
    back = type(s).load(s.save(tmp_path / "comp.safetensors"))
    assert back.heads == s.heads and torch.equal(back.mask, s.mask)
    assert torch.equal(back.scores[back.mask], s.scores[s.mask])


@pytest.mark.parametrize(
    "heads,err",
    [
        ("L0.H1", ArgumentError),
        ([], ArgumentError),
        ({"L0.H1"}, ArgumentError),
        (["L2.H0"], LabelError),
        (["L0.H4"], LabelError),
        ([(0, 9)], LabelError),
        ([(-1, 0)], LabelError),
        ([(0,)], LabelError),
        ([(True, 1)], LabelError),
        (["L0.mlp"], LabelError),
        (["head 3"], LabelError),
        ([3], LabelError),
    ],
)
def test_bad_heads(tiny_models, heads, err):
    with pytest.raises(err, match="heads"):
        C.composition_scores(tiny_models["llama"], "K", heads=heads)


@pytest.mark.real
def test_smollm2_subset(smollm2):
    heads = ["L0.H1", "L3.H5", "L9.H0", "L15.H8", "L22.H3", "L29.H1"]
    sel = [(0, 1), (3, 5), (9, 0), (15, 8), (22, 3), (29, 1)]
    a = smollm2.arch
    for kind in ("K", "V"):
        full = C.composition_scores(smollm2, kind)
        sub = C.composition_scores(smollm2, kind, heads=heads)
        want = _pairs_mask(a.n_layers, a.n_heads, sel)
        assert torch.equal(sub.mask, want)
        torch.testing.assert_close(sub.scores[want], full.scores[want], rtol=2e-5, atol=1e-6)
        for src, dst in [((0, 1), (3, 5)), ((15, 8), (29, 1))]:
            ref = _dense_pair(smollm2, kind, True, src, dst)
            assert abs(float(sub.scores[src + dst]) - ref) <= 1e-5, (kind, src, dst)


@pytest.mark.slow
def test_report_composition_graph_uses_the_full_scores_of_its_heads(tmp_path, monkeypatch):
    """report() computes composition only among the heads it shows; its edges carry the all-pairs values."""
    import importlib
    import json

    R = importlib.import_module("interp.reports._report")

    calls = []

    def spy(model, kind="K", **kw):
        calls.append(kw.get("heads"))
        return C.composition_scores(model, kind, **kw)

    monkeypatch.setattr(R, "composition_scores", spy)
    m = tiny_model("llama", n_layers=3)
    out = tmp_path / "rep"
    R.report(m, "w1 w2 w3 w4 w1 w2", answer="w3", out_dir=out, n_heads=5, static=False)
    r = json.loads((out / "results.json").read_text())
    shown = [h["head"] for h in r["top_heads"]]
    assert len(calls) == 3 and all(list(c) == shown for c in calls)
    edges = r["composition"]["edges"]
    full = {k: C.composition_scores(m, k).scores for k in "QKV"}
    want = sum(1 for s in shown for d in shown if Head.parse(s).layer < Head.parse(d).layer)
    assert len(edges) == 3 * want > 0
    for e in edges:
        assert e["src"] in shown and e["dst"] in shown
        s, d = Head.parse(e["src"]), Head.parse(e["dst"])
        assert e["score"] == pytest.approx(float(full[e["kind"]][s.layer, s.head, d.layer, d.head]), rel=1e-5)
