"""``bench --against`` drives the benchmark's compared phases through a real
kube-apiserver to this system behind its aggregation layer: the third column
of the side-by-side table, measured as a cluster's clients meet the system."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from tests.cluster.conftest import System
from tests.e2e.conftest import BIN
from tests.e2e.test_bench import TINY

pytestmark = pytest.mark.cluster


@pytest.mark.timeout(400)
def test_bench_against_the_system_through_kube_apiserver(system: System, tmp_path: Path) -> None:
    output = tmp_path / "figures.json"
    done = subprocess.run(system.cluster.netns.command([
        str(BIN / "reports-pipeline"), "bench", *TINY, "--soak-minutes", "0", "--no-baseline",
        "--against", str(system.cluster.plane.admin), "--output", str(output)]),
        capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["figure"]: r for r in json.loads(output.read_text())["side_by_side"]}
    for name in ("writes/s, 16 clients", "writes/s, 64 clients", "GET p99, 16 clients",
                 "LIST 50", "LIST 50 by pages of 500"):
        assert math.isfinite(rows[name]["against"]) and rows[name]["against"] > 0, rows[name]
    # the workload's reports are in the cluster's store, through kube-apiserver
    listed = system.cluster.kubectl.json("get", "policyreports", "-n", "bench-list")
    assert len(listed["items"]) == 50
