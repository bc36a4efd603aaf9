"""One name per thing: a documented name that changed keeps its old spelling for one release, as an alias outside
``__all__`` that warns (DeprecationWarning) on every use and gives the very object of the new name; a parameter that
became keyword-only is still accepted positionally, with a warning, and gives the same result."""

from __future__ import annotations

import importlib
import warnings

import pytest

import interp
from interp._validate import keyword_only_since

#: (module, old name, new name)
RENAMED = [
    ("interp", "circuit_report", "task_report"),
    ("interp", "circuits_report", "weights_report"),
    ("interp.reports", "circuit_report", "task_report"),
    ("interp.reports", "circuits_report", "weights_report"),
    ("interp.toy", "attention_patterns", "logits_and_patterns"),
    ("interp.groundtruth", "ABLATIONS", "RANKING_ABLATIONS"),
]


@pytest.mark.parametrize("module, old, new", RENAMED, ids=[f"{m}.{o}" for m, o, _ in RENAMED])
def test_an_old_name_warns_and_is_the_new_object(module, old, new):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated: it is now {module}\.{new}"):
        value = getattr(mod, old)
    assert value is getattr(mod, new)
    assert old not in mod.__all__ and new in mod.__all__
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        assert getattr(mod, old) is value
    with pytest.warns(DeprecationWarning):
        ns: dict = {}
        exec(f"from {module} import {old}", ns)
    assert ns[old] is value


def test_an_unknown_name_is_still_an_attribute_error():
    for module in ("interp.reports", "interp.toy", "interp.groundtruth"):
        with pytest.raises(AttributeError, match="no_such_name"):
            getattr(importlib.import_module(module), "no_such_name")


def test_the_two_report_names_say_what_they_make():
    assert interp.task_report.__name__ == "task_report" and interp.weights_report.__name__ == "weights_report"


def test_a_parameter_made_keyword_only_still_works_positionally():
    @keyword_only_since(1, "path", "title")
    def page(model, *, path, title=None):
        return (model, path, title)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert page("m", path="p") == ("m", "p", None)
    with pytest.warns(DeprecationWarning, match=r"page\(\): passing path positionally is deprecated; pass path="):
        assert page("m", "p") == page("m", path="p")
    with pytest.warns(DeprecationWarning, match="passing path, title positionally"):
        assert page("m", "p", "t") == ("m", "p", "t")
    with pytest.raises(TypeError, match="multiple values for argument 'path'"):
        page("m", "p", path="q")
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4 were given"):
        page("m", "p", "t", "x")


def test_dictionary_page_path_is_keyword_only(tmp_path):
    """``path`` positionally warns and reaches the same checks (a bad path is refused the same way, before any
    model work); the keyword-only signature is what ``inspect`` and docs/api.md see."""
    import inspect

    from interp.errors import ExportError

    p = inspect.signature(interp.dictionary_page).parameters["path"]
    assert p.kind == p.KEYWORD_ONLY and p.default is p.empty
    with pytest.raises(ExportError, match="must be a str or os.PathLike ending in .html") as keyword:
        interp.dictionary_page(None, None, path=tmp_path / "d.txt")
    with pytest.warns(DeprecationWarning, match="passing path positionally"):
        with pytest.raises(ExportError, match="must be a str or os.PathLike ending in .html") as positional:
            interp.dictionary_page(None, None, tmp_path / "d.txt")
    assert str(positional.value) == str(keyword.value)


def test_the_reports_package_and_the_report_function_are_two_names(tmp_path):
    """``interp.report`` is the function and ``interp.reports`` the package; the package's 0.1 name still imports, with
    a DeprecationWarning, as the same package, and leaves ``interp.report`` the function (a fresh interpreter: the
    deprecated path is imported once per process)."""
    import subprocess
    import sys

    code = (
        "import warnings, interp, interp.reports as R\n"
        "assert callable(interp.report) and interp.report is R.report\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    from interp.report import task_report, dictionary_page\n"
        "assert task_report is R.task_report and dictionary_page is R.dictionary_page\n"
        "assert interp.report is R.report\n"
        "msgs = [str(x.message) for x in w if issubclass(x.category, DeprecationWarning)]\n"
        "assert any('interp.report is now interp.reports' in m for m in msgs), msgs\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
