"""The fleet's sources (flags and config file) and the rows it makes of a
source's records: pure."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from pipeline.clickhouse import fleetrows
from pipeline.fleet.sources import (
    Source,
    SourceError,
    changed,
    combined,
    from_config,
    from_flag,
)
from pipeline.model.messages import Change
from pipeline.model.resources import RESOURCES
from tests.helpers import report

POLR = RESOURCES[0]


def test_a_flag_names_a_cluster_its_bootstrap_and_prefix() -> None:
    assert from_flag("prod-eu=k1:9092,k2:9092") == Source("prod-eu", "k1:9092,k2:9092")
    assert from_flag("prod-us=mirror:9092/prod-us.reports") == Source(
        "prod-us", "mirror:9092", "prod-us.reports")


@pytest.mark.parametrize("flag, says", [
    ("prod", "expected NAME=BOOTSTRAP"), ("=k:9092", "cluster name"),
    ("bad name=k:9092", "cluster name"), ("a=kafka", "not HOST:PORT"),
    ("a=k:1/x/y", "topic prefix")])
def test_a_flag_that_is_not_a_source_is_refused_with_its_reason(flag: str, says: str) -> None:
    with pytest.raises(SourceError, match=says):
        from_flag(flag)


def test_the_config_file_lists_clusters() -> None:
    text = """
clusters:
  - name: a
    bootstrap: k:9092
  - name: b
    bootstrap: m:9092
    prefix: b.reports
"""
    assert from_config(text) == [Source("a", "k:9092"), Source("b", "m:9092", "b.reports")]
    assert from_config("") == []


@pytest.mark.parametrize("text, says", [
    ("clusters: {a: 1}", "must be a list"),
    ("clusters:\n  - name: a\n", "needs a name and a bootstrap"),
    ("clusters:\n  - {name: a, bootstrap: 'k:1', topic: x}\n", "unknown keys"),
    ("clusters: [", "not YAML"),
])
def test_a_wrong_config_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(SourceError, match=says):
        from_config(text, "fleet.yaml")


def test_a_name_given_twice_must_mean_one_source() -> None:
    a = Source("a", "k:9092")
    assert combined([a], [a]) == [a]
    with pytest.raises(SourceError, match="given twice"):
        combined([a], [Source("a", "other:9092")])


def test_a_changed_source_is_stopped_and_started_again() -> None:
    a, b, b2, c = (Source("a", "k:1"), Source("b", "k:1"), Source("b", "k:2"),
                   Source("c", "k:1"))
    assert changed([a, b], [a, b2, c]) == ([b2, c], [b])


def record(value: bytes, offset: int = 0, ts: float = 1_700_000_000.0) -> Any:
    return SimpleNamespace(value=value, offset=offset, timestamp=int(ts * 1000), headers=())


def test_a_change_becomes_the_clusters_report_and_results_rows() -> None:
    obj = report(POLR, "pod-1", "ns", fail=2)
    obj["metadata"]["resourceVersion"] = "7"
    batch = fleetrows.changes("east", [record(Change("ADDED", obj, 7).encode())],
                              fleetrows.Batch())
    assert len(batch.reports) == 1 and batch.reports[0][:5] == [
        "east", POLR.id, "ns", "pod-1", obj["metadata"].get("uid", "")]
    assert batch.results and {r[0] for r in batch.results} == {"east"}
    assert batch.last_change is not None and batch.undecodable == 0


def test_summaries_become_counts_windows_and_totals_of_the_source_not_the_record() -> None:
    counts = {"pass": 1, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    window = {"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T00:05:00Z"}
    values = [
        {"kind": "current", "cluster": "default", "namespace": "ns", "policy": "p",
         "counts": counts, "resourceVersion": "9", "time": "2026-11-30T00:01:00Z"},
        {"kind": "window", "cluster": "default", "namespace": "ns", "policy": "p",
         "window": window, "resultsWritten": 3, "newFailures": 2, "resolvedFailures": 0,
         "counts": counts, "resourceVersion": "9", "time": "2026-11-30T00:01:00Z"},
        {"kind": "totals", "cluster": "default", "policy": "p", "window": window,
         "counts": counts, "resourceVersion": "9", "time": "2026-11-30T00:01:00Z"},
    ]
    batch = fleetrows.summaries("east", [record(orjson.dumps(v)) for v in values]
                                + [record(b"{}"), record(b"not json")], fleetrows.Batch())
    assert [r[:3] for r in batch.counts] == [["east", "ns", "p"]]
    assert batch.counts[0][3:9] == [1, 2, 0, 0, 0, 9]
    assert batch.windows[0][:3] == ["east", "ns", "p"] and batch.windows[0][5:8] == [3, 2, 0]
    assert batch.totals[0][:2] == ["east", "p"]
    assert len(batch.totals[0]) == len(fleetrows.POLICY_TOTAL_COLUMNS)
    assert len(batch.windows[0]) == len(fleetrows.POLICY_WINDOW_COLUMNS)
    assert batch.undecodable == 2
