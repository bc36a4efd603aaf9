"""Bad input raises typed errors naming the argument; no hook or requires_grad flag is left on the model."""

from __future__ import annotations

import pytest
import torch

import interp
from interp.causal import Direction, LogitDiff
from interp.edges import circuit_graph, edge_attribution, edge_patch, evaluate_circuit, faithfulness_curve, load_task
from interp.errors import ArgumentError, LabelError, ShapeError, UnsupportedOperationError
from interp.stream.internal import count_hooks
from tiny_models import tiny_model

from .conftest import CLEAN, CORRUPT


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def bert():
    return tiny_model("bert")


M = LogitDiff("w12", "w13")


def test_unknown_task_and_encoder_tasks(llama, bert):
    with pytest.raises(ArgumentError, match="name='nope'"):
        load_task("nope", llama)
    with pytest.raises(UnsupportedOperationError, match="logits"):
        load_task("ioi", bert)
    with pytest.raises(UnsupportedOperationError, match="single tokens"):
        load_task("ioi", llama)  # the tiny tokenizer knows no names
    with pytest.raises(ArgumentError, match="n=0"):
        load_task("induction", llama, n=0)
    t = load_task("induction", llama, n=3, length=4)
    assert t.n == 3 and t.clean.shape == (3, 1 + 4 + 3) and len(t.answer) == 3
    with pytest.raises(ArgumentError, match="length="):
        load_task("induction", llama, length=40)
    with pytest.raises(ArgumentError, match="corrupt has"):
        interp.Task("mine", ["a b"], ["a c", "d e"], ["x"], ["y"])


def test_circuits_naming_edges_that_do_not_exist(llama):
    g = circuit_graph(llama)
    with pytest.raises(LabelError, match="does not see"):
        evaluate_circuit(llama, CLEAN, CORRUPT, ["L1.H0→L0.attn.q[H0]"], metric=M)
    with pytest.raises(LabelError, match="not a writer"):
        evaluate_circuit(llama, CLEAN, CORRUPT, ["L7.H0→unembed"], metric=M)
    with pytest.raises(LabelError, match="is not a label|not a label"):
        edge_patch(llama, CLEAN, CORRUPT, ["banana"], metric=M)
    with pytest.raises(LabelError, match="KV|reader"):
        edge_patch(llama, CLEAN, CORRUPT, ["embed→L1.attn.k[H3]"], metric=M)  # 2 KV heads only
    with pytest.raises(ArgumentError, match="twice"):
        edge_patch(llama, CLEAN, CORRUPT, [g.edges[0], g.edges[0]], metric=M)
    with pytest.raises(ArgumentError, match="circuit="):
        evaluate_circuit(llama, CLEAN, CORRUPT, "embed→unembed", metric=M)


def test_attribution_arguments(llama, bert):
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ArgumentError, match="ig_steps="):
            edge_attribution(llama, CLEAN, CORRUPT, metric=M, method="eap-ig", ig_steps=bad)
    with pytest.raises(ArgumentError, match="method="):
        edge_attribution(llama, CLEAN, CORRUPT, metric=M, method="acdc")
    with pytest.raises(ArgumentError, match="scale="):
        edge_attribution(llama, CLEAN, CORRUPT, metric=M, scale="kind of")
    with pytest.raises(ArgumentError, match="metric="):  # integer outputs have no gradient
        edge_attribution(llama, CLEAN, CORRUPT, metric=lambda out: out.argmax(-1))
    with pytest.raises(UnsupportedOperationError, match="metric="):  # logits of a model without them
        edge_attribution(bert, CLEAN, CORRUPT, metric=M)
    with pytest.raises(ShapeError, match="corrupt"):
        edge_attribution(llama, CLEAN, ["w1 w2"], metric=M)
    with pytest.raises(UnsupportedOperationError, match="inference_mode"):
        with torch.inference_mode():
            edge_attribution(llama, CLEAN, CORRUPT, metric=M)
    with pytest.raises(ArgumentError, match="reference"):
        evaluate_circuit(llama, CLEAN, None, [], metric=M, ablation="mean")
    with pytest.raises(ArgumentError, match="ablation="):
        evaluate_circuit(llama, CLEAN, CORRUPT, [], metric=M, ablation="blur")
    s = edge_attribution(llama, CLEAN, CORRUPT, metric=M, progress=False)
    with pytest.raises(ArgumentError, match="sizes="):
        faithfulness_curve(llama, CLEAN, CORRUPT, s, metric=M, sizes=(0.5, 0.1))
    with pytest.raises(ArgumentError, match="another graph"):
        faithfulness_curve(tiny_model("gpt2"), CLEAN, CORRUPT, s, metric=M)


def _state(model):
    params = list(model.bridge.parameters())
    w = [getattr(model.weights, f) for f in model.weights.__dataclass_fields__]
    return (
        count_hooks(model.bridge),
        [p.requires_grad for p in params],
        [p.grad is None for p in params],
        [t.requires_grad for t in w if isinstance(t, torch.Tensor)],
    )


@pytest.mark.parametrize("fam", ["llama", "bert"])
def test_no_hook_or_grad_flag_left_behind(fam):
    model = tiny_model(fam)
    metric = Direction(torch.ones(model.arch.d_model)) if fam == "bert" else M
    before = _state(model)
    g = circuit_graph(model)
    s = edge_attribution(model, CLEAN, CORRUPT, metric=metric, method="eap-ig", ig_steps=2, progress=False)
    edge_patch(model, CLEAN, CORRUPT, list(g.edges[:3]), metric=metric, progress=False)
    evaluate_circuit(model, CLEAN, CORRUPT, s.circuit(n=5), metric=metric)
    assert _state(model) == before

    def boom(out):
        raise RuntimeError("metric failed mid-pass")

    with pytest.raises(RuntimeError, match="mid-pass"):
        edge_attribution(model, CLEAN, CORRUPT, metric=boom, progress=False)
    with pytest.raises(RuntimeError, match="mid-pass"):
        edge_patch(model, CLEAN, CORRUPT, list(g.edges[:3]), metric=boom, progress=False)
    assert _state(model) == before
