"""``import interp`` imports what a call needs when it needs it: not torch, transformer-lens (and what it brings in:
transformers, datasets, pyarrow, pytest), pandas or plotly. Checked by what a fresh interpreter has in
``sys.modules`` afterwards (a check that is not a timing; benchmarks/bench_import.py prints the times)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import interp

HEAVY = ("torch", "transformer_lens", "transformers", "datasets", "pyarrow", "pytest", "pandas", "plotly", "ray")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_interp_pulls_in_no_heavy_package():
    loaded = _modules_after("import interp")
    assert not [m for m in HEAVY if m in loaded], [m for m in HEAVY if m in loaded]


@pytest.mark.slow
def test_a_name_is_imported_when_used():
    loaded = _modules_after("import interp\ninterp.LogitDiff")
    assert "interp.causal" in loaded and "torch" in loaded
    assert "interp.reports" not in loaded and "ray" not in loaded  # only what that name needs


def test_every_public_name_resolves_to_its_subpackage_object():
    import importlib

    lazy = interp._LAZY
    eager = {
        "InterpError",
        "InterpWarning",
        "AblationWarning",
        "CompletenessWarning",
        "ContextLengthWarning",
        "MetricGapWarning",
        "TokenSpacingWarning",
        "UnknownTokenWarning",
    }
    assert set(interp.__all__) == set(lazy) | eager and len(interp.__all__) == len(set(interp.__all__))
    for name in interp.__all__:
        obj = getattr(interp, name)
        home = importlib.import_module(f"interp.{lazy[name]}") if name in lazy else interp.errors
        assert obj is getattr(home, name), name
    assert callable(interp.report) and interp.report is importlib.import_module("interp.reports").report
    assert set(interp.__all__) <= set(dir(interp))


def test_type_checking_imports_match_the_lazy_table():
    """The ``if TYPE_CHECKING:`` block (what type checkers and editors see) names exactly the lazy table's names,
    each from the same subpackage."""
    tree = ast.parse(Path(interp.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {a.name: imp.module for imp in block.body if isinstance(imp, ast.ImportFrom) for a in imp.names}
    assert seen == {k: f"interp.{v}" for k, v in interp._LAZY.items()}


def test_unknown_attribute_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        interp.no_such_name  # noqa: B018
