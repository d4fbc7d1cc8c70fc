"""``reports-pipeline trends --data-dir`` asks the running system and draws a chart."""

from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import BIN, Kubectl
from tests.helpers import report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]


def trends(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "reports-pipeline"), "trends", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_trends_against_a_running_system(up, tmp_path) -> None:  # type: ignore[no-untyped-def]
    running = up()
    k = Kubectl(running.kubeconfig)
    docs = [report(POLR, f"app{i}", ns, fail=i) for i, ns in enumerate(["web", "web", "db"])]
    k.run("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    chart = tmp_path / "trends.svg"
    deadline = time.monotonic() + 60
    while True:  # the aggregator writes the windows shortly after the writes
        out = trends("--data-dir", str(running.data_dir), "--window", "1m", "--since", "1h",
                     "--namespace", "web", "--chart", str(chart))
        assert out.returncode == 0, out.stderr
        if "disallow-capabilities" in out.stdout or time.monotonic() > deadline:
            break
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["TIME", "NAMESPACE", "POLICY", "FAIL", "NEW", "RESOLVED"]
    rows = [ln.split() for ln in lines[1:] if not ln.startswith("chart")]
    assert {r[2] for r in rows} == {"web"}
    assert ["disallow-capabilities", "1", "1", "0"] == next(
        r[3:] for r in rows if r[3] == "disallow-capabilities")
    assert lines[-1] == f"chart written to {chart}" and b"<svg" in chart.read_bytes()[:500]

    bad = trends("--data-dir", str(tmp_path / "nowhere"))
    assert bad.returncode == 1 and "is `reports-pipeline up" in bad.stderr
    assert trends("--window", "soon").returncode == 2  # a usage error
