"""compile_program on your own tracr RASP program: tracr's library programs whose output value set is shared by
another SOp (``make_shuffle_dyck``, ``make_count_less_freq``) compile with the program's own label as the output,
their outputs equal RASP's own evaluator and tracr's own forward, and they feed tracr_task / edge_ranking."""

from __future__ import annotations

import numpy as np
import pytest

from interp.errors import ArgumentError
from interp.groundtruth import compile_program, edge_ranking, tracr_circuit, tracr_task

pytestmark = pytest.mark.slow  # compiles tracr programs (jax): out of the fast tier

lib = pytest.importorskip("tracr.compiler.lib")


@pytest.fixture(scope="module")
def own():
    return {
        "dyck": compile_program(
            lib.make_shuffle_dyck(pairs=["()", "{}"]).named("dyck"), vocab={"(", ")", "{", "}"}, max_seq_len=4
        ),
        "less_freq": compile_program(
            lib.make_count_less_freq(n=2).named("less_freq"), vocab=["a", "b", "c"], max_seq_len=4
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize("key", ["dyck", "less_freq"])
def test_outputs_equal_rasp_and_tracrs_forward(own, key):
    p = own[key]
    assert p.name == p.output_label == p.program.label and p.name.startswith(key) and not p.numerical  # its own label
    key = p.output_label
    # tracr's inference would have been ambiguous: other SOps share the output's value set
    names = {lab.rpartition(":")[0] for lab in p.residual_labels if ":" in lab}
    values = {lab.rpartition(":")[2] for lab in p.residual_labels if lab.startswith(key + ":")}
    assert [
        n
        for n in names
        if {lab.rpartition(":")[2] for lab in p.residual_labels if lab.rpartition(":")[0] == n} == values and n != key
    ]
    for n in range(1, p.max_seq_len + 1):
        inputs = p.inputs([n])
        got, want = p.run(inputs), p.expected(inputs)
        bad = [(s, g, w) for s, g, w in zip(inputs, got, want) if g != w]
        assert not bad, bad[:3]
    labels = list(p.residual_labels)
    cols = [labels.index(f"{p.output_label}:{v}") for v in p.output_values]
    for seq in p.inputs([p.max_seq_len])[::37]:
        out = p.compiled.apply([p.bos, *seq])  # tracr's own (jax) forward, read at the output's dimensions
        want = np.asarray(out.transformer_output, dtype=np.float64)[0][:, cols]
        np.testing.assert_allclose(p.logits([seq])[0].double().numpy(), want, atol=1e-5)


def test_feeds_tracr_task_and_edge_ranking(own):
    p = own["less_freq"]
    task = tracr_task(p, max_inputs=12)
    assert task.truth.edges == tracr_circuit(p).edges and len(task.truth) > 0
    r = edge_ranking(task, "edge-patching", "zero")
    assert 0.0 <= r.auc <= 1.0 and len(r.labels) > 0


@pytest.mark.slow
def test_output_label_and_bad_input():
    sop = lib.make_count_less_freq(n=2)
    p = compile_program(sop, vocab={"a", "b", "c"}, max_seq_len=3)
    hist = next(lab.rpartition(":")[0] for lab in p.residual_labels if lab.startswith("hist"))
    q = compile_program(sop, vocab={"a", "b", "c"}, max_seq_len=3, output_label=hist)
    assert q.output_label == hist
    inputs = q.inputs([3])
    hist_sop = lib.make_hist()  # the histogram the output label now reads, by RASP's evaluator
    from tracr.rasp import rasp

    assert q.run(inputs) == [list(rasp.evaluate(hist_sop, list(s))) for s in inputs]
    sop = lib.make_hist()
    with pytest.raises(ArgumentError, match="vocab=None must be a non-empty set"):
        compile_program(sop, max_seq_len=3)
    with pytest.raises(ArgumentError, match="max_seq_len=0 must be a positive int"):
        compile_program(sop, vocab={"a"}, max_seq_len=0)
    with pytest.raises(ArgumentError, match="output_label='nope' is not a residual subspace"):
        compile_program(sop, vocab={"a", "b"}, max_seq_len=3, output_label="nope")
    with pytest.raises(ArgumentError, match="vocab=.*the shipped program 'hist' has its own vocab"):
        compile_program("hist", vocab={"a"})
    with pytest.raises(ArgumentError, match="program=int must be a shipped name"):
        compile_program(3)
    with pytest.raises(ArgumentError, match="program='nope' is not a known program"):
        compile_program("nope")
