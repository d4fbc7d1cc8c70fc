"""``bench --fleet``: a fleet following live clusters, and the fleet's
questions over many simulated ones.

- **Live**: ``clusters`` fresh ``up`` systems (each its own embedded broker)
  under the workload's Kyverno-shaped writes at once, and one
  ``reports-pipeline fleet`` following them; two phases, each until the fleet
  has caught up: ``rate`` steps/s offered to each cluster (an open loop,
  below what the shared cores take), then ``clients`` closed-loop clients
  per cluster (as many writes as the machine takes). The fleet's lag is
  each change's time from its commit in its cluster (its record's time) to
  its rows in the fleet store (``results.written``), over every change
  committed in the phase, beside each cluster's own store's lag measured
  the same way; the fleet's CPU per change and RSS are read from its
  process.
- **Simulated**: ``simulated_clusters`` x ``simulated_reports`` reports
  written into a fresh fleet store through the fleet's own path
  (``fleetrows`` and ``FleetStore``) from records in the committer's format
  (``Change.encode``) and the agent's (summaries), then each question of
  docs/fleet.md timed (median of five).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import psutil

from bench.client import Client
from bench.figures import Report, sampled
from bench.questions import FLEET
from bench.traffic import Driver, closed_loop, open_loop
from bench.upprocess import RunningSystem
from bench.workload import Mix, resources
from pipeline.aggregate import counts as aggregate
from pipeline.clickhouse import fleetrows, rows
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.fleet import FleetStore
from pipeline.model.messages import Change
from pipeline.settings import Settings
from reportsamples.reports import policy_report

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    clusters: int = 3
    #: writers per cluster
    clients: int = 8
    #: steps/s offered to each cluster in the open-loop phase, below what the
    #: machine's cores take with every cluster and the fleet on them (0: none)
    rate: float = 15.0
    seconds: float = 60.0
    resources: int = 300
    namespaces: int = 10
    simulated_clusters: int = 100
    simulated_reports: int = 10_000
    mix: str = "admission=50,background=40,read=10"


async def run(options: Options, work: Path, progress: Progress) -> Report:
    report = Report(context={"fleet": vars(options)})
    if options.clusters:
        await live(options, work / "live", report, progress)
    if options.simulated_clusters and options.simulated_reports:
        await simulated(options, work / "simulated", report, progress)
    return report


async def live(options: Options, work: Path, report: Report, progress: Progress) -> None:
    systems = [RunningSystem(work / f"cluster-{i}", {"REPORTS_TOPIC_PREFIX": "reports"})
               for i in range(options.clusters)]
    fleet: RunningSystem | None = None
    try:
        progress(f"fleet: starting {options.clusters} clusters")
        await asyncio.gather(*(s.start(timeout=180) for s in systems))
        config = work / "fleet.yaml"
        config.write_text("clusters:\n" + "".join(
            f"  - name: cluster-{i}\n    bootstrap: {_bootstrap(s)}\n"
            for i, s in enumerate(systems)))
        fleet = RunningSystem(work / "fleet", command=("fleet", "--config", str(config)))
        await fleet.start()
        process = psutil.Process(fleet.pid)
        pools = [resources(options.resources, options.namespaces, prefix=f"fleet-{i}",
                           rng=random.Random(i)) for i in range(options.clusters)]
        async with Client(fleet.kubeconfig) as fleet_api:
            await asyncio.gather(*(_seed(s, options, pool)
                                   for s, pool in zip(systems, pools, strict=True)))
            if options.rate:
                progress(f"fleet: {options.clusters} clusters x {options.rate:g} steps/s"
                         f" offered, {options.seconds:g} s")
                await _phase(f"{options.rate:g} steps/s offered per cluster (open loop)",
                             "", systems, pools, options, fleet_api, process, report, progress)
            progress(f"fleet: {options.clusters} clusters x {options.clients} clients,"
                     f" {options.seconds:g} s")
            await _phase(f"{options.clients} clients per cluster (closed loop)", ", busiest",
                         systems, pools, replace(options, rate=0), fleet_api, process, report,
                         progress)
    finally:
        for s in ([fleet] if fleet else []) + systems:
            await s.stop()


async def _phase(load: str, suffix: str, systems: list[RunningSystem],
                 pools: list[list[Any]], options: Options, fleet_api: Client,
                 process: psutil.Process, report: Report, progress: Progress) -> None:
    """One load on every cluster at once (open loop at ``options.rate``, else
    closed), until the fleet has caught up; its figures named with ``suffix``."""
    started = datetime.now(UTC)
    page = await fleet_api.text("/metrics")
    taken_before = _changes_taken(page)
    writes_before = (sampled(page, "reports_fleet_write_seconds_count"),
                     sampled(page, "reports_fleet_write_seconds_sum"))
    cpu_before = _cpu(process)
    rss: list[int] = []
    sampling = asyncio.create_task(_sample_rss(process, rss))
    runs = await asyncio.gather(*(_traffic(s, options, pool, i)
                                  for i, (s, pool) in enumerate(zip(systems, pools, strict=True))))
    ended = datetime.now(UTC)
    writes = sum(len(r.writes()) for r in runs)
    await _caught_up(fleet_api, systems, progress)
    sampling.cancel()
    cpu = _cpu(process) - cpu_before
    page = await fleet_api.text("/metrics")
    taken = _changes_taken(page) - taken_before
    writes_count = sampled(page, "reports_fleet_write_seconds_count") - writes_before[0]
    writes_time = sampled(page, "reports_fleet_write_seconds_sum") - writes_before[1]
    window = {"since": rows.stamp(started), "until": rows.stamp(ended)}
    lag = await _ask(fleet_api, LAG, **window)
    own = []  # each cluster's own store's lag behind its log, the same way
    for system in systems:
        async with Client(system.kubeconfig) as api:
            own.append((await _ask(api, LAG, **window))[0][1])
    changes, (p50, p99) = int(lag[0][0]), lag[0][1]
    rate = writes / options.seconds
    note = (f"{load}: {changes} changes with results of {len(systems)} clusters, {rate:.0f}"
            " writes/s together; from each change's commit to its rows in the fleet")
    report.add(f"fleet lag p50{suffix}", p50, "ms", note=note)
    report.add(f"fleet lag p99{suffix}", p99, "ms", ("<=", 2000), note)
    report.add(f"clusters' own lag p50, worst{suffix}", max(o[0] for o in own), "ms",
               note="each cluster's materializer, from a change's commit to its rows"
                    " in the cluster's own store, measured as the fleet's; the worst"
                    f" of the {len(systems)}")
    report.add(f"clusters' own lag p99, worst{suffix}", max(o[1] for o in own), "ms",
               note="the same, p99")
    report.add(f"fleet write, mean{suffix}", writes_time / max(1, writes_count) * 1000, "ms",
               note=f"{writes_count:.0f} writes of every follower's batches (an insert"
                    " per table, then the positions); a change waits for the one in"
                    " progress and its own")
    report.add(f"fleet CPU per change{suffix}", cpu / max(1, taken) * 1e6, "us",
               note=f"the fleet process's user and system time over the {taken} changes"
                    " it took (deletions and summaries' records included in its time)")
    report.add(f"fleet RSS, most{suffix}", max(rss, default=0) / 2**20, "MiB", ("<=", 1024),
               "sampled every second during the phase")


#: a store's lag behind the change logs it takes: one row per change with
#: results (every row of a change has its commit time and the time the store
#: wrote it; no row replaces another's), the changes committed from ``since``
#: until ``until``
LAG = ("SELECT count(), quantiles(0.5, 0.99)(lag) FROM (SELECT"
       " any(dateDiff('millisecond', committed, written)) AS lag FROM results"
       " WHERE committed >= {since:DateTime64(3)} AND committed < {until:DateTime64(3)}"
       " GROUP BY cluster, resource, namespace, report, resource_version)")


def _changes_taken(page: str) -> int:
    """Change-log records the fleet took, from its /metrics page."""
    return int(sampled(page, "reports_fleet_records_total", 'topic="changes"'))


def _bootstrap(system: RunningSystem) -> str:
    endpoints = orjson.loads((system.data_dir / "endpoints.json").read_bytes())
    return str(endpoints["kafka_bootstrap"])


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def _sample_rss(process: psutil.Process, into: list[int]) -> None:
    while True:
        into.append(int(process.memory_info().rss))
        await asyncio.sleep(1)


async def _seed(system: RunningSystem, options: Options, pool: list[Any]) -> None:
    """Each resource's PolicyReport created once."""
    async with Client(system.kubeconfig, connections=options.clients + 4) as client:
        driver = Driver(client, Mix.parse(options.mix), random.Random(0))
        await closed_loop(driver, pool, concurrency=options.clients, seed=True)


