"""The side-by-side rows of the benchmark: each compared figure with this
system's value, the baseline's, the ratio and whether its target is met."""

from __future__ import annotations

import math

import pytest

from bench.figures import Report
from bench.sidebyside import Measured, compared, ratio, side_by_side, stage_means, table


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
            "list", "list_paged", "create", "rss", "disk", "sustained_write_p99@16",
            "sustained_get_p99@64"} <= keys
    one = [r.key for r in compared((64,), 2000)]  # --few-clients 64: one number of clients
    assert len(one) == len(set(one)) and "write_p99@64" in one


def _page(request: float, stages: dict[str, float], count: int) -> str:
    lines = [f'apiserver_request_duration_seconds_sum{{group="g",resource="r",verb="{verb}"}}'
             f" {request / 2}" for verb in ("create", "update")]
    lines += [f'apiserver_request_duration_seconds_count{{group="g",resource="r",verb="{verb}"}}'
              f" {count / 2}" for verb in ("create", "update")]
    lines.append('apiserver_request_duration_seconds_sum{group="g",resource="r",verb="get"} 99')
    for stage, seconds in stages.items():
        lines.append(f'reports_write_stage_seconds_sum{{stage="{stage}"}} {seconds}')
        lines.append(f'reports_write_stage_seconds_count{{stage="{stage}"}} {count}')
    return "\n".join(lines) + "\n"


def test_stages_add_up_to_the_request_between_two_pages() -> None:
    before = _page(1.0, {"produce": 1, "queue": 1, "decide": 1, "transaction": 1,
                         "commit": 1, "visible": 1}, 10)
    # 100 writes since: 40 ms each; produce 5, queue 12 from the send (7 after
    # the produce), decide 2, transaction 15, commit 26 (reply 2), visible 1
    after = _page(1.0 + 4.0, {"produce": 1.5, "queue": 2.2, "decide": 1.2,
                              "transaction": 2.5, "commit": 3.6, "visible": 1.1}, 110)
    means = stage_means(before, after)
    assert means["request"] == pytest.approx(40)
    assert means["queue"] == pytest.approx(7) and means["reply"] == pytest.approx(2)
    assert means["frontend"] == pytest.approx(8)
    parts = ("frontend", "produce", "queue", "decide", "transaction", "reply", "visible")
    assert sum(means[p] for p in parts) == pytest.approx(means["request"])
