"""Starting a local cluster prints nothing of Ray's own: Ray 2.60 warns about token authentication on every
start of a cluster it creates; interp's local cluster silences that notice (the authentication stays on)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")


@pytest.mark.slow
def test_local_cluster_start_prints_no_token_auth_warning():
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # Ray's default: it would warn
    code = (
        "import interp, os\nc = interp.RayCluster(workers=1)\nprint('auth', os.environ.get('RAY_AUTH_MODE'))\n"
        "c.shutdown()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert "Token authentication" not in text, text[-2000:]
    assert "auth token" in out.stdout  # Ray's own choice (token authentication on) is left as it was
