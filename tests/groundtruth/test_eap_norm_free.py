"""Edge attribution on norm-free models with MLPs (the tracr programs): an MLP's input gradient is the MLP's own.

Regression: without a norm before the MLP, the MLP's input was the residual tensor itself, so its
gradient also carried every path that skips the MLP, and edges into an MLP with zero weights scored as
much as edges to the logits.
"""

import pytest
import torch

import interp.edges as E
from interp.groundtruth._discovery import _eap
from interp.groundtruth._tasks import tracr_task


@pytest.mark.slow
def test_edges_into_an_empty_mlp_score_zero(tracr_programs):
    p = tracr_programs("frac_prevs")  # layer 1 has an attention head and an all-zero MLP
    W = p.model.weights
    assert W.W_in[1].abs().max() == 0 and W.W_out[1].abs().max() == 0
    g = tracr_task(p, lengths=[4], max_inputs=20).groups[0]
    graph = E.circuit_graph(p.model)
    into = [i for i, e in enumerate(graph.edges) if e.endswith("→L1.mlp.in")]
    head_out = graph.edges.index("L1.H0→unembed")
    assert len(into) >= 3
    for method in ("eap", "eap-ig"):
        res = E.edge_attribution(p.model, g.clean, g.corrupt, metric=g.metric, method=method, progress=False)
        assert res.per_prompt[into].abs().max() == 0, method
        assert res.per_prompt[head_out].abs().max() > 0.01, method
    effects = _eap(p.model, g, "zero", 1)  # [E, P], zero ablation
    assert effects[into].abs().max() == 0
    assert effects[head_out].abs().max() > 0.01


@pytest.mark.slow
def test_eap_under_resample_equals_edge_attribution(tracr_programs):
    """The ground-truth scorer's EAP with the resample partners as corrupt = interp.edge_attribution's, up to the
    sign: the scorer's (ã_w − a_w)·∂M/∂x_r is the negative of interp's score (positive when the edge supports M)."""
    p = tracr_programs("reverse")
    g = tracr_task(p, lengths=[3], max_inputs=12).groups[0]
    mine = _eap(p.model, g, "resample", 1)
    ref = E.edge_attribution(p.model, g.clean, g.corrupt, metric=g.metric, method="eap", progress=False)
    assert torch.allclose(mine, -ref.per_prompt.double(), atol=1e-6, rtol=1e-5)  # interp's sign: supports > 0
    mine_ig = _eap(p.model, g, "resample", 3)
    ref_ig = E.edge_attribution(
        p.model, g.clean, g.corrupt, metric=g.metric, method="eap-ig", ig_steps=3, progress=False
    )
    assert torch.allclose(mine_ig, -ref_ig.per_prompt.double(), atol=1e-6, rtol=1e-5)


@pytest.mark.slow
def test_eap_ig_activations_equals_edge_attribution(tracr_programs):
    p = tracr_programs("sort")
    g = tracr_task(p, lengths=[3], max_inputs=10).groups[0]
    mine = _eap(p.model, g, "resample", 3, "activations")
    ref = E.edge_attribution(
        p.model, g.clean, g.corrupt, metric=g.metric, method="eap-ig", ig_steps=3, ig_at="activations", progress=False
    )
    assert torch.allclose(mine, -ref.per_prompt.double(), atol=1e-6, rtol=1e-5)  # interp's sign: supports > 0


@pytest.mark.slow
def test_eap_equals_finite_differences_of_hooked_runs(tracr_programs):
    """EAP(w → r) = d/dε M(r reads x_r + ε(ã_w − a_w)) at ε = 0, measured by central differences on the
    bridge with hooks (groundtruth_edge_eval, written independently of interp.edges), zero ablation."""
    import interp.edges as E
    from groundtruth_edge_eval import run_with_edges, writer_outputs

    from interp.labels import parse

    nonzero = {}
    for name in ("hist", "reverse"):
        p = tracr_programs(name)
        g = tracr_task(p, lengths=[3], max_inputs=6).groups[0]
        m, graph = p.model, E.circuit_graph(p.model)
        mine = _eap(m, g, "zero", 1)  # [E, P]
        own = writer_outputs(m, g.clean)
        rows = torch.arange(g.n_prompts)
        pos = torch.tensor(g.positions)
        ans = torch.tensor(g.answers)

        def M(logits):  # OutputMargin, independently: logit[answer] − mean of the others
            lg = logits.double()[rows, pos]
            right = lg[rows, ans]
            return right - (lg.sum(-1) - right) / (lg.shape[-1] - 1)

        eps = 1e-3
        nonzero[name] = 0
        for i, e in enumerate(graph.edges):
            w = e.split("→")[0]
            up = {k: v - eps * v if k == w else v for k, v in own.items()}  # x_r − (a_w − ablated) = x_r + ε(0 − a_w)
            down = {k: v + eps * v if k == w else v for k, v in own.items()}
            fd = (
                M(run_with_edges(m, g.clean, removed=[parse(e)], ablated=up))
                - M(run_with_edges(m, g.clean, removed=[parse(e)], ablated=down))
            ) / (2 * eps)
            assert torch.allclose(mine[i], fd, atol=2e-3, rtol=1e-2), (name, e, mine[i], fd)
            nonzero[name] += int(fd.abs().max() > 0.01)
    # not vacuous: each program has edges with a derivative of order 1 (two each: tracr's MLPs are step
    # functions and its attention saturated softmax, flat almost everywhere, so most edges have a zero
    # derivative under zero ablation: hist embed→L0.mlp.in, L0.mlp→unembed; reverse embed→L3.attn.v[H0],
    # L3.H0→unembed); the rest are compared too, at zero
    assert min(nonzero.values()) >= 2, nonzero
