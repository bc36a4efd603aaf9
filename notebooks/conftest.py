"""Notebooks run on the real catalog models: mark them so `make test-fast` (-m "not real and not slow") skips them."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.real)
            item.add_marker(pytest.mark.slow)
