"""Every fenced ```python example of docs/*.md and README.md runs.

The ``>>>`` blocks are doctests, which pytest runs (``--doctest-glob=*.md`` over ``docs/``); README.md must have none
(it is outside ``docs/``). Every other block is a script, executed here as written in a temporary working folder,
after the prelude listed for it below (what the page leaves to the reader: a model in scope, a folder of
dictionaries). A block that loads a real catalog model (smollm2, gemma3-270m, minilm) or compiles a tracr program is
marked ``real`` and ``slow``; a block nobody listed here fails (none is skipped silently)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
DICTS = Path(__file__).parent / "features" / "fixtures" / "dictionaries"

_SAES = f"""
import shutil
from tiny_models import tiny_model
model = tiny_model("llama")  # the shape of the SAELens fixtures
shutil.copytree({str(DICTS / "saelens_saes")!r}, "saes")
"""
_TRANSCODERS = """
import os
from safetensors.torch import save_file
from tiny_transcoders import random_transcoders
os.makedirs("transcoders")
for l, tc in enumerate(random_transcoders(interp.load_model("smollm2-135m"))):  # circuit-tracer's layout
    save_file({"W_enc": tc.W_enc, "W_dec": tc.W_dec, "b_enc": tc.b_enc, "b_dec": tc.b_dec},
              f"transcoders/layer_{l}.safetensors")
"""
#: What a block needs before it runs, keyed by a line of the block.
PRELUDES = {
    "saes = load_saes(": _SAES,
    'load_transcoders("transcoders/", model)': _TRANSCODERS,
}
REAL = re.compile(r"load_model\(\"(smollm2|gemma3|minilm)|compile_program\(")


def _blocks() -> list[tuple[str, str, str]]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            kind = "doctest" if re.search(r"^\s*>>>", m.group(1), re.M) else "script"
            out.append((where, kind, m.group(1)))
    return out


BLOCKS = _blocks()
SCRIPTS = [
    pytest.param(w, code, id=w, marks=[pytest.mark.real, pytest.mark.slow] if REAL.search(code) else [])
    for w, kind, code in BLOCKS
    if kind == "script"
]


def test_doctest_blocks_are_collected_by_pytest():
    doctests = [w for w, kind, _ in BLOCKS if kind == "doctest"]
    assert doctests and all(w.startswith("docs/") for w in doctests), doctests  # --doctest-glob=*.md under docs/
    assert len(SCRIPTS) >= 5


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::interp.errors.InterpWarning")
@pytest.mark.parametrize("where, code", SCRIPTS)
def test_script_block_runs(where, code, tmp_path, monkeypatch):
    import interp

    monkeypatch.chdir(tmp_path)
    prelude = "".join(p for key, p in PRELUDES.items() if key in code)
    namespace: dict = {"__name__": "__docs__", "interp": interp}
    exec(compile(prelude, f"{where} (prelude)", "exec"), namespace)
    exec(compile(code, where, "exec"), namespace)
