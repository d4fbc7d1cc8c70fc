"""Trend series, table and chart rendering."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from launcher.trends import TrendQuery, parse_duration, render_chart, render_table, series


def t(minute: int) -> datetime:
    return datetime(2026, 11, 21, 10, minute, tzinfo=UTC)


ROWS = [(t(0), "ns", "p1", 2, 2, 0), (t(0), "ns", "p2", 1, 1, 0), (t(1), "ns", "p2", 0, 0, 1),
        (t(2), "ns", "p1", 5, 3, 0)]


def test_durations() -> None:
    assert [parse_duration(x) for x in ("30s", "5m", "1h", "7d")] == [30, 300, 3600, 604800]
    with pytest.raises(ValueError):
        parse_duration("5 minutes")


def test_series_carries_counts_forward() -> None:
    data = series(ROWS)
    assert [(p.bucket.minute, p.fail) for p in data[("ns", "p1")]] == [(0, 2), (1, 2), (2, 5)]
    assert [(p.bucket.minute, p.fail) for p in data[("ns", "p2")]] == [(0, 1), (1, 0), (2, 0)]


def test_table() -> None:
    lines = render_table(series(ROWS)).splitlines()
    assert lines[0].split() == ["TIME", "NAMESPACE", "POLICY", "FAIL", "NEW", "RESOLVED"]
    assert lines[1].split() == ["2026-11-21", "10:00:00", "ns", "p1", "2", "2", "0"]
    assert len(lines) == 7


def test_query_binds_filters() -> None:
    sql, params = TrendQuery("c", 60, 3600, namespace="ns", policy="p").sql()
    assert "{namespace:String}" in sql and "{policy:String}" in sql
    assert params == {"cluster": "c", "since": 3600, "bucket": 60, "namespace": "ns",
                      "policy": "p"}
    assert "'ns'" not in sql


@pytest.mark.parametrize("suffix, magic", [(".svg", b"<svg"), (".png", b"\x89PNG")])
def test_chart(tmp_path: Path, suffix: str, magic: bytes) -> None:
    out = tmp_path / f"chart{suffix}"
    render_chart(series(ROWS), out)
    assert magic in out.read_bytes()[:200]
