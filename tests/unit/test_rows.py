"""The ClickHouse rows of committed changes."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from pipeline.clickhouse import rows
from pipeline.model.messages import Change

REPORT = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
          "metadata": {"name": "r", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                       "creationTimestamp": "2026-11-25T10:00:00Z", "labels": {"a": "b"}},
          "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
          "results": [{"policy": "p", "rule": "r", "result": "fail", "severity": "high"}]}
NOW = datetime(2026, 11, 25, 10, 0, 1, tzinfo=UTC)
OBJECT = rows.REPORT_COLUMNS.index("object")


def test_a_change_is_stored_whole() -> None:
    row = rows.report_row(Change("MODIFIED", REPORT, 7), NOW)
    assert row is not None
    assert orjson.loads(row[OBJECT]) == REPORT
    assert row[rows.REPORT_COLUMNS.index("deleted")] == 0
    assert len(rows.result_rows(Change("MODIFIED", REPORT, 7), NOW, "c")) == 1


def test_a_deletion_is_a_tombstone_without_the_object() -> None:
    raw = orjson.dumps(REPORT)
    row = rows.report_row(Change("DELETED", REPORT, 8), NOW, object_json=raw)
    assert row is not None
    assert row[OBJECT] == "{}"
    assert row[1:6] == ["ns", "r", "u", 8, 1]
    assert rows.result_rows(Change("DELETED", REPORT, 8), NOW, "c") == []


def test_each_change_keeps_its_own_commit_time() -> None:
    later = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
    changes = [Change("ADDED", REPORT, 7), Change("MODIFIED", REPORT, 9)]
    reports, results = rows.change_rows(changes, [NOW, later], cluster="c")
    committed = rows.REPORT_COLUMNS.index("committed")
    assert [orjson.loads(line)[committed] for line in reports.splitlines()] == [
        "2026-11-25 10:00:01.000", "2026-11-26 09:30:00.000"]
    at = rows.RESULT_COLUMNS.index("committed")
    assert [orjson.loads(line)[at] for line in results.splitlines()] == [
        "2026-11-25 10:00:01.000", "2026-11-26 09:30:00.000"]
    # one time for the whole batch, as before
    reports, _ = rows.change_rows(changes, NOW, cluster="c")
    assert {orjson.loads(line)[committed] for line in reports.splitlines()} == {
        "2026-11-25 10:00:01.000"}
