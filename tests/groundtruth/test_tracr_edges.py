"""The true edge sets of the tracr programs: structure, an independent subspace-level derivation, and patching.

Patching uses zero ablation on the information dimensions (every dimension but ``one`` and BOS, which
the ground truth ignores), the ablation tracr's ground truth is exact for: the circuit alone reproduces
every logit, and removing any one true edge changes the logits on some input.
"""

import pytest
import torch
from groundtruth_edge_eval import all_edges, run_with_edges, writer_outputs

from interp.errors import ArgumentError
from interp.groundtruth import tracr_circuit
from interp.labels import Edge, Embed, Head, HeadInput, Mlp, MlpInput, Output, parse


def _time(label) -> int:
    """Order of a write / read in the forward pass (heads of layer l at 2l, its MLP at 2l+1)."""
    if isinstance(label, Embed):
        return -1
    if isinstance(label, Output):
        return 1 << 20
    if isinstance(label, (Head, HeadInput)):
        return 2 * label.layer
    return 2 * label.layer + 1


def _subspace_edges(p) -> set[Edge]:
    """Independent derivation at the level of subspaces: w writes subspace X, r reads X, w before r."""
    W, a = p.model.weights, p.model.arch
    names = [lab.split(":")[0] for lab in p.residual_labels]
    ignored = {i for i, lab in enumerate(p.residual_labels) if lab in ("one", p.bos_label)}

    def spaces(mask) -> set[str]:
        return {names[i] for i in range(len(names)) if mask[i] and i not in ignored}

    writers = {Embed("token"): spaces(W.W_E.abs().sum(0) > 0), Embed("pos"): spaces(W.W_pos.abs().sum(0) > 0)}
    readers = {Output("unembed"): spaces(W.W_U.abs().sum(1) > 0)}
    for l in range(a.n_layers):
        for h in range(a.n_heads):
            writers[Head(l, h)] = spaces(W.W_O[l, h].abs().sum(0) > 0)
            for which, M in (("q", W.W_Q), ("k", W.W_K), ("v", W.W_V)):
                readers[HeadInput(l, which, h)] = spaces(M[l, h].abs().sum(1) > 0)
        writers[Mlp(l)] = spaces(W.W_out[l].abs().sum(0) > 0)
        readers[MlpInput(l)] = spaces(W.W_in[l].abs().sum(1) > 0)
    return {Edge(w, r) for w, ws in writers.items() for r, rs in readers.items() if _time(w) < _time(r) and ws & rs}


def test_edges_are_forward_nonempty_and_reach_the_output(tracr_program):
    c = tracr_circuit(tracr_program)
    a = tracr_program.model.arch
    assert len(c) >= 4 and len(set(c.edges)) == len(c)
    for e in c.edges:
        assert _time(e.writer) < _time(e.reader), e
        layer = getattr(e.reader, "layer", None)
        assert layer is None or layer < a.n_layers
    assert any(e.reader == Output("unembed") for e in c.edges)
    # every writer in the circuit reaches unembed along circuit edges
    succ: dict = {}
    for e in c.edges:
        succ.setdefault(e.writer, set()).add(e.reader)

    def component(reader):
        return (
            Head(reader.layer, reader.head)
            if isinstance(reader, HeadInput)
            else (Mlp(reader.layer) if isinstance(reader, MlpInput) else reader)
        )

    def reaches(w, seen=()):
        return any(
            r == Output("unembed") or (component(r) not in seen and reaches(component(r), (*seen, w)))
            for r in succ.get(w, ())
        )

    assert all(reaches(w) for w in succ), [w for w in succ if not reaches(w)]
    # every non-embedding writer in the circuit is itself fed by the circuit
    fed = {component(e.reader) for e in c.edges}
    assert all(isinstance(w, Embed) or w in fed for w in succ)


def test_dimension_rule_equals_the_subspace_rule(tracr_program):
    assert set(tracr_circuit(tracr_program).edges) == _subspace_edges(tracr_program)


