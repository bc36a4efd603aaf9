"""The shipped toy's induction circuit: heads found from attention patterns, confirmed by exact edge patching."""

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from groundtruth_edge_eval import all_edges, run_with_edges, writer_outputs

from interp.errors import ArgumentError, UnsupportedOperationError
from interp.groundtruth import induction_circuit
from interp.labels import Head
from interp.toy import random_tokens, repeated_tokens

N = 15  # repeated span: <bos> + 15 words + the same 15 words = the toy's 31 positions


@pytest.fixture(scope="module")
def circuit(toy2l):
    return induction_circuit(toy2l)


@pytest.fixture(scope="module")
def data(toy2l):
    g = torch.Generator().manual_seed(7)  # not the seed the heads were found with
    rep = repeated_tokens(64, N, toy2l.arch.d_vocab, generator=g)
    rnd = random_tokens(64, 2 * N + 1, toy2l.arch.d_vocab, generator=g)
    return rep, rnd


def _second_half_loss(logits, rep) -> float:
    """Mean loss of the predictions of tokens N+2 … 2N (the ones induction can make)."""
    nll = -F.log_softmax(logits.double(), -1)[:, :-1].gather(-1, rep[:, 1:, None])[..., 0]
    return float(nll[:, N + 1 :].mean())


def test_heads_match_the_training_record(toy2l, circuit):
    """The heads found now equal those the training script's own probe recorded (independent code)."""
    meta = json.loads((Path(toy2l.source) / "config.json").read_text())
    final = meta["training"]["final"]
    prev = [f"L{l}.H{h}" for l, row in enumerate(final["prev_token_score"]) for h, v in enumerate(row) if v >= 0.5]
    ind = [f"L{l}.H{h}" for l, row in enumerate(final["induction_score"]) for h, v in enumerate(row) if v >= 0.5]
    assert circuit.details["previous_token_heads"] == prev == ["L0.H3"]
    assert circuit.details["induction_heads"] == ind == ["L1.H0", "L1.H1", "L1.H2", "L1.H3"]


def test_edge_set(circuit):
    labels = set(circuit.labels)
    assert len(circuit) == 3 + 4 * 4
    for h in range(4):
        assert {
            f"L0.H3→L1.attn.k[H{h}]",
            f"embed→L1.attn.q[H{h}]",
            f"embed→L1.attn.v[H{h}]",
            f"L1.H{h}→unembed",
        } <= labels
    assert {"embed→L0.attn.v[H3]", "pos_embed→L0.attn.q[H3]", "pos_embed→L0.attn.k[H3]"} <= labels
    assert all(e.writer.layer_index < e.reader.layer_index for e in circuit.edges)  # attention-only: strictly later


def test_helper_is_exact_when_nothing_is_ablated(toy2l, data):
    rep, _ = data
    own = writer_outputs(toy2l, rep)
    with torch.no_grad():
        clean = toy2l.bridge(rep)
    assert torch.equal(run_with_edges(toy2l, rep, removed=[], ablated=own), clean)
    # every edge "ablated" to this run's own writes: the same logits, up to float re-association
    assert (run_with_edges(toy2l, rep, removed=all_edges(toy2l), ablated=own) - clean).abs().max() < 1e-4


@pytest.mark.slow
def test_patching_confirms_the_circuit(toy2l, circuit, data):
    rep, rnd = data
    uniform = math.log(toy2l.arch.d_vocab - 2)
    with torch.no_grad():
        clean = _second_half_loss(toy2l.bridge(rep), rep)
    resample = writer_outputs(toy2l, rnd)  # each write as it is on random words
    edges, true = all_edges(toy2l), set(circuit.edges)

    def loss(removed):
        return _second_half_loss(run_with_edges(toy2l, rep, removed=removed, ablated=resample), rep)

    prev_to_k = [e for e in circuit.edges if e.writer == Head(0, 3) and e.reader.which == "k"]
    assert len(prev_to_k) == 4
    assert clean < 0.1
    assert loss(prev_to_k) > uniform - 0.3  # K-composition cut: induction gone (measured 5.49 vs clean 0.03)
    assert loss(edges) > uniform - 0.3  # everything ablated
    assert loss([e for e in edges if e not in true]) < 0.25  # the circuit alone still induces (measured 0.11)
    for e in circuit.edges:  # each edge that carries token information is needed
        if str(e.writer) != "pos_embed":
            assert loss([e]) > clean + 0.05, e


def test_positional_edges_show_only_under_zero_ablation(toy2l, circuit, data):
    """pos_embed's write depends on the position only: resampling it (same positions) changes nothing,
    zeroing it destroys the previous-token head and with it induction."""
    rep, rnd = data
    pos = [e for e in circuit.edges if str(e.writer) == "pos_embed"]
    assert len(pos) == 2
    resample = writer_outputs(toy2l, rnd)
    zero = {w: torch.zeros_like(t) for w, t in writer_outputs(toy2l, rep).items()}
    with torch.no_grad():
        clean = toy2l.bridge(rep)
    assert (run_with_edges(toy2l, rep, removed=pos, ablated=resample) - clean).abs().max() < 1e-4
    for e in pos:
        assert _second_half_loss(run_with_edges(toy2l, rep, removed=[e], ablated=zero), rep) > 4.0, e


@pytest.mark.slow
def test_errors(toy2l, tiny_models):
    with pytest.raises(ArgumentError, match="threshold"):
        induction_circuit(toy2l, threshold=1.5)
    with pytest.raises(UnsupportedOperationError, match="previous-token"):
        induction_circuit(toy2l, threshold=0.99)
    with pytest.raises(UnsupportedOperationError, match="attention-only"):
        induction_circuit(tiny_models["gpt2"])
    with pytest.raises(ArgumentError, match="n="):
        induction_circuit(toy2l, n=40)
