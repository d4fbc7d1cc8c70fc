"""docs/analytics.md's SQL and the trend command's query, run on embedded
chDB after real writes went through the pipeline."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench import questions
from launcher.trends import TrendQuery, run_trends
from pipeline.clickhouse import connection
from pipeline.clickhouse.aggregates import AggregateWrites
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import Connection
from pipeline.model.messages import Change
from pipeline.model.resources import RESOURCES
from pipeline.settings import Settings
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
ANALYTICS = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"


def documented_queries() -> dict[str, str]:
    blocks = re.findall(r"```sql\n(.*?)```", ANALYTICS.read_text(), re.S)
    out = {}
    for block in blocks:
        m = re.match(r"-- name: (\S+)", block)
        if m:
            out[m.group(1)] = block
    return out


def test_the_benchmark_asks_the_documented_questions() -> None:
    assert questions.CLICKHOUSE == documented_queries()


def scored(name: str, ns: str, *, fail: int, severity: str, score: str | None) -> dict:  # type: ignore[type-arg]
    obj = report(POLR, name, ns, fail=fail)
    obj["scope"]["name"] = f"{name}-pod"
    for r in obj["results"][:fail]:
        r["severity"] = severity
    if score is not None:
        obj["results"][0]["properties"] = {"score": score, "cve": "CVE-2026-0001"}
    return obj


class Store:
    def __init__(self, running):  # type: ignore[no-untyped-def]
        self.store: AnalyticsQueries = running.system.analytics

    async def check(self) -> None:
        await self.store.check_analytics()

    async def query(self, sql: str, parameters: dict) -> tuple:  # type: ignore[type-arg]
        return await self.store.analytics(sql, parameters)

    async def aclose(self) -> None:
        pass  # the running system's store: it closes it


async def test_documented_queries_answer_their_questions(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    running = await start(make_settings())
    api = running.client
    docs = [("web", "shop", 3, "high", "9.1"), ("db", "shop", 1, "critical", "5.0"),
            ("api", "pay", 2, "high", "8.0"), ("ok", "pay", 0, "low", "9.9")]
    for name, ns, fail, severity, score in docs:
        r = await api.post(collection_path(POLR, ns),
                           json=scored(name, ns, fail=fail, severity=severity, score=score))
        assert r.status_code == 201, r.text
    # a report replaced later (its score gone): only its current version counts
    current = (await api.get(f"{collection_path(POLR, 'pay')}/ok")).json()
    replaced = scored("ok", "pay", fail=1, severity="critical", score=None)
    replaced["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    put = await api.put(f"{collection_path(POLR, 'pay')}/ok", json=replaced)
    assert put.status_code == 200
    last_rv = int(put.json()["metadata"]["resourceVersion"])

    queries = documented_queries()
    assert set(queries) == {"failing-now", "daily-fails", "top-resources", "high-scores"}
    store = running.system.analytics
    def today_total(rows: list) -> int:  # type: ignore[type-arg]
        return sum(r[2] for r in rows if r[0] == max(x[0] for x in rows)) if rows else 0

    # the aggregator and the materializer (side by side) catch up with the writes
    async with asyncio.timeout(30):
        while True:
            _, rows = await store.analytics(queries["failing-now"])
            _, daily = await store.analytics(queries["daily-fails"])
            # the counts are the aggregator's, reports FINAL the materializer's:
            # it must hold the last write too
            _, reports = await store.analytics(
                "SELECT count(), max(resource_version) FROM reports FINAL WHERE NOT deleted")
            if sum(r[2] for r in rows) == 7 and today_total(daily) == 7 \
                    and reports[0][0] == len(docs) and reports[0][1] >= last_rv:
                break
            await asyncio.sleep(0.1)
    assert [tuple(r) for r in rows] == [("pay", "disallow-capabilities", 2),
                                        ("shop", "disallow-capabilities", 2),
                                        ("shop", "disallow-capabilities-strict", 2),
                                        ("pay", "disallow-capabilities-strict", 1)]

    assert {r[1] for r in daily if r[2]} == {"disallow-capabilities",
                                            "disallow-capabilities-strict"}

    _, rows = await store.analytics(queries["top-resources"])
    assert [(r[2], r[3]) for r in rows] == [("web-pod", 3), ("api-pod", 2), ("ok-pod", 1),
                                            ("db-pod", 1)]

    _, rows = await store.analytics(queries["high-scores"])
    assert [(r[0], r[1], r[6]) for r in rows] == [("shop", "web", 9.1), ("pay", "api", 8.0)]

    table = await run_trends(Store(running), TrendQuery("default", 60, 3600))
    lines = table.splitlines()
    assert lines[0].split() == ["TIME", "NAMESPACE", "POLICY", "FAIL", "NEW", "RESOLVED"]
    shop_caps = [ln.split()[4] for ln in lines[1:] if ln.split()[2:4] == [
        "shop", "disallow-capabilities"]]
    assert shop_caps and shop_caps[-1] == "2"
    shop = await run_trends(Store(running), TrendQuery("default", 60, 3600, namespace="pay",
                                                       policy="disallow-capabilities"))
    assert {ln.split()[2] for ln in shop.splitlines()[1:]} == {"pay"}


async def test_daily_fails_carries_each_policy_last_total_forward(tmp_path: Path) -> None:
    clickhouse = Connection(Settings.from_env({}, database=f"daily_{uuid.uuid4().hex[:8]}"),
                            data_dir=tmp_path)
    await clickhouse.start()
    store = AnalyticsQueries(clickhouse)
    try:
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        rows, rv = [], 0

        def window(policy: str, days_ago: int, hour: int, fail: int) -> None:
            nonlocal rv
            rv += 1
            start = today - timedelta(days=days_ago, hours=-hour)
            rows.append(["default", policy, start, start + timedelta(minutes=1),
                         3, fail, 0, 0, 0, rv, start])
        window("p", 3, 9, 5)
        window("p", 3, 17, 4)  # the last total of that day is the one that counts
        window("p", 1, 8, 2)
        window("p", 40, 8, 9)  # before the 30 days asked about
        window("q", 2, 8, 7)
        await AggregateWrites(clickhouse).write_policy_totals_windows(rows)
        _, daily = await store.analytics(documented_queries()["daily-fails"])
    finally:
        await store.close()
        await clickhouse.close()
    day = lambda n: (today - timedelta(days=n)).date()  # noqa: E731
    assert [tuple(r) for r in daily] == [
        (day(3), "p", 4), (day(2), "p", 4), (day(2), "q", 7), (day(1), "p", 2),
        (day(1), "q", 7), (day(0), "p", 2), (day(0), "q", 7)]


async def test_failing_results_columns_cover_reports_written_before_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 0012 gives the stored parts of a store made before it the
    failing results' arrays: the top-resources question finds what the
    result arrays hold, in the reports written before it and after it."""
    settings = Settings.from_env({}, database=f"failing_{uuid.uuid4().hex[:8]}")
    every = connection.migrations()
    before = [m for m in every if m[0] < 12]
    assert [m[1] for m in every if m[0] == 12] == ["0012_failing_results.sql"]

    def change(name: str, fail: int, severity: str, rv: int) -> Change:
        obj = scored(name, "shop", fail=fail, severity=severity, score=None)
        obj["metadata"].update(uid=f"uid-{name}", resourceVersion=str(rv))
        return Change("ADDED", obj, rv)

    async def write(*changes: Change) -> None:
        clickhouse = Connection(settings, data_dir=tmp_path)
        await clickhouse.start()
        try:
            await ChangeWrites(clickhouse).write_changes(
                list(changes), topic="t", partition=0, offset=changes[-1].resource_version)
        finally:
            await clickhouse.close()

    monkeypatch.setattr(connection, "migrations", lambda: before)
    await write(change("web", 3, "high", 1), change("db", 2, "low", 2))
    monkeypatch.setattr(connection, "migrations", lambda: every)
    await write(change("api", 1, "critical", 3))

    clickhouse = Connection(settings, data_dir=tmp_path)
    await clickhouse.start()
    store = AnalyticsQueries(clickhouse)
    try:
        _, top = await store.analytics(documented_queries()["top-resources"])
        _, failing = await store.analytics(
            "SELECT name, failing_policy = arrayFilter((x, s) -> s = 'fail', result_policy,"
            " result_status), length(failing_resource_name) FROM reports FINAL ORDER BY name")
    finally:
        await store.close()
        await clickhouse.close()
    assert [(r[2], r[3]) for r in top] == [("web-pod", 3), ("api-pod", 1)]
    assert [tuple(r) for r in failing] == [("api", True, 1), ("db", True, 2), ("web", True, 3)]
