"""The analytics comparison: the same generated reports loaded into ClickHouse
(through the materializer's own row builders) and into PostgreSQL with the
reference server's schema, then the same questions asked of both."""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg

from bench import questions
from bench.postgres import Postgres
from bench.workload import random_failing
from dashboard import filters, views
from dashboard.filters import Filters
from pipeline.aggregate import counts as aggregate
from pipeline.clickhouse.aggregates import AggregateWrites
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import Connection
from pipeline.model.messages import Change
from pipeline.settings import Settings
from reportsamples.reports import JSON, Resource, policy_report

#: Policies given high severity in the generated data, so the "top resources
#: with high or critical failures" question has something to find.
HIGH = {1: "high", 7: "high", 8: "critical", 13: "high"}
DAYS = 30


@dataclass(frozen=True)
class Question:
    name: str
    clickhouse_seconds: float
    postgres_seconds: float
    clickhouse_rows: int
    postgres_rows: int

    @property
    def speedup(self) -> float:
        return self.postgres_seconds / self.clickhouse_seconds


@dataclass(frozen=True)
class Comparison:
    reports: int
    results: int
    raw_json_bytes: int
    #: seconds to load each store, making the reports included
    clickhouse_load_seconds: float
    postgres_load_seconds: float
    clickhouse_bytes: int
    postgres_bytes: int
    questions: list[Question]
    #: (page, median seconds to render it) for the dashboard's views
    pages: list[tuple[str, float]]


def generate(count: int, *, seed: int, now: datetime) -> Iterator[tuple[JSON, datetime]]:
    """``count`` current PolicyReports over ``count // 250`` namespaces, each
    last written at a time in the past 30 days (in time order, their
    resourceVersions growing with it); some results carry a score. Made one
    at a time: a million of them would not fit in memory at once."""
    rng = random.Random(seed)
    namespaces = max(1, count // 250)
    ages = sorted((rng.uniform(0, DAYS * 86400) for _ in range(count)), reverse=True)
    for i, age in enumerate(ages):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        res = Resource(f"team-{i % namespaces:03d}", f"pod-{i:07d}", uid,
                       random_failing(rng))
        when = now - timedelta(seconds=age)
        extra: dict[int, JSON] = {k: {"severity": v} for k, v in HIGH.items()}
        for k in rng.sample(range(19), 2) if rng.random() < 0.1 else ():
            extra.setdefault(k, {})["properties"] = {"score": f"{rng.uniform(0, 10):.1f}"}
        obj = policy_report(res, int(when.timestamp()), extra=extra)
        obj["metadata"].update(uid=uid, resourceVersion=str(i + 1),
                               creationTimestamp=when.strftime("%Y-%m-%dT%H:%M:%SZ"))
        yield obj, when


@dataclass(frozen=True)
class TrendRows:
    counts: list[list[Any]]
    windows: list[list[Any]]
    totals: list[list[Any]]


class _Trends:
    """policy_counts, and daily policy_windows and policy_totals_windows rows,
    as the aggregator would write them with one-day windows, for reports
    given one at a time in time order."""

    def __init__(self, cluster: str):
        self._cluster = cluster
        self._totals: dict[aggregate.CountKey, int] = {}
        self._windows: list[list[Any]] = []
        self._cluster_windows: list[list[Any]] = []
        self._day: datetime | None = None
        self._touched: dict[tuple[str, str], int] = {}
        self._reports = 0

    def _close(self, day: datetime) -> None:
        per = aggregate.by_policy(self._totals)
        for (ns, policy), written in self._touched.items():
            counts = per.get((ns, policy), dict.fromkeys(aggregate.STATUSES, 0))
            self._windows.append([self._cluster, ns, policy, day, day + timedelta(days=1),
                                  written, counts["fail"], 0,
                                  *(counts[s] for s in aggregate.STATUSES),
                                  len(self._windows) + 1, day])
        across = aggregate.across_namespaces(self._totals)
        for policy in sorted({policy for _, policy in self._touched}):
            counts = across.get(policy, dict.fromkeys(aggregate.STATUSES, 0))
            self._cluster_windows.append([self._cluster, policy, day, day + timedelta(days=1),
                                          *(counts[s] for s in aggregate.STATUSES),
                                          len(self._cluster_windows) + 1, day])
        self._touched.clear()

    def add(self, obj: JSON, when: datetime) -> None:
        start = when.replace(hour=0, minute=0, second=0, microsecond=0)
        if self._day is not None and start != self._day:
            if start < self._day:
                raise ValueError("reports must be given in time order")
            self._close(self._day)
        self._day = start
        self._reports += 1
        applied = aggregate.contribution(obj, int(obj["metadata"]["resourceVersion"]))
        assert applied is not None
        contributed = applied.counts()
        aggregate.add_into(self._totals, contributed)
        for (ns, policy, _), n in contributed.items():
            self._touched[(ns, policy)] = self._touched.get((ns, policy), 0) + n

    def rows(self) -> TrendRows:
        if self._day is not None:
            self._close(self._day)
            self._day = None
        now = datetime.now(UTC)
        counts = [[self._cluster, ns, policy, *(c[s] for s in aggregate.STATUSES),
                   self._reports, now]
                  for (ns, policy), c in aggregate.by_policy(self._totals).items()]
        return TrendRows(counts, self._windows, self._cluster_windows)


def _timed(fn: Callable[[], int], runs: int) -> tuple[float, int]:
    fn()  # warm the caches
    times, rows = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        rows = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), rows


