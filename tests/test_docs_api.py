"""The docs cannot drift from the code: every signature docs/*.md and README.md document is the function's own.

A documented signature is an inline code span ``interp.<name>(<parameters>)`` (optionally ``-> Result``), the
span possibly wrapping lines, whose parameter list parses as a Python parameter list (``a, b, *, c=1``); spans
that are calls (``...``, positional values) are examples and skipped. For each one: the object it names exists,
every parameter of ``inspect.signature`` is listed in order with its kind (positional / keyword-only) and its
default (the first alternative of ``"a" | "b"``), and nothing else is listed. The table of result classes states
each exported result's label column and the column ``top()`` ranks by, checked against the class.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import interp
from interp._result import Result

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
SPAN = re.compile(r"`(interp(?:\.\w+)+)\(((?:[^`()]|\([^`()]*\))*)\)(?:\s*->\s*([^`]+))?`", re.S)


def _resolve(path: str) -> Any:
    parts = path.split(".")
    obj: Any = interp
    for i, p in enumerate(parts[1:], start=1):
        if not hasattr(obj, p):
            obj = importlib.import_module(".".join(parts[: i + 1]))
        else:
            obj = getattr(obj, p)
    return obj


def _documented() -> list[tuple[str, ast.arguments, str, bool]]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in SPAN.finditer(text):
            params = " ".join(m.group(2).split())
            try:
                fn = ast.parse(f"def _({params}): pass").body[0]
            except SyntaxError:
                continue  # a call (an example), not a signature
            assert isinstance(fn, ast.FunctionDef)
            if any(isinstance(d, ast.Call) for d in [*fn.args.defaults, *fn.args.kw_defaults]):
                continue  # a call whose argument is built by a call (``metric=LogitDiff(" Mary", " John")``)
            full = "*" in params or m.group(3) is not None  # a declaration; else a short mention
            out.append((m.group(1), fn.args, f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", full))
    return out


DOCUMENTED = _documented()


#: A value written as a placeholder (``workers=N``, ``address=...``): an example's argument, not a default.
PLACEHOLDER = object()


def _default(node: ast.expr) -> Any:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # "a" | "b": the first is the default
        return _default(node.left)
    if (isinstance(node, ast.Constant) and node.value is Ellipsis) or (
        isinstance(node, ast.Name) and node.id.isupper() and len(node.id) <= 2
    ):
        return PLACEHOLDER
    src = ast.unparse(node)
    try:
        return ast.literal_eval(node)
    except ValueError:
        return eval(src, {"torch": torch, "interp": interp})  # e.g. torch.float32


def test_the_page_documents_signatures():
    names = {n for n, _, where, full in DOCUMENTED if full and where.startswith("docs/api.md:")}
    assert len(DOCUMENTED) >= 25, sorted(names)
    assert {
        "interp.effects",
        "interp.faithfulness_curve",
        "interp.task_report",
        "interp.evaluate_circuit",
        "interp.edge_attribution",
        "interp.predict",
        "interp.Task.from_jsonl",
    } <= names, sorted(names)


@pytest.mark.parametrize("name, args, line, full", DOCUMENTED, ids=[f"{ln}:{n}" for n, _, ln, _ in DOCUMENTED])
def test_documented_signature_equals_the_code(name, args, line, full):
    """A declaration (with ``*`` or ``-> Result``) lists every parameter; a short mention such as
    ``interp.copying_scores(model)`` lists real parameters in order, every required one among them."""
    where = f"{line}: {name}"
    obj = _resolve(name)
    sig = inspect.signature(obj)
    real = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    pos = args.posonlyargs + args.args
    doc_names = [a.arg for a in pos] + [a.arg for a in args.kwonlyargs]
    real_names = [p.name for p in real]
    if full:
        assert doc_names == real_names, f"{where}: documents {doc_names}, the code has {real_names}"
    else:
        required = [p.name for p in real if p.default is p.empty]
        assert set(required) <= set(doc_names) and doc_names == [n for n in real_names if n in doc_names], (
            f"{where}: mentions {doc_names}; the code has {real_names} (required: {required})"
        )
    pos_defaults = [None] * (len(pos) - len(args.defaults)) + list(args.defaults)
    for a, d, kw in [(a, d, False) for a, d in zip(pos, pos_defaults)] + [
        (a, d, True) for a, d in zip(args.kwonlyargs, args.kw_defaults)
    ]:
        p = sig.parameters[a.arg]
        if not full and not kw and p.kind == p.KEYWORD_ONLY:
            kw = True  # a short mention may leave out the *
        assert (p.kind == p.KEYWORD_ONLY) == kw, f"{where}: {a.arg} is {p.kind.description} in the code"
        if d is None:
            assert p.default is p.empty, f"{where}: {a.arg} has the default {p.default!r} in the code, none documented"
        else:
            assert p.default is not p.empty, f"{where}: {a.arg} is required in the code, documented as {ast.unparse(d)}"
            assert _default(d) is PLACEHOLDER or _default(d) == p.default, (
                f"{where}: {a.arg} defaults to {p.default!r} in the code, documented as {ast.unparse(d)}"
            )


def _result_classes() -> dict[str, type]:
    out = {}
    for mod in [interp] + [
        importlib.import_module(f"interp.{m}")
        for m in ("attribution", "causal", "circuits", "edges", "features", "groundtruth", "stream")
    ]:
        for n in getattr(mod, "__all__", []):
            c = getattr(mod, n)
            if inspect.isclass(c) and issubclass(c, Result):
                out[c.__name__] = c
    return out


def test_result_table_states_each_default_column():
    rows = {}
    pat = r"^\| `(\w+)` \| `(\w+)` \| (?:`(\w+)`( \(by magnitude\))?|its `(\w+)` column) \|([^\n]*)\|$"
    for m in re.finditer(pat, DOC.read_text(encoding="utf-8"), re.M):
        rows[m.group(1)] = m.groups()[1:]
    classes = _result_classes()
    assert sorted(rows) == sorted(classes), (
        f"result classes missing from / extra in the table: {sorted(set(classes) ^ set(rows))}"
    )
    for name, (label, by, absolute, per_instance, notes) in rows.items():
        c = classes[name]
        assert label == c.label_column, name
        own_column = "default_column" in vars(c)
        if per_instance:  # the column is named by an instance field
            assert own_column and f"self.{per_instance}" in inspect.getsource(c.default_column.fget), name
            assert not c.default_absolute and "signed" in notes, name
        else:
            assert not own_column and (by, bool(absolute)) == (c.default_by, c.default_absolute), name
        assert ("default order" in notes) == (c._default_order is not Result._default_order), name


def test_readme_says_what_smollm2_is():
    readme = (DOC.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "ship real weights" not in readme
    assert "Q4_1 GGUF of SmolLM2-135M-Instruct" in readme and "dequantized" in readme


def test_edge_attribution_scale_is_explained():
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    i = text.index("`scale` says how the gradient crosses each norm")
    para = text[i : i + 1500]
    assert '`"recomputed"` (default)' in para and '`scale="frozen"`' in para and "change sign" in para
    assert 'Pick `"recomputed"`' in para and 'pick `"frozen"`' in para
