"""The dashboard's pure parts: filters from the URL, series on a fixed grid,
ranking, and charts that read at a glance whatever the data."""

from __future__ import annotations

import re

import pytest

from dashboard import charts, filters, series
from dashboard.filters import FilterError, Filters, Span
from dashboard.pages import Choices, Column, document, table

T0 = 1_800_000_000 - 1_800_000_000 % 3600  # a whole hour


def test_filters_round_trip_through_the_url() -> None:
    f = Filters.parse({"namespace": "team-a", "range": "7d", "top": "5", "rank": "change",
                       "unknown": "ignored"})
    assert (f.namespace, f.range, f.top, f.rank, f.bucket_seconds) == ("team-a", "7d", 5,
                                                                        "change", 21600)
    assert Filters.parse(dict(p.split("=") for p in f.query_string().split("&"))) == f
    assert Filters().query_string() == ""


@pytest.mark.parametrize("query", [{"range": "2y"}, {"bucket": "7m"}, {"top": "x"},
                                   {"top": "0"}, {"severity": "dire"}, {"rank": "name"},
                                   {"range": "30d", "bucket": "1m"}, {"refresh": "-1"}])
def test_bad_filters_are_refused(query: dict[str, str]) -> None:
    with pytest.raises(FilterError):
        Filters.parse(query)


def test_queries_bind_every_value() -> None:
    f = Filters(cluster="c'1", namespace="n'1", policy="p'1", severity="high")
    span = Span.of(f, now=T0)
    for sql, params in (filters.totals(f), filters.failing_by(f, "namespace"),
                        filters.windows(f, span), filters.carried_in(f, span),
                        filters.top_resources(f), filters.findings(f),
                        filters.resource_results(f, filters.Resource("Pod", "n'1", "x'")),
                        filters.resource_history(f, filters.Resource("Pod", "n'1", "x'"),
                                                 span)):
        assert "'1" not in sql and "x'" not in sql, sql
        for name in re.findall(r"\{(\w+):", sql):
            assert name in params, (name, sql)


def test_span_is_whole_buckets_up_to_now() -> None:
    span = Span.of(Filters(range="1h"), now=T0 + 90)
    assert span.end == T0 + 120 and span.start == span.end - 3600
    assert len(span.buckets()) == 60 and span.buckets()[0] == span.start
    # a range shorter than a bucket is the bucket holding now, not nothing
    day = Span.of(Filters(range="1h", bucket="1d"), now=T0 + 90)
    assert day.buckets() == [day.start] and day.start <= T0 + 90 < day.end


def test_series_carry_counts_in_and_forward() -> None:
    buckets = [T0, T0 + 60, T0 + 120, T0 + 180]
    rows = [("ns", "p1", T0 + 60, 5, 3, 0), ("ns", "p2", T0, 2, 2, 0),
            ("ns", "p2", T0 + 120, 0, 0, 2)]
    carried = [("ns", "p1", 2), ("quiet", "p3", 4)]
    got = {s.key: s for s in series.build(buckets, rows, carried)}
    assert got[("ns", "p1")].fail == [2, 5, 5, 5]
    assert got[("ns", "p2")].fail == [2, 2, 0, 0] and got[("ns", "p2")].resolved == [0, 0, 2, 0]
    # failing before the range and quiet in it: still there, at its count
    assert got[("quiet", "p3")].fail == [4, 4, 4, 4]
    assert series.total(got.values(), 4) == [8, 11, 9, 9]
    assert series.flows(got.values(), 4) == ([2, 3, 0, 0], [0, 0, 2, 0])


def test_ranking_by_count_or_by_change() -> None:
    data = [series.Series(("a", "steady"), [9, 9, 9], [0] * 3, [0] * 3),
            series.Series(("b", "rising"), [0, 1, 4], [0, 1, 3], [0] * 3),
            series.Series(("c", "gone"), [0, 0, 0], [0] * 3, [0] * 3)]
    assert [s.key[1] for s in series.ranked(data, top=1)] == ["steady"]
    assert [s.key[1] for s in series.ranked(data, top=1, by="change")] == ["rising"]
    assert [s.key[1] for s in series.ranked(data, top=5)] == ["steady", "rising"]


def test_changes_of_status() -> None:
    rows = [(10, "p", "r", "a", "pass"), (20, "p", "r", "a", "pass"),
            (30, "p", "r", "a", "fail"), (40, "p", "r", "a", "pass"), (5, "q", "s", "a", "fail"),
            (35, "p", "r", "b", "fail")]  # another report's results are its own
    got = series.changes(sorted(rows, key=lambda r: (r[1], r[2], r[3], r[0])), since=15)
    got = [c for c in got if c.report == "a"]
    assert [(c.at, c.before, c.after) for c in got] == [(40, "fail", "pass"), (30, "pass", "fail")]


def test_count_ticks_are_whole_numbers() -> None:
    assert charts.count_ticks(0) == [0, 1]
    assert charts.count_ticks(1) == [0, 1]
    assert charts.count_ticks(7) == [0, 2, 4, 6, 8]
    assert charts.count_ticks(1234)[-1] >= 1234
    assert all(isinstance(t, int) for t in charts.count_ticks(3))


def test_one_bucket_of_data_draws_the_range_not_years() -> None:
    span = Span.of(Filters(range="1h"), now=T0)
    values = [0] * 59 + [3]
    svg = charts.line_chart(span.buckets(), span.bucket, [("ns / p", values)])
    labels = re.findall(r'class="tick">([^<]+)<', svg)
    assert all(":" in x or x.isdigit() for x in labels), labels  # HH:MM and counts only
    assert "0.25" not in svg and 'data-last="3"' in svg
    ticks = charts.time_ticks(span.start, span.end)
    assert span.start <= ticks[0] and ticks[-1] <= span.end and len(ticks) <= 9


def test_tables_sort_as_the_url_says() -> None:
    rows = [("a", 1), ("b", 3), ("c", 2)]
    cols = [Column("name", "name"), Column("fail", "failing", True)]
    html = table("t", "overview", Filters(sort="-fail"), cols, rows)
    assert re.findall(r"<td>(\w)</td>", html) == ["b", "c", "a"]
    assert 'href="/?sort=fail"' in html  # the header flips the order
    html = table("t", "overview", Filters(sort="name"), cols, rows)
    assert re.findall(r"<td>(\w)</td>", html) == ["a", "b", "c"]


def test_the_page_keeps_the_filters_and_escapes_names() -> None:
    f = Filters(namespace="<b>", range="7d")
    page = document("trends", f, Choices(["default"], ["<b>", "x"], ["p"]), "<p>content</p>")
    assert "<b>" not in page
    assert '<option value="&lt;b&gt;" selected>&lt;b&gt;</option>' in page
    assert '<option value="7d" selected>' in page
    assert 'data-refresh="30"' in page