async def compare(base: Path, *, reports: int, runs: int, seed: int = 7,
                  progress: Callable[[str], None] = print) -> Comparison:
    """The same ``reports`` generated reports into ClickHouse and PostgreSQL,
    each made again for each store (a million do not fit in memory at once),
    then the questions asked of both."""
    now = datetime.now(UTC)
    settings = Settings.from_env({}, database="bench_analytics")

    progress(f"analytics: loading {reports} reports into ClickHouse")
    clickhouse = Connection(settings, data_dir=base / "clickhouse")
    await clickhouse.start()
    store = AnalyticsQueries(clickhouse)
    try:
        started = time.perf_counter()
        await load(clickhouse, generate(reports, seed=seed, now=now), settings.cluster)
        ch_load = time.perf_counter() - started
        ch_bytes = int((await store.analytics(
            "SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database ="
            " currentDatabase()"))[1][0][0])

        def ask_clickhouse(sql: str) -> Callable[[], int]:
            def run() -> int:
                return len(asyncio.run_coroutine_threadsafe(store.analytics(sql), loop).result()[1])
            return run

        loop = asyncio.get_running_loop()
        progress(f"analytics: starting PostgreSQL, loading {reports} reports")
        pg = Postgres(base / "postgres")
        await asyncio.to_thread(pg.start)
        try:
            started = time.perf_counter()
            raw_bytes = await asyncio.to_thread(_load_postgres, pg,
                                                generate(reports, seed=seed, now=now))
            pg_load = time.perf_counter() - started
            gc.collect()
            results = []
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                row = conn.execute("SELECT pg_total_relation_size('policyreports')").fetchone()
                pg_bytes = int(row[0]) if row else 0
                for name, ch_sql in questions.CLICKHOUSE.items():
                    progress(f"analytics: {name}")
                    ch_s, ch_rows = await asyncio.to_thread(_timed, ask_clickhouse(ch_sql), runs)

                    def ask_postgres(sql: str = questions.POSTGRES[name]) -> int:
                        return len(conn.execute(sql).fetchall())
                    pg_s, pg_rows = await asyncio.to_thread(_timed, ask_postgres, runs)
                    results.append(Question(name, ch_s, pg_s, ch_rows, pg_rows))
        finally:
            await asyncio.to_thread(pg.stop)
        progress("analytics: dashboard pages")
        pages = await _time_pages(store, runs, now=now.timestamp())
    finally:
        await store.close()
        await clickhouse.close()
    return Comparison(reports, reports * 19, raw_bytes, ch_load, pg_load, ch_bytes,
                      pg_bytes, results, pages)


