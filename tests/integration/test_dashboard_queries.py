"""The dashboard's SQL on chDB: counts carried forward by ClickHouse equal the
pure carry-forward (``dashboard.series``), ranking by count and by change
picks the series it says, and the cluster-wide totals agree with the sum of
every namespace's series."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dashboard import filters, series
from dashboard.filters import Filters, Span
from pipeline.clickhouse.aggregates import AggregateWrites
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.connection import Connection
from pipeline.settings import Settings

pytestmark = pytest.mark.integration
NOW = 1_800_000_000 - 1_800_000_000 % 3600 + 1234


async def test_carried_counts_ranking_and_totals(tmp_path: Path) -> None:
    clickhouse = Connection(Settings.from_env({}, database=f"dash_{uuid.uuid4().hex[:8]}"),
                            data_dir=tmp_path)
    await clickhouse.start()
    aggregates, analytics = AggregateWrites(clickhouse), AnalyticsQueries(clickhouse)
    rng = random.Random(3)
    windows: list[list[Any]] = []
    totals: dict[tuple[str, int], dict[str, int]] = {}  # (policy, start) -> ns -> fail
    last: dict[tuple[str, str], int] = {}
    rv = 0
    for minute in range(-200, 60, 7):  # windows before and within the last hour
        start = (NOW // 60 + minute) * 60
        for ns in ("a", "b", "c"):
            for policy in ("p1", "p2", "p3"):
                if rng.random() < 0.4:
                    continue
                rv += 1
                fail = rng.randint(0, 6)
                new = max(0, fail - last.get((ns, policy), 0))
                last[(ns, policy)] = fail
                when = datetime.fromtimestamp(start, UTC)
                windows.append(["default", ns, policy, when, when, 1, new, 0, 0, fail, 0, 0,
                                0, rv, when])
                totals.setdefault((policy, start), {})
        for policy in ("p1", "p2", "p3"):
            if (policy, start) in totals:
                rv += 1
                fail = sum(v for (n, p), v in last.items() if p == policy)
                when = datetime.fromtimestamp(start, UTC)
                windows_total = ["default", policy, when, when, 0, fail, 0, 0, 0, rv, when]
                await aggregates.write_policy_totals_windows([windows_total])
    await aggregates.write_policy_windows(windows)
    try:
        for f in (Filters(range="1h"), Filters(range="1h", rank="change", top=3),
                  Filters(range="1h", namespace="b"), Filters(range="6h", bucket="15m")):
            span = Span.of(f, NOW)
            _, rows = await analytics.analytics(*filters.windows(f, span))
            _, carried = await analytics.analytics(*filters.carried_in(f, span))
            expected = series.build(span.buckets(), rows, carried)
            _, top = await analytics.analytics(*filters.top_series(f, span))
            got = {(ns, policy): [int(v) for v in vals] for ns, policy, vals in top}
            want = series.ranked(expected, top=f.top, by=f.rank)
            # counts came into the hour from before it
            assert len(want) >= 3 and (carried or f.range != "1h")
            assert {s.key for s in want} == set(got), f
            for s in want:
                assert got[s.key] == s.fail, (f, s.key)
            _, [(count,)] = await analytics.analytics(*filters.series_count(f, span))
            assert count == len([s for s in expected if any(s.fail)]), f
            _, [(total,)] = await analytics.analytics(*filters.total_series(f, span))
            assert [int(v) for v in total] == series.total(expected, len(span.buckets())), f
    finally:
        await analytics.close()
        await clickhouse.close()
