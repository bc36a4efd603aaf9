"""Virtual weights W_O^src W_I^dst: dense products, label grammar, read-after-write order, norm table."""

import pytest
import torch

import interp.circuits as C
from interp.errors import ArgumentError, LabelError, UnsupportedOperationError


def _dense_write(m, src):
    w = m.weights
    if src == "embed":
        M = w.W_E
    elif src == "pos_embed":
        M = w.W_pos
    elif src.endswith(".mlp"):
        M = w.W_out[int(src[1 : src.index(".")])]
    else:
        layer, head = (int(x) for x in src[1:].split(".H"))
        M = w.W_O[layer, head]
    if m.arch.norm == "layernorm":  # centred writes
        M = M - M.mean(-1, keepdim=True)
    return M


def _dense_read(m, dst):
    w, a = m.weights, m.arch
    if dst == "unembed":
        M, g = w.W_U, w.lnf_w
    else:
        layer = int(dst[1 : dst.index(".")])
        if ".attn." in dst:
            kind, idx = dst.split(".attn.")[1][0], int(dst.split("[H")[1][:-1])
            M, g = {"q": w.W_Q, "k": w.W_K, "v": w.W_V}[kind][layer, idx], w.ln1_w[layer]
        else:
            M, g = (w.W_in if dst.endswith(".in") else w.W_gate)[layer], w.ln2_w[layer]
    if a.norm_placement == "pre" and a.norm != "none":
        M = torch.diag(g) @ M
        if a.norm == "layernorm":
            M = M - M.mean(0, keepdim=True)
    return M


PAIRS = [
    ("embed", "L0.attn.q[H1]"),
    ("L0.H2", "L1.attn.k[H1]"),
    ("L0.H3", "L1.attn.v[H0]"),
    ("L0.H0", "L0.mlp.in"),
    ("L0.mlp", "L1.attn.q[H3]"),
    ("L1.H1", "unembed"),
    ("L0.mlp", "unembed"),
    ("embed", "unembed"),
]


def test_virtual_weights_equal_dense_products(family_model):
    m = family_model
    for src, dst in PAIRS:
        if dst == "unembed" and m.weights.W_U is None:
            with pytest.raises(UnsupportedOperationError):
                C.virtual_weights(m, src, dst)
            continue
        if m.arch.parallel_attn_mlp and src == "L0.H0" and dst == "L0.mlp.in":
            continue  # refused, see test_parallel_block_mlp_does_not_read_its_own_heads
        vw = C.virtual_weights(m, src, dst)
        ref = _dense_write(m, src) @ _dense_read(m, dst)
        torch.testing.assert_close(vw.AB, ref, atol=1e-5, rtol=1e-5)
        assert vw.label == f"{src} → {dst}"


def test_gated_mlp_has_a_gate_read(tiny_models):
    m = tiny_models["llama"]
    torch.testing.assert_close(
        C.virtual_weights(m, "L0.H1", "L0.mlp.gate").AB,
        _dense_write(m, "L0.H1") @ _dense_read(m, "L0.mlp.gate"),
        atol=1e-5,
        rtol=1e-5,
    )
    with pytest.raises(LabelError, match="mlp.gate"):
        C.virtual_weights(tiny_models["gpt2"], "L0.H1", "L0.mlp.gate")


def test_pos_embed_only_for_learned_positions(tiny_models):
    m = tiny_models["gpt2"]
    torch.testing.assert_close(
        C.virtual_weights(m, "pos_embed", "L0.attn.k[H2]").AB,
        _dense_write(m, "pos_embed") @ _dense_read(m, "L0.attn.k[H2]"),
        atol=1e-5,
        rtol=1e-5,
    )
    with pytest.raises(LabelError, match="pos_embed"):
        C.virtual_weights(tiny_models["llama"], "pos_embed", "L0.attn.q[H0]")


def test_parallel_block_mlp_does_not_read_its_own_heads(tiny_models):
    with pytest.raises(ArgumentError, match="parallel"):
        C.virtual_weights(tiny_models["neox"], "L1.H0", "L1.mlp.in")
    C.virtual_weights(tiny_models["gpt2"], "L1.H0", "L1.mlp.in")  # sequential: allowed
    C.virtual_weights(tiny_models["neox"], "L0.H0", "L1.mlp.in")  # earlier layer: allowed


@pytest.mark.parametrize(
    "src,dst",
    [("L1.H0", "L0.attn.q[H0]"), ("L1.H0", "L1.attn.q[H0]"), ("L1.mlp", "L1.mlp.in"), ("L1.mlp", "L1.attn.k[H0]")],
)
def test_reads_not_after_the_write_are_refused(tiny_models, src, dst):
    with pytest.raises(ArgumentError, match=r"dst=.*does not read src="):
        C.virtual_weights(tiny_models["llama"], src, dst)


@pytest.mark.parametrize(
    "src,dst,name",
    [
        ("L9.H0", "unembed", "src"),
        ("L0.H4", "unembed", "src"),
        ("l0.h0", "unembed", "src"),
        ("L0.H0", "L1.attn.k[H3]", "dst"),
        ("L0.H0", "L1.attn.x[H0]", "dst"),
        ("L0.H0", "L5.mlp.in", "dst"),
        (3, "unembed", "src"),
        ("embed", None, "dst"),
    ],
)
def test_bad_labels(tiny_models, src, dst, name):
    with pytest.raises(LabelError, match=name + "="):
        C.virtual_weights(tiny_models["llama"], src, dst)


def test_kv_label_error_names_the_kv_head(tiny_models):
    with pytest.raises(LabelError, match=r"KV head 1, i.e. L1.attn.k\[H1\]"):
        C.virtual_weights(tiny_models["llama"], "L0.H0", "L1.attn.k[H3]")


def test_norm_table_equals_dense_norms(family_model):
    m = family_model
    t = C.virtual_weight_norms(m)
    assert t.writes == C.write_labels(m) and t.reads == C.read_labels(m)
    for i, src in enumerate(t.writes):
        for j, dst in enumerate(t.reads):
            v = float(t.values[i, j])
            ref = float(torch.linalg.norm(_dense_write(m, src).double() @ _dense_read(m, dst).double()))
            allowed = True
            try:
                C.virtual_weights(m, src, dst)
            except ArgumentError:
                allowed = False
            if allowed:
                assert v == pytest.approx(ref, rel=1e-4, abs=1e-6), (src, dst)
            else:
                assert v != v, (src, dst)  # NaN
    df = t.to_dataframe()
    assert len(df) == int((~torch.isnan(t.values)).sum())
    assert t[("embed", t.reads[0])] == pytest.approx(float(t.values[0, 0]))
    assert t.plot().data[0].type == "heatmap"
