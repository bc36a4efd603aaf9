"""House rules of interp/ checked on its source (issue #30, "one of each piece"):

(a) no function has more than :data:`MAX_BODY_LINES` body lines (its AST span from the first statement after the
    docstring to its last line): a longer one is split into named steps;
(b) no hand-written ``isinstance(x, bool)`` outside ``interp/_validate.py``: argument checks use its helpers
    (``check_bool``, ``is_int``, ``is_real``, ``is_index``, ``check_int``, ``check_positive_int``, ...), which name the
    argument, the value and what is allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "interp"

MAX_BODY_LINES = 80


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the function's last line (0: a docstring only)."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    if not body:
        return 0
    end = fn.end_lineno if fn.end_lineno is not None else body[-1].lineno
    return end - body[0].lineno + 1


def _functions(tree: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function with its qualified name (``Class.method``, ``outer.<locals>.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def long_functions(source: str, module: str) -> dict[str, int]:
    """``module.qualname`` → body lines of each function of ``source`` over MAX_BODY_LINES."""
    return {
        f"{module}.{name}": n
        for name, fn in _functions(ast.parse(source), "")
        if (n := _body_lines(fn)) > MAX_BODY_LINES
    }


def bool_checks(source: str) -> list[int]:
    """Line numbers of the ``isinstance(<x>, bool)`` calls of ``source``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Name)
        and node.args[1].id == "bool"
    ]


def _sources() -> Iterator[tuple[str, str, str]]:
    """(path relative to the repository, dotted module name, source) of every module of interp/."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield rel.as_posix(), ".".join(parts), path.read_text(encoding="utf-8")


def test_no_function_is_over_80_body_lines():
    found: dict[str, int] = {}
    for _, module, source in _sources():
        found.update(long_functions(source, module))
    assert not found, f"functions over {MAX_BODY_LINES} body lines (split them into named steps): {found}"


def test_no_hand_written_bool_checks_outside_validate():
    found: dict[str, list[int]] = {}
    for rel, _, source in _sources():
        if rel != "interp/_validate.py" and (lines := bool_checks(source)):
            found[rel] = lines
    assert not found, f"isinstance(x, bool) outside interp/_validate.py (use its helpers): {found}"


def test_the_checks_find_a_planted_offender():
    # in a class: a method of 81 body lines after its docstring (found), one of exactly 80 (allowed)
    lines = [f"        x{i} = {i}" for i in range(81)]
    planted = "\n".join(
        ["class C:", "    def long(self):", '        """Doc."""', *lines, "    def ok(self):", *lines[:80]]
    )
    assert long_functions(planted, "m") == {"m.C.long": 81}
    planted = "\n".join(
        [
            "def f(x, y):",
            "    if isinstance(x, bool) or not isinstance(y, (int, float)):",
            "        return isinstance(y, bool)",
        ]
    )
    assert bool_checks(planted) == [2, 3]
    assert bool_checks("isinstance(x, (str, bool))\nis_int(x)\n") == []  # a type switch, not a bool check