def test_reverse_structure(tracr_programs):
    p = tracr_programs("reverse")
    c = tracr_circuit(p)
    labels = list(p.residual_labels)
    W = p.model.weights

    def writer_of(prefix):  # the MLP or head whose output columns cover the subspace
        dims = [i for i, lab in enumerate(labels) if lab.split(":")[0] == prefix]
        out = [Mlp(l) for l in range(p.model.arch.n_layers) if W.W_out[l][:, dims].abs().sum() > 0]
        out += [
            Head(l, h)
            for l in range(p.model.arch.n_layers)
            for h in range(p.model.arch.n_heads)
            if W.W_O[l, h][:, dims].abs().sum() > 0
        ]
        assert len(out) == 1, (prefix, out)
        return out[0]

    length = writer_of(next(x.split(":")[0] for x in labels if x.startswith("length") and "selector" not in x))
    reversal = writer_of(p.output_label)
    assert isinstance(length, Mlp) and isinstance(reversal, Head)
    q = HeadInput(reversal.layer, "q", reversal.head)
    # the length MLP feeds the reversal head's query through opp_idx = length - index (- 1)
    chain, frontier = set(), {length}
    while frontier:
        w = frontier.pop()
        for e in c.edges:
            if e.writer == w and isinstance(e.reader, MlpInput) and Mlp(e.reader.layer) not in chain:
                chain.add(Mlp(e.reader.layer))
                frontier.add(Mlp(e.reader.layer))
    assert any(Edge(m, q) in set(c.edges) for m in chain | {length})
    opp = next(x.split(":")[0] for x in labels if x.startswith("opp_idx-1"))  # tracr appends an id
    assert c.via[c.labels.index(str(Edge(writer_of(opp), q)))] == opp
    assert Edge(Embed("pos"), HeadInput(reversal.layer, "k", reversal.head)) in set(c.edges)  # key: index
    assert Edge(Embed("token"), HeadInput(reversal.layer, "v", reversal.head)) in set(c.edges)  # value: token
    assert Edge(reversal, Output("unembed")) in set(c.edges)
    assert str(Edge(length, q)) not in c  # only through opp_idx: no direct edge
    assert len(c) == 10


def test_hist_and_frac_prevs_exact_sets(tracr_programs):
    assert set(tracr_circuit(tracr_programs("hist")).labels) == {
        "embed→L0.attn.q[H0]",
        "embed→L0.attn.k[H0]",
        "L0.H0→L0.mlp.in",
        "L0.mlp→unembed",
    }
    assert set(tracr_circuit(tracr_programs("frac_prevs")).labels) == {
        "embed→L0.mlp.in",
        "L0.mlp→L1.attn.v[H0]",
        "pos_embed→L1.attn.q[H0]",
        "pos_embed→L1.attn.k[H0]",
        "L1.H0→unembed",
    }


def test_true_circuit_api(tracr_programs):
    p = tracr_programs("hist")
    c = tracr_circuit(p)
    cand = all_edges(p.model)
    mask = c.truth(cand)
    assert mask.dtype == torch.bool and int(mask.sum()) == len(c) == 4
    assert "L0.mlp→unembed" in c and parse("L0.mlp→unembed") in c and "embed→unembed" not in c
    df = c.to_dataframe()
    assert list(df.columns) == ["edge", "writer", "reader", "via"] and len(df) == 4
    with pytest.raises(ArgumentError):
        tracr_circuit(p.model)
    with pytest.raises(ArgumentError, match="not residual labels"):
        tracr_circuit(p, ignored=["one", "tokens:nope"])


@pytest.mark.slow
def test_zero_ablation_circuit_is_exact_and_every_edge_is_needed(tracr_program):
    p = tracr_program
    m, c = p.model, tracr_circuit(p)
    info = torch.tensor([lab not in ("one", p.bos_label) for lab in p.residual_labels], dtype=m.dtype)
    rest = [e for e in all_edges(m) if e not in set(c.edges)]
    needed = {e: 0 for e in c.edges}
    for length in range(1, p.max_seq_len + 1):
        tokens = p.encode(p.inputs([length]))
        with torch.no_grad():
            clean = m.bridge(tokens)
        zero = {w: t * (1 - info) for w, t in writer_outputs(m, tokens).items()}  # keep only `one` / BOS
        # the helper itself: removing an edge with its own value as the ablation changes nothing
        assert torch.equal(run_with_edges(m, tokens, removed=[], ablated=zero), clean)
        circuit_only = run_with_edges(m, tokens, removed=rest, ablated=zero)
        assert (circuit_only - clean).abs().max() < 1e-5, length
        for e in c.edges:
            changed = (run_with_edges(m, tokens, removed=[e], ablated=zero) - clean).abs().amax(dim=(1, 2)) > 0.01
            needed[e] += int(changed.sum())
    assert all(n > 0 for n in needed.values()), {str(e): n for e, n in needed.items() if n == 0}