async def _traffic(system: RunningSystem, options: Options, pool: list[Any], seed: int
                   ) -> Any:
    """The mix on ``pool``: open loop at ``options.rate`` steps/s, else closed
    with ``options.clients``."""
    rng = random.Random(seed)
    connections = options.clients + 4 if not options.rate else int(options.rate) + 8
    async with Client(system.kubeconfig, connections=connections) as client:
        driver = Driver(client, Mix.parse(options.mix), rng)
        if options.rate:
            return await open_loop(driver, pool, rate=options.rate, duration=options.seconds)
        return await closed_loop(driver, pool, concurrency=options.clients,
                                 duration=options.seconds)


async def _ask(client: Client, sql: str, **parameters: Any) -> list[list[Any]]:
    answer = await client.request("POST", "/analytics/v1/query",
                                  {"query": sql, "parameters": parameters})
    return [list(r) for r in answer["rows"]]


async def _caught_up(fleet: Client, systems: list[RunningSystem], progress: Progress,
                     timeout: float = 300) -> None:
    """Until the fleet holds every cluster's reports as the cluster does."""
    deadline = time.monotonic() + timeout
    for i, system in enumerate(systems):
        async with Client(system.kubeconfig) as own:
            while True:
                [[want]] = await _ask(own, "SELECT max(resource_version) FROM reports")
                [[have]] = await _ask(fleet, "SELECT max(resource_version) FROM fleet_reports"
                                      " WHERE cluster = {c:String}", c=f"cluster-{i}")
                if int(have) >= int(want):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the fleet did not catch up with cluster-{i} in"
                                       f" {timeout:g} s ({have} of {want})")
                await asyncio.sleep(0.5)
    progress("fleet: caught up with every cluster")