async def load(clickhouse: Connection, data: Iterable[tuple[JSON, datetime]], cluster: str, *,
               batch: int = 10_000) -> None:
    """Generated reports, in time order, into ClickHouse as the pipeline
    writes them: each version materialized on the day it was written (in
    batches of at most ``batch``), the counts, and daily windows per
    namespace and policy and per policy."""
    trends = _Trends(cluster)
    writes, aggregates = ChangeWrites(clickhouse), AggregateWrites(clickhouse)
    changes: list[Change] = []
    day: datetime | None = None
    for obj, when in data:
        start = when.replace(hour=0, minute=0, second=0, microsecond=0)
        if changes and (start != day or len(changes) >= batch):
            await writes.write_changes(changes, topic="bench", partition=0, offset=0,
                                       committed=day)
            changes = []
        day = start
        trends.add(obj, when)
        changes.append(Change("ADDED", obj, int(obj["metadata"]["resourceVersion"])))
    if changes:
        await writes.write_changes(changes, topic="bench", partition=0, offset=0, committed=day)
    rows = trends.rows()
    await aggregates.write_policy_counts(rows.counts)
    await aggregates.write_policy_windows(rows.windows)
    await aggregates.write_policy_totals_windows(rows.totals)
    await clickhouse.run(lambda c: [c.command(f"OPTIMIZE TABLE {t} FINAL")
                                    for t in ("reports", "results", "policy_counts",
                                              "policy_windows", "policy_totals_windows")])


class _StoreSource:
    """The dashboard's source on the bench's store (its analytics queries)."""

    def __init__(self, store: AnalyticsQueries):
        self._store = store

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str],
                                                                         list[tuple[Any, ...]]]:
        return await self._store.analytics(sql, parameters)


async def _time_pages(store: AnalyticsQueries, runs: int, *, now: float) -> list[tuple[str, float]]:
    """Each dashboard view over the data set (its queries, concurrently, and
    its HTML): the median of ``runs``, after one warm-up."""
    source = _StoreSource(store)
    month = Filters(range="30d")
    _, top = await source.query(*filters.top_resources(replace(month, top=1)))
    target = filters.Resource(*top[0][:3]) if top else None
    pages: dict[str, Callable[[], Awaitable[str]]] = {
        "overview, 30 days": lambda: views.overview(source, month, now),
        "trends, 30 days by day": lambda: views.trends(source, month, now),
        "trends, 7 days ranked by change": lambda: views.trends(
            source, Filters(range="7d", rank="change"), now),
        "trends, one namespace": lambda: views.trends(
            source, replace(month, namespace="team-000"), now),
        "resources, top 10 high and critical": lambda: views.resources(source, month, None, now),
        "resources, one resource's history": lambda: views.resources(source, month, target, now),
        "findings, score 8 or more": lambda: views.findings(source, month),
    }
    out = []
    for name, render in pages.items():
        await render()
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            await render()
            times.append(time.perf_counter() - started)
        out.append((name, statistics.median(times)))
    return out


def _load_postgres(pg: Postgres, data: Iterable[tuple[JSON, datetime]]) -> int:
    """The reports into PostgreSQL with the reference server's schema; returns
    their bytes of JSON."""
    raw_bytes = 0
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(questions.POSTGRES_SCHEMA)
        with conn.cursor().copy(
                "COPY policyreports (name, namespace, clusterId, report) FROM STDIN") as copy:
            for obj, _ in data:
                body = orjson.dumps(obj)
                raw_bytes += len(body)
                meta = obj["metadata"]
                copy.write_row((meta["name"], meta["namespace"], "default", body.decode()))
        conn.execute("VACUUM ANALYZE policyreports")
    return raw_bytes
