"""``trends``: the range as whole buckets, series carried in and forward, the
table, and charts over the range asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard.series import build
from launcher.trends import TrendQuery, parse_duration, render_chart, render_table

T0 = 1_800_000_000 - 1_800_000_000 % 3600
QUERY = TrendQuery("c", 60, 300, namespace="ns")
SPAN = QUERY.span(now=T0 + 299)
ROWS = [("ns", "p1", T0, 2, 2, 0), ("ns", "p2", T0, 1, 1, 0), ("ns", "p2", T0 + 60, 0, 0, 1),
        ("ns", "p1", T0 + 120, 5, 3, 0)]


def test_durations() -> None:
    assert [parse_duration(x) for x in ("30s", "5m", "1h", "7d")] == [30, 300, 3600, 604800]
    with pytest.raises(ValueError):
        parse_duration("5 minutes")


def test_the_range_is_whole_buckets() -> None:
    assert (SPAN.start, SPAN.end, SPAN.bucket) == (T0, T0 + 300, 60)
    assert QUERY.filters().namespace == "ns" and QUERY.filters().cluster == "c"


def test_table_shows_where_counts_moved() -> None:
    data = build(SPAN.buckets(), ROWS, [("ns", "p3", 4)])
    lines = render_table(SPAN, data).splitlines()
    assert lines[0].split() == ["TIME", "NAMESPACE", "POLICY", "FAIL", "NEW", "RESOLVED"]
    body = [line.split()[2:] for line in lines[1:]]
    # p3 failed before the range and stayed quiet in it: shown at its count
    assert ["ns", "p3", "4", "0", "0"] in body
    assert ["ns", "p1", "5", "3", "0"] in body and ["ns", "p2", "0", "0", "1"] in body


@pytest.mark.parametrize("suffix, magic", [(".svg", b"<svg"), (".png", b"\x89PNG")])
def test_chart(tmp_path: Path, suffix: str, magic: bytes) -> None:
    out = tmp_path / f"chart{suffix}"
    render_chart(SPAN, build(SPAN.buckets(), ROWS), out)
    assert magic in out.read_bytes()[:200]


def test_one_bucket_of_data_charts_the_range(tmp_path: Path) -> None:
    out = tmp_path / "one.svg"
    render_chart(SPAN, build(SPAN.buckets(), ROWS[:1]), out)
    svg = out.read_text()
    assert "2025" not in svg and "2029" not in svg and "0.25" not in svg


def test_ranking_by_change_keeps_the_one_that_moved(tmp_path: Path) -> None:
    rows = [("ns", "big", T0, 50, 0, 0), ("ns", "moved", T0 + 240, 3, 3, 0)]
    data = build(SPAN.buckets(), rows)
    out = tmp_path / "c.svg"
    render_chart(SPAN, data, out, top=1, rank="change")
    assert 'data-label="ns / moved"' in out.read_text()
    render_chart(SPAN, data, out, top=1)
    assert 'data-label="ns / big"' in out.read_text()
