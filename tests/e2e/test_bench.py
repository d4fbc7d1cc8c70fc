"""``reports-pipeline bench --quick`` runs end to end and reports every figure,
the soak phase's (one minute in ``--quick``) with its rows per minute, and
every figure compared side by side with the etcd-CRD baseline of the same run;
stopping the bench stops everything it started. Benchmarks are not tests:
nothing here judges a figure against its target."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from bench import questions
from bench.scale import COLUMNS
from bench.sidebyside import compared
from tests.e2e.conftest import BIN, Up

SOAK = {
    "soak throughput, first minute", "soak throughput, last minute",
    "soak throughput, minimum minute", "soak throughput, last vs first", "soak stall windows",
    "soak write latency p99", "soak aggregate agent lag, most",
    *(f"soak {part} RSS growth{per}" for part in ("system", "broker")
      for per in ("", " per 1,000 writes")),
}
MINUTE_COLUMNS = {"minute", "seconds", "writes", "writes_per_s", "p50_ms", "p99_ms", "errors",
                  "clickhouse_lag", "aggregate_lag", "clickhouse_mb", "python_kblocks",
                  "system_rss_mb", "broker_rss_mb", "system_cpu_ms", "broker_cpu_ms",
                  "batch_requests", "own_rss_mb"}
FIGURES = {
    "startup", "create throughput", "create throughput, first creates",
    "create throughput, last creates", "write throughput", "write latency p50",
    "write latency p99", "write latency p50 at 100/s", "write latency p99 at 100/s",
    "freshness p50", "freshness p99", "watch lag p50", "watch lag p99",
    "ClickHouse bytes per report", "raw JSON bytes per report", "storage ratio",
    "analytics ClickHouse bytes per report", "schema validation per write",
    "write time, 16 clients", "write time, 64 clients",
    *(f"LIST {scope} {fmt}{memory}" for scope in ("one namespace", "all namespaces")
      for fmt in ("JSON", "Table") for memory in ("", " memory growth")),
    *(f"analytics {q} speedup" for q in ("failing-now", "daily-fails", "top-resources",
                                         "high-scores")),
    *SOAK,
    *(f"dashboard {page}" for page in (
        "overview, 30 days", "trends, 30 days by day", "trends, 7 days ranked by change",
        "trends, one namespace", "resources, top 10 high and critical",
        "resources, one resource's history", "findings, score 8 or more")),
}


#: a bench small enough for a test
TINY = ("--resources", "20", "--namespaces", "2", "--list-size", "50", "--duration", "1",
        "--latency-duration", "1", "--watchers", "2", "--watch-duration", "1",
        "--analytics-reports", "100")


@pytest.mark.timeout(1200)
def test_quick_bench_reports_every_figure(tmp_path: Path) -> None:
    output = tmp_path / "figures.json"
    done = subprocess.run([str(BIN / "reports-pipeline"), "bench", "--quick", "--output",
                           str(output)], capture_output=True, text=True, timeout=1150)
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads(output.read_text())
    figures = {f["name"]: f for f in written["figures"]}
    assert set(figures) == FIGURES
    for name, figure in figures.items():
        assert math.isfinite(figure["value"]), name
        assert name in done.stdout  # the printed table has every row
    assert figures["write throughput"]["target"] == {"op": ">=", "value": 1000}
    assert all(figures[f"LIST {s} JSON"]["note"].startswith("2000 items") or s == "all namespaces"
               for s in ("one namespace", "all namespaces"))
    assert figures["soak throughput, last vs first"]["target"] == {"op": ">=", "value": 0.9}
    assert "soak per minute, " in done.stdout
    minutes = written["soak_minutes"]
    assert [m["minute"] for m in minutes] == [1]
    for row in minutes:
        assert set(row) == MINUTE_COLUMNS
        assert all(math.isfinite(v) for v in row.values()), row
    assert minutes[0]["writes"] > 0 and minutes[0]["system_rss_mb"] > 0
    assert minutes[0]["system_cpu_ms"] > 0 and minutes[0]["broker_cpu_ms"] > 0
    assert minutes[0]["batch_requests"] >= 1
    assert written["soak_windows"] and all(math.isfinite(w["writes_per_s"])
                                           for w in written["soak_windows"])
    # the frontend's metrics page after the run, beside the figures
    page = (tmp_path / "figures.metrics.txt").read_text()
    assert "figures.metrics.txt" in done.stdout
    samples = {line.split("{")[0].split(" ")[0] for line in page.splitlines()
               if line and not line.startswith("#")}
    assert {"apiserver_request_total", "reports_write_commit_seconds_count"} <= samples

    # side by side with etcd CRDs in the same run: every compared figure, both
    # values measured, the ratio and its target
    rows = {r["figure"]: r for r in written["side_by_side"]}
    assert set(rows) == {c.label for c in compared((16, 64), 2000)}
    for name, row in rows.items():
        assert math.isfinite(row["this system"]) and math.isfinite(row["etcd CRDs"]), row
        assert math.isfinite(row["ratio"]), name
    assert rows["writes/s, 16 clients"]["target"] == {"op": ">=", "value": 2}
    assert rows["servers' RSS at the end"]["target"] == {"op": "<=", "value": 1}
    assert "etcd" in rows["servers' RSS at the end"]["notes"]["etcd CRDs"]
    assert "Side by side" in done.stdout and "ETCD CRDS" in done.stdout


@pytest.mark.timeout(300)
def test_stopping_the_bench_stops_everything_it_started(tmp_path: Path) -> None:
    """SIGTERM while the baseline runs: the bench exits, and with it the
    system, its broker, etcd, kube-apiserver and their data."""
    bench = subprocess.Popen(
        [str(BIN / "reports-pipeline"), "bench", *TINY, "--soak-minutes", "0",
         "--baseline-soak-minutes", "2", "--output", str(tmp_path / "figures.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert bench.stdout is not None
        for line in bench.stdout:
            if line.startswith("-- etcd CRDs: sustained"):
                break
        else:
            raise AssertionError(f"the baseline never ran: {bench.stderr.read()}")  # type: ignore[union-attr]
        started = psutil.Process(bench.pid).children(recursive=True)
        names = {p.name() for p in started}
        assert {"etcd", "kube-apiserver"} <= names, names
        data = {Path(a.split("=", 1)[1]) for p in started for a in p.cmdline()
                if a.startswith("--data-dir=")} | {
                Path(p.cmdline()[p.cmdline().index("--data-dir") + 1]) for p in started
                if "--data-dir" in p.cmdline()}
        assert data
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 130, err
    assert "reports-pipeline bench: stopped" in err
    deadline = time.monotonic() + 10
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in started):
        assert time.monotonic() < deadline, [p for p in started if p.is_running()]
        time.sleep(0.2)
    assert not any(d.exists() for d in data), data
    assert not (tmp_path / "figures.json").exists()




@pytest.mark.timeout(300)
def test_against_another_api_adds_a_column(tmp_path: Path, up: Callable[..., Up]) -> None:
    """--against drives the compared phases against any kubeconfig's API (here
    another `up`), as a column of its own; no CPU, memory or disk for it."""
    other = up()
    output = tmp_path / "figures.json"
    done = subprocess.run(
        [str(BIN / "reports-pipeline"), "bench", *TINY, "--soak-minutes", "0", "--no-baseline",
         "--against", str(other.kubeconfig), "--output", str(output)],
        capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["figure"]: r for r in json.loads(output.read_text())["side_by_side"]}
    for name in ("writes/s, 16 clients", "writes/s, 64 clients", "GET p99, 16 clients",
                 "LIST 50", "LIST 50 by pages of 500", "create 50 reports, 16 clients"):
        assert math.isfinite(rows[name]["against"]) and rows[name]["against"] > 0, rows[name]
        assert "ratio" not in rows[name]  # no baseline, no ratio
    for name in ("server CPU per write", "servers' RSS at the end", "bytes on disk at rest"):
        assert rows[name]["against"] is None, rows[name]  # not measured: NaN, null in JSON
    assert "AGAINST" in done.stdout



@pytest.mark.timeout(900)
def test_scale_run_prints_a_row_per_size(tmp_path: Path) -> None:
    """``bench --scale`` at two small sizes, on this system and on etcd CRDs:
    the second size filled on each one's way in (the committer's requests
    topic; kube-apiserver), every column measured at both sizes, every
    report there to be listed, the targets judged at the larger size, and
    the sustained phase at the larger size with its figures per minute."""
    output = tmp_path / "scale.json"
    done = subprocess.run(
        [str(BIN / "reports-pipeline"), "bench", "--scale", "400,1500", "--scale-creates",
         "300", "--watchers", "12", "--watch-rate", "20", "--watch-duration", "3",
         "--namespaces", "4", "--soak-minutes", "0.5", "--output", str(output)],
        capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout + done.stderr
    apis = json.loads(output.read_text())["apis"]
    assert set(apis) == {"this system", "etcd CRDs"}
    for name, rows in apis.items():
        assert [r["size"] for r in rows] == [400, 1500], name
        for row in rows:
            assert row["gave_out"] is None
            for key, _, _ in COLUMNS:
                if key in ("recovery_s", "analytics_min_speedup") and name == "etcd CRDs":
                    continue  # no committer, and no analytics to ask
                assert math.isfinite(row[key]), (name, row["size"], key)
            listed = [n for n in row["notes"] if n.startswith(("whole LIST", "paged LIST"))]
            assert len(listed) == 2 and all(f"{row['size']:,} items" in n for n in listed), \
                (name, listed)
            assert row["create_rate"] > 0 and row["watch_p99_ms"] > 0
            assert any(n.startswith("watches: ") and ", 0 not delivered" in n
                       for n in row["notes"]), (name, row["notes"])
        assert any(n.startswith("fill: ") for n in rows[1]["notes"]), name
        small, large = rows
        assert small["soak_minutes"] == [], name  # the largest size's alone
        assert [m["minute"] for m in large["soak_minutes"]] == [1], name
        minute = large["soak_minutes"][0]
        assert set(minute) == MINUTE_COLUMNS and minute["writes"] > 0, (name, minute)
        assert math.isfinite(minute["own_rss_mb"]), (name, minute)
        assert minute["errors"] == 0 or name == "etcd CRDs", minute
        for key in ("soak_first_wps", "soak_min_wps", "soak_p99_ms", "soak_rss_max_mb",
                    "soak_rss_growth_mb"):
            assert math.isfinite(large[key]), (name, key)
        assert any(n.startswith("soak: 0.5 min of mix") for n in large["notes"]), name
    assert "\nTHIS SYSTEM\n" in done.stdout and "\nETCD CRDS\n" in done.stdout
    tables = done.stdout[done.stdout.index("\nTHIS SYSTEM\n"):].split("\n")  # after progress
    assert sum(line.strip().startswith("1,500 |") for line in tables) == 2, done.stdout
    assert "this system: targets, at 1,500 reports:" in done.stdout
    assert "this system, 1,500 reports, sustained, per minute:\n" in done.stdout


def test_fleet_run_measures_the_lag_and_the_questions(tmp_path: Path) -> None:
    """``bench --fleet`` small: two live clusters followed by a fleet, under an
    offered rate and then closed loops (its lag over every change of each
    phase, its CPU and memory), and docs/fleet.md's questions over simulated
    clusters."""
    output = tmp_path / "fleet.json"
    done = subprocess.run(
        [str(BIN / "reports-pipeline"), "bench", "--fleet", "--quick", "--fleet-clusters", "2",
         "--fleet-simulated", "3", "--fleet-simulated-reports", "200", "--duration", "8",
         "--output", str(output)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = {f["name"]: f for f in json.loads(output.read_text())["figures"]}
    for phase, load in (("", "steps/s offered per cluster"), (", busiest", "clients per cluster")):
        lag = figures[f"fleet lag p99{phase}"]
        assert lag["value"] >= figures[f"fleet lag p50{phase}"]["value"] > 0
        assert load in lag["note"] and "changes with results of 2 clusters" in lag["note"]
        assert figures[f"clusters' own lag p99, worst{phase}"]["value"] > 0
        assert figures[f"fleet CPU per change{phase}"]["value"] > 0
        assert figures[f"fleet RSS, most{phase}"]["value"] > 0
    asked = {n for n in figures if n.startswith("fleet question ")}
    assert asked == {f"fleet question {q}" for q in questions.FLEET}
    assert all(figures[n]["value"] > 0 for n in asked)
