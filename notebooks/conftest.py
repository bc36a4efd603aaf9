"""Notebooks run on the real catalog models: mark them so `make test-fast` (-m "not real and not slow") skips them."""

import pytest

# NN_*.py are the notebooks' jupytext sources, not test modules: nbmake runs the paired .ipynb files.
collect_ignore_glob = ["[0-9]*.py"]


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.real)
            item.add_marker(pytest.mark.slow)
