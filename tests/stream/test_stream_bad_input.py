"""Bad input to trace()/decompose(): each a typed InterpError whose message names the argument."""

from __future__ import annotations

import pytest
import torch

from interp.errors import ArgumentError, InterpError, LabelError, ShapeError
from interp.stream.internal import count_hooks
from interp.stream import trace
from tiny_models import tiny_model


@pytest.fixture(scope="module")
def llama():
    """GQA (4 query heads, 2 KV heads), 2 layers, vocab 100, n_ctx 64."""
    return tiny_model("llama")


@pytest.fixture(scope="module")
def tr(llama):
    return trace(llama, ["w1 w2 w3", "w4"])


def _raises(kind, *names):
    """pytest.raises for an InterpError subclass ``kind`` whose message contains every name."""

    class _Ctx:
        def __enter__(self):
            self._c = pytest.raises(kind)
            self.info = self._c.__enter__()
            return self.info

        def __exit__(self, *exc):
            out = self._c.__exit__(*exc)
            assert isinstance(self.info.value, InterpError)
            msg = str(self.info.value)
            for n in names:
                assert n in msg, (n, msg)
            return out

    return _Ctx()


# ---- labels ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "label, nearest",
    [
        ("L0.attn.z[H0]", "L0.attn.q[H0]"),  # unknown kind of read
        ("L0.mlp.inn", "L0.mlp.in"),  # typo
        ("unembd", "unembed"),
        ("blocks.0.hook_resid_pst", "blocks.0.hook_resid_post"),
    ],
)
def test_unknown_read_label_lists_nearest(tr, label, nearest):
    with _raises(LabelError, "read_label=", repr(label), "nearest", repr(nearest)):
        tr.decompose(label)


@pytest.mark.parametrize(
    "label",
    [
        "L2.attn.q[H0]",
        "L7.mlp.in",
        "blocks.2.hook_resid_pre",  # layer out of range (2 layers)
        "L0.attn.q[H4]",  # query head out of range (4 heads)
        "L0.attn.k[H2]",
        "L1.attn.v[H3]",  # KV head out of range (2 KV heads)
        "L-1.mlp.in",
    ],
)
def test_layer_or_head_out_of_range_in_label(tr, label):
    with _raises(LabelError, "read_label=", repr(label), "nearest"):
        tr.decompose(label)


def test_a_write_label_is_not_a_read(tr):
    with _raises(LabelError, "read_label=", "'L0.H0'"):
        tr.decompose("L0.H0")
    with _raises(LabelError, "read_label="):
        tr.decompose(0)


def test_label_error_is_also_a_key_and_value_error(tr):
    with pytest.raises(KeyError):
        tr.decompose("nope")
    with pytest.raises(ValueError):
        tr.decompose("nope")


@pytest.mark.parametrize("label, nearest", [("L0.H9", "L0.H3"), ("L1.mpl", "L1.mlp"), ("embedd", "embed")])
def test_unknown_write_label_lists_nearest(tr, label, nearest):
    d = tr.decompose("unembed")
    with _raises(LabelError, "label=", repr(label), "nearest", repr(nearest)):
        d[label]


# ---- token ids and shapes -------------------------------------------------------------------


@pytest.mark.parametrize("ids, bad", [([[1, 100]], "100"), ([[1, 5, 250]], "250"), ([[-1, 5]], "-1")])
def test_token_ids_out_of_vocab(llama, ids, bad):
    with _raises(ArgumentError, "inputs", bad, "d_vocab=100"):
        trace(llama, torch.tensor(ids))


@pytest.mark.parametrize(
    "inputs",
    [
        "",
        "   ",
        ["w1", ""],
        [],
        torch.zeros(0, dtype=torch.long),
        torch.zeros(1, 0, dtype=torch.long),
        torch.zeros(0, 3, dtype=torch.long),
        [[]],
    ],
    ids=["str", "blank-str", "str-in-list", "list", "tensor-1d", "tensor-2d", "tensor-no-rows", "nested-list"],
)
def test_empty_input(llama, inputs):
    with _raises(ArgumentError, "inputs", "empty"):
        trace(llama, inputs)


