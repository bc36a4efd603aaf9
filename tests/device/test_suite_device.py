"""``pytest --device D`` builds the suite's tiny models on D: the option reaches ``tiny_models.DEVICE`` (the module
tiny_model() reads), not only the ``device`` fixture. conftest.py once rebound the module's name to a fixture of the
same name, so ``--device cuda`` set an attribute on the fixture and every tiny model stayed on the CPU."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_device_option_reaches_the_tiny_model_builder():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--device",
            "meta",
            "tests/device/device_probe.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout
