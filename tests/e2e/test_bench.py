"""``reports-pipeline bench --quick`` runs end to end and reports every figure.
Benchmarks are not tests: nothing here judges a figure against its target."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import BIN

FIGURES = {
    "startup", "create throughput", "create throughput, first creates",
    "create throughput, last creates", "write throughput", "write latency p50",
    "write latency p99", "write latency p50 at 100/s", "write latency p99 at 100/s",
    "freshness p50", "freshness p99", "watch lag p50", "watch lag p99",
    "ClickHouse bytes per report", "raw JSON bytes per report", "storage ratio",
    "analytics ClickHouse bytes per report",
    *(f"LIST {scope} {fmt}{memory}" for scope in ("one namespace", "all namespaces")
      for fmt in ("JSON", "Table") for memory in ("", " memory growth")),
    *(f"analytics {q} speedup" for q in ("failing-now", "daily-fails", "top-resources",
                                         "high-scores")),
}


@pytest.mark.timeout(600)
def test_quick_bench_reports_every_figure(tmp_path: Path) -> None:
    output = tmp_path / "figures.json"
    done = subprocess.run([str(BIN / "reports-pipeline"), "bench", "--quick", "--output",
                           str(output)], capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = {f["name"]: f for f in json.loads(output.read_text())["figures"]}
    assert set(figures) == FIGURES
    for name, figure in figures.items():
        assert math.isfinite(figure["value"]), name
        assert name in done.stdout  # the printed table has every row
    assert figures["write throughput"]["target"] == {"op": ">=", "value": 1000}
    assert all(figures[f"LIST {s} JSON"]["note"].startswith("2000 items") or s == "all namespaces"
               for s in ("one namespace", "all namespaces"))
