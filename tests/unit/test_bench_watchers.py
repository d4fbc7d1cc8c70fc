"""The watch phase's watchers process (``bench.watchers``): a watch that
fails is said to the parent, and the process ends, rather than waiting."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import orjson

from bench.pki import Authority, kubeconfig


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_watch_that_cannot_connect_is_reported_and_ends_the_process(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "bench-test-ca")
    config = kubeconfig(tmp_path / "kubeconfig", server=f"https://127.0.0.1:{_closed_port()}",
                        ca=ca.pem, token="t")
    line = orjson.dumps({"kubeconfig": str(config), "resource_version": "1", "timeout": 60,
                         "watches": ["/apis/wgpolicyk8s.io/v1alpha2/policyreports"] * 3})
    done = subprocess.run([sys.executable, "-m", "bench.watchers"], input=line + b"\n",
                          capture_output=True, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(b"error\t"), done.stdout
    assert b"127.0.0.1" in lines[0] or b"onnect" in lines[0], lines[0]
