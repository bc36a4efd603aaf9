"""RayCluster(address=...) joins a Ray cluster this test starts (``ray start --head`` on a free port) and gives the
in-process result; the cluster is left running by the driver, then stopped by the test (its own process group).

Ray 2.60 enables token authentication for clusters it starts; a local test cluster opts out with
``RAY_AUTH_MODE=disabled`` in both the head's and the driver's environment (a real cluster keeps its token and
gives it to the driver the way Ray documents).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import torch

import interp

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_join_an_existing_cluster_by_address(monkeypatch):
    assert not ray.is_initialized()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths live under it
    head = subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "ray"),
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            f"--temp-dir={tmp}",
            "--object-store-memory=500000000",
            "--block",
        ],
        env=dict(os.environ),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        toy = interp.load_model("toy-attn-only-2l")
        g = torch.Generator().manual_seed(0)
        clean = torch.randint(1, toy.arch.d_vocab, (4, 8), generator=g)
        corrupt = clean.clone()
        corrupt[:, 3] = (corrupt[:, 3] + 5) % toy.arch.d_vocab
        metric = interp.LogitDiff([3, 4, 5, 6], 2)
        ref = interp.patch(toy, clean, corrupt, metric=metric, progress=False)
        deadline, last = time.time() + 90, None
        while time.time() < deadline:  # the head takes a few seconds to come up
            try:
                cluster = interp.RayCluster(address=f"127.0.0.1:{port}")
                break
            except Exception as e:  # not up yet
                last = e
                time.sleep(1)
        else:
            raise AssertionError(f"could not join the test's Ray head: {last!r}")
        with cluster:
            assert cluster.workers == 2  # the cluster's CPUs
            r = interp.patch(toy, clean, corrupt, metric=metric, cluster=cluster, progress=False)
        assert not ray.is_initialized()  # the driver disconnected; the cluster itself is left running
        assert head.poll() is None
        torch.testing.assert_close(r.values, ref.values, rtol=1e-6, atol=1e-7)
        assert r.details["distributed"]["lost"] == 0 and r.details["distributed"]["workers"] == 2
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # the head this test started, and only it
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
    time.sleep(2)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if any(tmp in c for c in (p.info["cmdline"] or []))]
    assert not left, f"Ray processes of the test cluster left running: {left}"
