"""One grammar: no module outside interp/labels.py spells labels itself, and every label interp produces
for a tiny model of each family round-trips through ``parse(str(x))``."""

from __future__ import annotations

import pathlib
import re

import pytest

import interp
from interp import labels as L
from interp.attribution import attribute_logits
from interp.circuits import read_labels, write_labels
from interp.models.internal import build_program
from tiny_models import FAMILIES, tiny_model

PACKAGE = pathlib.Path(interp.__file__).parent

# an f-string that starts a label (f"L{l}.H{h}", f'L{...}'), one that spells a grammar label mid-text
# (f"... L{l}.H{h} ..."), or a raw regex literal that parses one (r"L(\d+)...", r"^L\d", r"(?:L|blocks\.)...")
_F_START = re.compile(r"""(?<![\w])(?:[fF][rR]?|[rR][fF])(["'])L\{""")
_F_INNER = re.compile(r"""(?<![\w])(?:[fF][rR]?|[rR][fF])(["']).*?L\{[^}]*\}\.(?:H\{|N\{|attn|mlp|ln[12])""")
_REGEX = re.compile(r"""(?<![\w])[rR][bB]?(["'])\^?(?:L\(|L\\d|\(\?:L\|)""")

# display names that are not labels of the grammar (no label type spells them): file -> source snippets
ALLOWED = {
    "circuits/_basis.py": ['f"L{l}.resid[{i}]"'],  # a coordinate of the residual basis, not a stream label
    "plots/_stream.py": ['f"L{lab.layer}.{lab.where}"'],  # short axis name of a resid point: "L3.pre"
    "plots/_scores.py": ['f"L{l}"'],  # a layer's axis tick
    "dictionaries/_contexts.py": ['out[f"L{l}.F{fi}"]'],  # contexts keyed by a feature of the dictionary, any position
    "features/_intervention.py": [
        'return f"L{self.layer}.F{self.feature}{at} {what}"'
    ],  # an intervention's description
    "dictionaries/_evaluate.py": ['labels = [f"L{l}" if site == "mlp_out" else f"L{l}.{site}"'],  # a row's name
    "dictionaries/_logit_effects.py": ['f"L{l}.F{f}": [(name(int(i))'],  # keyed like contexts: a feature, any position
    "reports/_dictionary.py": ['key = f"L{l}.F{f}"'],  # the contexts' and logit effects' key
    "plots/_circuit_layout.py": ['''f"L{layer} {'attn' if sub == 0 else 'mlp'}"'''],  # a column's tick text
}


def _offences(rel: str, text: str) -> list[str]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not (_F_START.search(line) or _F_INNER.search(line) or _REGEX.search(line)):
            continue
        if any(snippet in line for snippet in ALLOWED.get(rel, [])):
            continue
        out.append(f"interp/{rel}:{n}: {line.strip()}")
    return out


def test_no_module_spells_or_parses_labels_outside_interp_labels():
    files = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "labels.py" or p.parent != PACKAGE)
    assert len(files) > 50  # the scan sees the package
    bad = [o for p in files for o in _offences(p.relative_to(PACKAGE).as_posix(), p.read_text(encoding="utf-8"))]
    assert not bad, (
        "build labels with interp.labels types (str(Head(l, h)), ...) and parse them with "
        "interp.labels.parse / Type.parse:\n" + "\n".join(bad)
    )


@pytest.mark.parametrize(
    "line, caught",
    [
        ('    return f"L{layer}.H{head}"', True),
        ("    x = f'L{l}.mlp'", True),
        ('    raise LabelError(f"label={x!r} is outside L0.H0 … L{L - 1}.H{H - 1}")', True),
        ('_HEAD = re.compile(r"L(\\d+)\\.H(\\d+)$")', True),
        ('_HEAD = re.compile(r"^L(\\d+)\\.H(\\d+)$")', True),
        ('_LAYER = re.compile(r"(?:L|blocks\\.)(\\d+)\\.")', True),
        ("    return str(Head(layer, head))", False),
        ('    label = f"{Head(layer, head)} OV"', False),
        ('    names = [f"blocks.{l}.attn.hook_pattern" for l in layers]', False),
    ],
)
def test_the_scan_catches_label_spellings(line, caught):
    assert bool(_offences("some/_new_module.py", line)) is caught


def _round_trips(texts) -> None:
    texts = list(texts)
    assert texts
    for t in texts:
        lab = L.parse(t)
        assert str(lab) == t, (t, lab)
        assert L.parse(str(lab)) == lab
        assert type(lab).parse(t) == lab


@pytest.mark.parametrize("family", FAMILIES)
def test_every_label_a_tiny_model_produces_round_trips(family):
    model = tiny_model(family)
    a = model.arch
    # the block program, with every MLP split into neurons and (BERT) a token-type embedding
    for kw in ({}, {"neuron_layers": tuple(range(a.n_layers)), "n_types": 2}):
        program = build_program(a, **kw)
        _round_trips(e.label for e in program)
        for e in program:
            if e.node is not None:
                assert str(e.node) == e.label and L.parse(e.label) == e.node
            if e.norm is not None and e.norm != "final":  # "final" is the final norm's id (label: ln_final)
                assert isinstance(L.parse(e.norm), L.Norm)
    # the circuits' writes and reads
    _round_trips(write_labels(model))
    _round_trips(read_labels(model))
    # a trace's decompositions (neurons of every layer)
    prompts = ["w1 w2 w3 w4 w5", "w6 w7 w8"]
    tr = interp.trace(model, prompts, neurons=True)
    _round_trips(tr.writes)
    _round_trips(tr.reads)
    _round_trips(tr.resid_points)
    for read in (tr.reads[0], tr.reads[-1], tr.resid_points[-1]):
        _round_trips(tr.decompose(read).labels)
    # the circuit graph's nodes and edges
    g = interp.circuit_graph(model)
    _round_trips(g.writers)
    _round_trips(g.readers)
    _round_trips(g.edges)
    assert all(isinstance(L.parse(e), L.Edge) for e in g.edges)
    # logit attribution, every unit (models with logits)
    if a.has_logits:
        for unit in ("head", "component", "neuron", "head_source"):
            att = attribute_logits(model, prompts, answer=["w3", "w8"], wrong="w5", unit=unit)
            _round_trips(att.labels)
            if unit == "head_source":
                assert any(isinstance(L.parse(t), L.HeadSource) for t in att.labels)
            if unit == "component":
                assert any(isinstance(L.parse(t), L.Attn) for t in att.labels)