def test_sequence_longer_than_n_ctx(llama):
    assert llama.arch.n_ctx == 64
    trace(llama, torch.ones(1, 64, dtype=torch.long))  # exactly n_ctx is fine
    with _raises(ArgumentError, "inputs", "65", "n_ctx=64"):
        trace(llama, torch.ones(1, 65, dtype=torch.long))
    with _raises(ArgumentError, "inputs", "n_ctx=64"):
        trace(llama, " ".join(["w1"] * 70))


def test_inconsistent_batch(llama):
    with _raises(ShapeError, "inputs", "different lengths"):
        trace(llama, [[1, 2, 3], [1, 2]])
    with _raises(ShapeError, "inputs", "'a'"):
        trace(llama, [[1, 2, 3], [1, 2, "a"]])
    with _raises(ShapeError, "inputs", "[batch, pos]"):
        trace(llama, torch.ones(2, 3, 4, dtype=torch.long))
    with _raises(ShapeError, "inputs", "dtype"):
        trace(llama, torch.ones(2, 3))
    with _raises(ArgumentError, "inputs"):
        trace(llama, ["w1", 3])
    with _raises(ArgumentError, "inputs"):
        trace(llama, 5)


def test_bad_attention_mask(llama):
    ids = torch.tensor([[1, 5, 6]])
    with _raises(ShapeError, "attention_mask", "(1, 2)"):
        trace(llama, ids, attention_mask=torch.ones(1, 2))
    with _raises(ArgumentError, "attention_mask"):
        trace(llama, ids, attention_mask=torch.zeros(1, 3))
    with _raises(ArgumentError, "attention_mask", "0", "1"):
        trace(llama, ids, attention_mask=torch.tensor([[1, 2, 1]]))
    with _raises(ArgumentError, "attention_mask", "text"):  # strings are padded for you
        trace(llama, ["w1 w2", "w3"], attention_mask=torch.ones(2, 3))


# ---- directions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "U",
    [
        torch.ones(31),
        torch.ones(3, 33),
        torch.ones(3, 2, 32),
        torch.ones(1, 1, 1, 32),
        torch.ones(0, 32),
    ],
    ids=["1d-wrong", "2d-wrong", "batch-wrong", "4d", "no-directions"],
)
def test_directions_of_wrong_shape(llama, tr, U):
    with _raises(ShapeError, "project_onto", str(tuple(U.shape))):
        tr.decompose("unembed", project_onto=U)
    with _raises(ShapeError, "project_onto"):
        trace(llama, "w1 w2", project_onto=U)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_directions_with_nan_or_inf(llama, tr, bad):
    U = torch.ones(2, 32)
    U[1, 3] = bad
    with _raises(ArgumentError, "project_onto", "NaN"):
        tr.decompose("unembed", project_onto=U)
    with _raises(ArgumentError, "project_onto", "NaN"):
        trace(llama, "w1 w2", project_onto=U)


def test_directions_of_wrong_dtype(tr):
    with _raises(ShapeError, "project_onto", "int64"):
        tr.decompose("unembed", project_onto=torch.ones(2, 32, dtype=torch.long))
    with _raises(ShapeError, "project_onto"):
        tr.decompose("unembed", project_onto=[[1.0, 2.0], [1.0]])


# ---- other options --------------------------------------------------------------------------


@pytest.mark.parametrize("neurons", [[2], [-1], [0, 5], "all", 1.5, [0.5], [True]])
def test_bad_neuron_layers(llama, neurons):
    with _raises(ArgumentError, "neurons="):
        trace(llama, "w1 w2", neurons=neurons)


def test_neurons_accept_any_integer_sequence(llama):
    assert trace(llama, "w1 w2", neurons=range(1, 2)).neuron_layers == (1,)
    assert trace(llama, "w1 w2", neurons=(torch.tensor(0),)).neuron_layers == (0,)


def test_bad_table_arguments(tr):
    d = tr.decompose("unembed")
    with _raises(ArgumentError, "k="):
        d.top(0)
    with _raises(ArgumentError, "batch=5"):
        d.to_dataframe(batch=5)
    with _raises(ArgumentError, "pos=99"):
        d.to_dataframe(pos=99)


def test_no_hook_left_by_rejected_input(llama):
    n = count_hooks(llama.bridge)
    for bad in ("", torch.tensor([[1, 100]]), torch.ones(1, 65, dtype=torch.long)):
        with pytest.raises(InterpError):
            trace(llama, bad)
    with pytest.raises(InterpError):
        trace(llama, "w1", project_onto=torch.ones(3))
    assert count_hooks(llama.bridge) == n
