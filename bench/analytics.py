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
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg

from bench import questions
from bench.postgres import Postgres
from bench.workload import JSON, Resource, policy_report, random_failing
from dashboard import filters, views
from dashboard.filters import Filters
from pipeline.aggregate import counts as aggregate
from pipeline.clickhouse.store import ReportStore
from pipeline.model.messages import Change
from pipeline.settings import Settings

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
    clickhouse_load_seconds: float
    postgres_load_seconds: float
    clickhouse_bytes: int
    postgres_bytes: int
    questions: list[Question]
    #: (page, median seconds to render it) for the dashboard's views
    pages: list[tuple[str, float]]


def generate(count: int, *, seed: int, now: datetime) -> Iterator[tuple[JSON, datetime]]:
    """``count`` current PolicyReports over ``count // 250`` namespaces, each
    last written at a time in the past 30 days; some results carry a score."""
    rng = random.Random(seed)
    namespaces = max(1, count // 250)
    for i in range(count):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        res = Resource(f"team-{i % namespaces:03d}", f"pod-{i:07d}", uid,
                       random_failing(rng))
        when = now - timedelta(seconds=rng.uniform(0, DAYS * 86400))
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


def _windows(reports: list[tuple[JSON, datetime]], cluster: str) -> TrendRows:
    """policy_counts, and daily policy_windows and policy_totals_windows rows,
    as the aggregator would write them with one-day windows, for reports
    written in time order."""
    totals: dict[aggregate.CountKey, int] = {}
    windows: list[list[Any]] = []
    cluster_windows: list[list[Any]] = []
    day: datetime | None = None
    touched: dict[tuple[str, str], int] = {}

    def close(day: datetime) -> None:
        per = aggregate.by_policy(totals)
        for (ns, policy), written in touched.items():
            counts = per.get((ns, policy), dict.fromkeys(aggregate.STATUSES, 0))
            windows.append([cluster, ns, policy, day, day + timedelta(days=1), written,
                            counts["fail"], 0, *(counts[s] for s in aggregate.STATUSES),
                            len(windows) + 1, day])
        across = aggregate.across_namespaces(totals)
        for policy in sorted({policy for _, policy in touched}):
            counts = across.get(policy, dict.fromkeys(aggregate.STATUSES, 0))
            cluster_windows.append([cluster, policy, day, day + timedelta(days=1),
                                    *(counts[s] for s in aggregate.STATUSES),
                                    len(cluster_windows) + 1, day])
        touched.clear()

    for obj, when in sorted(reports, key=lambda r: r[1]):
        start = when.replace(hour=0, minute=0, second=0, microsecond=0)
        if day is not None and start != day:
            close(day)
        day = start
        applied = aggregate.contribution(obj, int(obj["metadata"]["resourceVersion"]))
        assert applied is not None
        contributed = applied.counts()
        aggregate.add_into(totals, contributed)
        for (ns, policy, _), n in contributed.items():
            touched[(ns, policy)] = touched.get((ns, policy), 0) + n
    if day is not None:
        close(day)
    now = datetime.now(UTC)
    counts = [[cluster, ns, policy, *(c[s] for s in aggregate.STATUSES), len(reports), now]
              for (ns, policy), c in aggregate.by_policy(totals).items()]
    return TrendRows(counts, windows, cluster_windows)


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
    now = datetime.now(UTC)
    data = list(generate(reports, seed=seed, now=now))
    raw = [orjson.dumps(obj) for obj, _ in data]
    raw_bytes = sum(map(len, raw))
    settings = Settings.from_env({}, database="bench_analytics")

    progress(f"analytics: loading {reports} reports into ClickHouse")
    store = ReportStore(settings, data_dir=base / "clickhouse")
    await store.start()
    try:
        started = time.perf_counter()
        await load(store, data, settings.cluster)
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
            pg_load = await asyncio.to_thread(_load_postgres, pg, data, raw)
            # The generated reports (gigabytes of Python objects) are no longer
            # needed; freed, the collector no longer walks them while both
            # clients decode answers.
            data.clear()
            raw.clear()
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
    return Comparison(reports, reports * 19, raw_bytes, ch_load, pg_load, ch_bytes,
                      pg_bytes, results, pages)


async def load(store: ReportStore, data: list[tuple[JSON, datetime]], cluster: str) -> None:
    """Generated reports into ClickHouse as the pipeline writes them: each
    version materialized on the day it was written, the counts, and daily
    windows per namespace and policy and per policy."""
    by_day: dict[datetime, list[Change]] = {}
    for obj, when in data:
        day = when.replace(hour=0, minute=0, second=0, microsecond=0)
        by_day.setdefault(day, []).append(Change("ADDED", obj,
                                                 int(obj["metadata"]["resourceVersion"])))
    for day, changes in sorted(by_day.items()):
        await store.write_changes(changes, topic="bench", partition=0, offset=0, committed=day)
    trends = _windows(data, cluster)
    await store.write_policy_counts(trends.counts)
    await store.write_policy_windows(trends.windows)
    await store.write_policy_totals_windows(trends.totals)
    await store.run(lambda c: [c.command(f"OPTIMIZE TABLE {t} FINAL")
                               for t in ("reports", "results", "policy_counts",
                                         "policy_windows", "policy_totals_windows")])


class _StoreSource:
    """The dashboard's source on the bench's store (its analytics queries)."""

    def __init__(self, store: ReportStore):
        self._store = store

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str],
                                                                         list[tuple[Any, ...]]]:
        return await self._store.analytics(sql, parameters)


async def _time_pages(store: ReportStore, runs: int, *, now: float) -> list[tuple[str, float]]:
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


def _load_postgres(pg: Postgres, data: list[tuple[JSON, datetime]], raw: list[bytes]) -> float:
    started = time.perf_counter()
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(questions.POSTGRES_SCHEMA)
        with conn.cursor().copy(
                "COPY policyreports (name, namespace, clusterId, report) FROM STDIN") as copy:
            for (obj, _), body in zip(data, raw, strict=True):
                meta = obj["metadata"]
                copy.write_row((meta["name"], meta["namespace"], "default", body.decode()))
        conn.execute("VACUUM ANALYZE policyreports")
    return time.perf_counter() - started