async def simulated(options: Options, work: Path, report: Report, progress: Progress) -> None:
    work.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_env({}, database="fleet")
    connection = Connection(settings, data_dir=work)
    store = FleetStore(connection)
    analytics = AnalyticsQueries(connection)
    total = options.simulated_clusters * options.simulated_reports
    try:
        await connection.start()
        progress(f"fleet: writing {options.simulated_clusters} simulated clusters x"
                 f" {options.simulated_reports:,} reports")
        began = time.monotonic()
        for c in range(options.simulated_clusters):
            await _simulate_cluster(store, f"sim-{c:03d}", options, seed=c)
        progress(f"fleet: {total:,} reports written in {time.monotonic() - began:.0f} s")
        for name, sql in FLEET.items():
            params = {"policy": "disallow-capabilities"} if "{policy" in sql else {}
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                await analytics.analytics(sql, params)
                times.append(time.perf_counter() - t0)
            report.add(f"fleet question {name}", statistics.median(times) * 1000, "ms",
                       ("<=", 1000), f"{options.simulated_clusters} clusters, {total:,}"
                       " reports; median of 5")
    finally:
        await analytics.close()
        await connection.close()


async def _simulate_cluster(store: FleetStore, cluster: str, options: Options, *,
                            seed: int) -> None:
    """One cluster's reports, as its change log and summaries would carry them."""
    rng = random.Random(seed)
    now = time.time()
    batch = fleetrows.Batch()
    per_policy: dict[tuple[str, str], dict[str, int]] = {}
    pods = resources(options.simulated_reports, options.namespaces, prefix="team", rng=rng)
    for i, pod in enumerate(pods):
        obj = policy_report(pod, int(now))
        obj["metadata"]["resourceVersion"] = str(i + 1)
        record = SimpleNamespace(value=Change("ADDED", obj, i + 1).encode(), offset=i,
                                 timestamp=int(now * 1000), headers=())
        fleetrows.changes(cluster, [record], batch)
        for (n, policy), counts in aggregate.by_policy(aggregate.recount([obj])).items():
            total = per_policy.setdefault((n, policy), dict.fromkeys(aggregate.STATUSES, 0))
            for status, value in counts.items():
                total[status] += value
        if len(batch.reports) >= 2000:
            await store.write(batch)
            batch = fleetrows.Batch()
    at = datetime.fromtimestamp(now, UTC).isoformat()
    summaries = [SimpleNamespace(value=orjson.dumps({
        "kind": "current", "cluster": cluster, "namespace": n, "policy": p, "counts": c,
        "resourceVersion": str(options.simulated_reports), "time": at}))
        for (n, p), c in per_policy.items()]
    fleetrows.summaries(cluster, summaries, batch)
    await store.write(batch)
