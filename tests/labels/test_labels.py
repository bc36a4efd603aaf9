"""The label grammar: every label of every tiny family round-trips through str and parse."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from interp import labels as L
from interp.errors import LabelError
from tiny_models import FAMILIES, tiny_arch


def _model_labels(a) -> list[str]:
    """Every label a model of shape ``a`` (an ArchInfo) has, written out (independently of interp's own lists)."""
    out = ["embed", "unembed", "final", "final_bias", "ln_final", "unembed_bias", "embed_ln", "embed_ln_bias"]
    if a.positional == "learned":
        out.append("pos_embed")
    for l in range(a.n_layers):
        out += [f"L{l}.H{h}" for h in range(a.n_heads)]
        out += [f"L{l}.attn.q[H{h}]" for h in range(a.n_heads)]
        out += [f"L{l}.attn.{kv}[H{g}]" for kv in "kv" for g in range(a.n_kv_heads)]
        out += [
            f"L{l}.mlp",
            f"L{l}.mlp.in",
            f"L{l}.mlp.gate",
            f"L{l}.attn",
            f"L{l}.attn_bias",
            f"L{l}.mlp_bias",
            f"L{l}.ln1",
            f"L{l}.ln2",
            f"L{l}.ln1_bias",
            f"L{l}.ln2_bias",
        ]
        out += [f"L{l}.N{n}" for n in range(0, a.d_mlp, 7)]
        out += [f"blocks.{l}.hook_resid_{w}" for w in ("pre", "mid", "post")]
        out += [f"embed→L{l}.H{h}" for h in range(a.n_heads)]
        out += [f"L{l}.H0→unembed", f"embed→L{l}.mlp.in", f"L{l}.mlp→unembed"]
        if l:
            out += [f"pos_embed→L0.H1→L{l}.H{h}" for h in range(a.n_heads)]
            out += [f"L0.H{h}→L{l}.attn.k[H{g}]" for h in range(a.n_heads) for g in range(a.n_kv_heads)]
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_every_label_of_every_tiny_family_round_trips(family):
    texts = _model_labels(tiny_arch(family))  # the labels need the shape only: no weights, no forward
    for t in texts:
        lab = L.parse(t)
        assert str(lab) == t
        assert L.parse(str(lab)) == lab
        assert type(lab).parse(t) == lab
    assert len({L.parse(t) for t in texts}) == len(set(texts))  # distinct text ⇔ distinct label


def test_kinds_and_fields():
    assert L.parse("L3.H5") == L.Head(3, 5)
    assert L.parse("L3.attn.k[H1]") == L.HeadInput(3, "k", 1)
    assert L.parse("L2.ln1_bias") == L.NormBias(L.Norm(2, "ln1"))
    assert L.parse("final_bias") == L.NormBias(L.Norm(None, "final"))
    assert L.parse("final") == L.Output("final")
    assert L.parse("blocks.4.hook_resid_mid") == L.Resid(4, "mid")
    assert L.parse("L3.mlp_error@5") == L.FeatureError(3, 5) and L.parse("L3.F12@*") == L.Feature(3, 12, None)
    assert L.parse("L3.mlp_error@*") == L.FeatureError(3, None) and str(L.FeatureError(3, None)) == "L3.mlp_error@*"
    e = L.parse("L0.H3→L1.attn.k[H2]")
    assert isinstance(e, L.Edge) and e.writer == L.Head(0, 3) and e.reader == L.HeadInput(1, "k", 2)
    p = L.parse("embed→L0.H1→L1.H2")
    assert isinstance(p, L.Path) and p.order == 2 and p.source == L.Embed("token")
    assert str(L.Path(L.Bias(0, "attn"), (L.Head(1, 2),))) == "L0.attn_bias→L1.H2"
    assert sorted([L.Head(2, 0), L.Head(0, 3), L.Mlp(1)]) == [L.Head(0, 3), L.Mlp(1), L.Head(2, 0)]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "L3",
        "L3.H",
        "l3.h5",
        "L3.H5 ",
        "L3.attn.q[5]",
        "embed→",
        "L1.H2→embed",
        "L0.H1→L1.mlp.in→unembed",
        "blocks.3.hook_resid",
        3,
        None,
    ],
)
def test_bad_labels_raise_label_error(bad):
    with pytest.raises(LabelError):
        L.parse(bad)


def test_typed_parse_names_argument():
    with pytest.raises(LabelError, match="src='L3.attn.q"):
        L.parse_write("L3.attn.q[H1]", name="src")
    with pytest.raises(LabelError, match="dst='L3.H1'"):
        L.parse_read("L3.H1", name="dst")
    assert L.parse_read(L.Output()) == L.Output("unembed")


@given(st.integers(0, 999), st.integers(0, 999), st.sampled_from("qkv"))
def test_head_labels_round_trip(layer, head, which):
    for lab in (
        L.Head(layer, head),
        L.HeadInput(layer, which, head),
        L.Neuron(layer, head),
        L.Edge(L.Head(layer, head), L.HeadInput(layer + 1, which, head)),
    ):
        assert L.parse(str(lab)) == lab


@given(st.integers(0, 999), st.integers(0, 999), st.integers(0, 99_999))
def test_head_source_labels_round_trip(layer, head, src):
    lab = L.HeadSource(layer, head, src)
    assert str(lab) == f"L{layer}.H{head}[src={src}]"
    assert L.parse(str(lab)) == lab and L.HeadSource.parse(str(lab)) == lab
    assert lab.head_label == L.Head(layer, head)
    assert isinstance(L.parse(f"L{layer}.H{head}"), L.Head)  # the plain head is still a Head


def test_target_terms_and_bad_head_sources():
    assert L.parse("log_partition") == L.TargetTerm("log_partition")
    assert str(L.parse("wrong_lse_remainder")) == "wrong_lse_remainder"
    for bad in ("L3.H5[src=]", "L3.H5[src=-1]", "L3.H5[4]", "L3.H5@4", "L3.H5[src=4"):
        with pytest.raises(LabelError):
            L.parse(bad)
    with pytest.raises(LabelError, match="label='L3.H5\\[src=2\\]'"):
        L.parse_write("L3.H5[src=2]")  # a part of a head's write, not a write of the block program
