"""The side-by-side rows of the benchmark: each compared figure with this
system's value, the baseline's, the ratio and whether its target is met."""

from __future__ import annotations

import math

from bench.figures import Report
from bench.sidebyside import Measured, compared, ratio, side_by_side, table


def test_rows_carry_both_values_their_ratio_and_whether_the_target_is_met() -> None:
    rows = compared((16, 64), 10_000)
    ours = Measured("this system", {"writes@16": 500.0, "write_p99@16": 40.0,
                                    "list": 0.9, "disk": 50.0})
    etcd = Measured("etcd CRDs", {"writes@16": 200.0, "write_p99@16": 100.0,
                                  "list": 1.2, "disk": 80.0})
    other = Measured("against", {"writes@16": 300.0})
    report = Report()
    side_by_side(report, rows, ours, etcd, [other])
    got = {r["figure"]: r for r in report.series["side_by_side"]}
    assert set(got) == {"writes/s, 16 clients", "write p99, 16 clients", "LIST 10,000",
                        "bytes on disk at rest"}
    writes = got["writes/s, 16 clients"]
    assert (writes["this system"], writes["etcd CRDs"], writes["against"]) == (500, 200, 300)
    assert writes["ratio"] == 2.5 and writes["met"] is True
    assert writes["target"] == {"op": ">=", "value": 2}
    assert got["write p99, 16 clients"]["met"] is True  # 0.4x <= 0.5x
    assert got["LIST 10,000"]["met"] is False  # 0.75x > 0.5x
    assert math.isclose(got["bytes on disk at rest"]["ratio"], 0.625)
    printed = table(report)
    assert printed.splitlines()[0].split()[:4] == ["FIGURE", "THIS", "SYSTEM", "ETCD"]
    assert "2.5x" in printed and ">= 2x" in printed and "NO" in printed


def test_without_a_baseline_there_is_no_ratio() -> None:
    report = Report()
    side_by_side(report, compared((16, 64), 100), Measured("this system", {"writes@64": 1.0}),
                 None)
    [row] = report.series["side_by_side"]
    assert "ratio" not in row and "RATIO" in table(report)
    assert math.isnan(ratio(1.0, 0.0)) and math.isnan(ratio(float("nan"), 1.0))


def test_both_client_counts_are_compared_for_writes_and_the_sustained_phase() -> None:
    keys = {r.key for r in compared((16, 64), 2000)}
    assert {"writes@16", "writes@64", "sustained@16", "sustained@64", "cpu_per_write",
            "list", "list_paged", "create", "rss", "disk"} <= keys
