"""Tracr-compiled programs load as interp Models that compute exactly what the RASP program computes."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import interp
from interp.errors import ArgumentError, MissingPackageError
from interp.groundtruth import compile_program, program_names
from interp.models._tracr import tracr_state_dict


def test_at_least_the_issue_programs():
    assert {"reverse", "frac_prevs", "sort", "hist"} <= set(program_names())


@pytest.mark.slow
def test_import_interp_never_imports_jax_or_tracr():
    code = (
        "import sys, interp, interp.groundtruth, interp.models; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'jax', 'jaxlib', 'tracr', 'haiku', 'chex'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_tracr_is_a_typed_error_naming_the_extra(monkeypatch):
    for mod in ("tracr", "tracr.compiler", "tracr.rasp"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError
    with pytest.raises(MissingPackageError, match=r"interp\[groundtruth\]"):
        compile_program("hist")


def test_unknown_program_is_an_argument_error():
    with pytest.raises(ArgumentError, match="reverse"):
        compile_program("reverse_sort")


def test_outputs_equal_rasp_on_every_input(tracr_program):
    p = tracr_program
    n_inputs = 0
    for length in range(1, p.max_seq_len + 1):
        inputs = p.inputs([length])
        got, want = p.run(inputs), p.expected(inputs)
        n_inputs += len(inputs)
        if p.numerical:
            err = max(abs(g - w) for gs, ws in zip(got, want) for g, w in zip(gs, ws))
            assert err < 1e-4, (length, err)
        else:
            bad = [(s, g, w) for s, g, w in zip(inputs, got, want) if g != w]
            assert not bad, bad[:3]
    assert n_inputs == sum(len(p.vocab) ** n for n in range(1, p.max_seq_len + 1))


def _tracr_readout(p, seq):
    """tracr's own (jax) forward: the final residual read at the output's labelled dimensions."""
    out = p.compiled.apply([p.bos, *seq])
    resid = np.asarray(out.transformer_output, dtype=np.float64)[0]  # [pos, d_model]
    labels = list(p.residual_labels)
    if p.numerical:
        cols = [labels.index(p.output_label)]
    else:
        cols = [labels.index(f"{p.output_label}:{v}") for v in p.output_values]
    return resid[:, cols], out.decoded[1:]


def test_logits_equal_tracrs_own_forward(tracr_program):
    p = tracr_program
    g = torch.Generator().manual_seed(0)
    inputs = p.inputs([p.max_seq_len])
    pick = torch.randperm(len(inputs), generator=g)[:6].tolist()
    for i in pick:
        seq = inputs[i]
        want, decoded = _tracr_readout(p, seq)
        logits = p.logits([seq])[0].double().numpy()
        np.testing.assert_allclose(logits, want, atol=1e-5)
        if not p.numerical:
            assert p.run([seq])[0] == list(decoded)


@pytest.mark.parametrize("name", ["reverse", "sort", "hist"])
def test_state_dict_equals_transformer_lens_converter(tracr_programs, name):
    from transformer_lens.utilities.tracr import make_tracr_transformer_bridge_state_dict

    p = tracr_programs(name)
    ours, theirs = tracr_state_dict(p.compiled), make_tracr_transformer_bridge_state_dict(p.compiled)
    assert sorted(ours) == sorted(theirs)
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k


def test_numerical_output_is_a_one_column_readout(tracr_programs):
    from transformer_lens.utilities.tracr import make_tracr_transformer_bridge_state_dict

    p = tracr_programs("frac_prevs")
    with pytest.raises(NotImplementedError):  # transformer-lens refuses numerical outputs
        make_tracr_transformer_bridge_state_dict(p.compiled)
    W_U = p.model.weights.W_U
    assert p.numerical and W_U.shape == (p.model.arch.d_model, 1)
    assert torch.nonzero(W_U[:, 0]).flatten().tolist() == [list(p.residual_labels).index(p.output_label)]
    assert W_U[:, 0].sum() == 1


def test_arch_and_weights_records(tracr_program):
    p = tracr_program
    a, W, c = p.model.arch, p.model.weights, p.compiled.model_config
    assert (a.norm, a.act_fn, a.positional, a.family, a.attn_only) == ("none", "relu", "learned", "native", False)
    assert (a.n_layers, a.n_heads, a.d_head, a.d_mlp) == (c.num_layers, c.num_heads, c.key_size, c.mlp_hidden_size)
    assert a.d_model == len(p.residual_labels) and a.n_ctx == p.max_seq_len + 1 and a.has_logits
    # W_Q in TL layout against tracr's raw haiku parameter [d_model, n_heads * key_size]
    raw = np.asarray(p.compiled.params["transformer/layer_0/attn/query"]["w"])
    np.testing.assert_array_equal(W.W_Q[0].permute(1, 0, 2).reshape(a.d_model, -1).numpy(), raw)
    raw_in = np.asarray(p.compiled.params["transformer/layer_0/mlp/linear_1"]["w"])
    np.testing.assert_array_equal(W.W_in[0].numpy(), raw_in)


def test_interp_trace_decomposes_the_output_exactly(tracr_programs):
    p = tracr_programs("reverse")
    tokens = p.encode(p.inputs([4])[:8])
    tr = interp.trace(p.model, tokens)
    d = tr.decompose("unembed")
    assert d.closure_error < 1e-5
    assert {"embed", "pos_embed", "L3.H0", "L0.mlp"} <= set(d.labels)


def test_tokenizer_round_trip_and_unknown_words(tracr_programs):
    p = tracr_programs("hist")
    assert p.model.to_tokens("a b c").tolist() == p.encode([("a", "b", "c")]).tolist()
    with pytest.raises(ArgumentError):
        interp.trace(p.model, p.model.to_tokens("a q"))  # "q" is no token: its id is outside the vocabulary
    with pytest.raises(ArgumentError, match="outside the vocabulary"):
        p.encode([("a", "q")])
    with pytest.raises(ArgumentError, match="one length"):
        p.encode([("a",), ("a", "b")])
