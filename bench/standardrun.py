"""``reports-pipeline bench``: starts ``reports-pipeline up`` on a fresh data
directory, drives Kyverno-shaped traffic through its frontend, measures, then
runs the analytics comparison, and reports every figure beside its target."""

from __future__ import annotations

import asyncio
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
import psutil

from bench import sidebyside, soak, versuspostgres
from bench.baseline import EtcdCrds
from bench.client import TABLE, Client
from bench.figures import Report, by_second, percentile
from bench.traffic import Driver, Run, closed_loop, open_loop, polr_collection
from bench.upprocess import RunningSystem
from bench.workload import POLR_PATH, Mix, flip, resources
from kubeclient import APIError
from pipeline.model.topics import WINDOWS_KEPT
from pipeline.runtime.processes import die_with_parent
from pipeline.settings import Settings
from reportsamples.reports import Resource

MB = 1024 * 1024


@dataclass(frozen=True)
class Options:
    resources: int = 500
    namespaces: int = 20
    list_size: int = 10_000
    concurrency: int = 64
    duration: float = 10.0
    rate: float = 500.0
    #: a second paced phase below the system's capacity, for the latency a
    #: user sees when it is not saturated (no target)
    low_rate: float = 100.0
    latency_duration: float = 4.0
    watchers: int = 100
    watch_rate: float = 50.0
    watch_duration: float = 6.0
    list_runs: int = 3
    analytics_reports: int = 100_000
    analytics_runs: int = 5
    #: minutes of the sustained phase (0: none), at each number of clients
    soak_minutes: float = 5.0
    #: the fewer clients of the compared phases (``concurrency`` the more)
    few_clients: int = 16
    #: measure the etcd-CRD baseline too
    baseline: bool = True
    #: minutes of the baseline's sustained phase (None: ``soak_minutes``, 5 at most)
    baseline_soak_minutes: float | None = None
    #: a kubeconfig of another Kubernetes API to drive the same way
    against: Path | None = None
    mix: str = str(Mix())
    seed: int = 1
    data_dir: Path | None = None

    def client_counts(self) -> tuple[int, ...]:
        return tuple(sorted({self.few_clients, self.concurrency}))

    def others_soak_minutes(self) -> float:
        if self.baseline_soak_minutes is not None:
            return self.baseline_soak_minutes
        return min(self.soak_minutes, 5.0)

    @classmethod
    def quick(cls) -> Options:
        return cls(resources=300, namespaces=10, list_size=2000, duration=5.0,
                   latency_duration=3.0, watch_duration=4.0, list_runs=2,
                   analytics_reports=10_000, analytics_runs=3, soak_minutes=1.0)


class Memory:
    """The peak resident memory of a process, sampled from a thread."""

    def __init__(self, pid: int, interval: float = 0.002):
        self._process = psutil.Process(pid)
        self._interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            time.sleep(self._interval)

    def __enter__(self) -> Memory:
        self.baseline = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def _seed(driver: Driver, pool: list[Resource], concurrency: int) -> Run:
    return await closed_loop(driver, pool, concurrency=concurrency, seed=True)


async def _freshness(client: Client, driver: Driver, probe: Resource, stop: asyncio.Event,
                     rng: random.Random) -> list[float]:
    """Write the probe report (its fail count changes each time), then poll the
    trend tables until both hold a row at least that new."""
    samples: list[float] = []
    sql = ("SELECT (SELECT count() FROM policy_counts WHERE resource_version >= {rv:UInt64}),"
           " (SELECT count() FROM policy_windows WHERE resource_version >= {rv:UInt64})")
    while not stop.is_set():
        probe.failing = flip(probe.failing, rng)
        run = Run()
        await driver.step(probe, run, kind="background")
        if not run.writes():
            continue
        acked = time.perf_counter()
        rv = int(probe.report_version or 0)
        while True:
            rows = await client.query(sql, {"rv": rv})
            if rows[0][0] and rows[0][1]:
                samples.append(time.perf_counter() - acked)
                break
            if time.perf_counter() - acked > 30:
                samples.append(float("inf"))
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    return samples


#: the watch lag's p99 target (ms), in the standard run and at a million
WATCH_LAG_TARGET_MS = 250


@dataclass(frozen=True)
class WatchLags:
    """What the watches of a phase received."""

    #: (seconds from the phase's start to the write's, the event's arrival
    #: minus the write's start) of each delivered event
    timed: list[tuple[float, float]]
    #: events a watch did not receive in time
    missing: int
    #: the writes' latencies
    writes: list[float]

    @property
    def lags(self) -> list[float]:
        return [lag for _, lag in self.timed]

    def seconds_note(self) -> str:
        """How the tail is spread: the worst second's p99 and how many
        seconds' p99 missed the target."""
        worst = by_second(self.timed, 99)
        over = sum(1 for lag in worst if lag * 1000 > WATCH_LAG_TARGET_MS)
        return (f"p99 by second: worst {max(worst, default=0) * 1000:.0f} ms, {over} of"
                f" {len(worst)} seconds over {WATCH_LAG_TARGET_MS} ms")


async def watch_lag(kubeconfig: Path, driver: Driver, pool: list[Resource], *,
                    watches: list[tuple[str, str | None]], rate: float, duration: float
                    ) -> WatchLags:
    """A watch of each (collection path, the namespace it sees, None for
    every one), read in a process of their own (``bench.watchers``);
    background writes at ``rate``; the lag of each event is its arrival
    minus its write's start."""
    sent: dict[tuple[str, str, str], float] = {}
    driver.on_write = lambda res, rv, at: sent.__setitem__((res.namespace, res.uid, rv), at)
    async with Client(kubeconfig, connections=1) as client:
        start = (await client.get(f"{POLR_PATH}/policyreports?limit=1"))
    config = {"kubeconfig": str(kubeconfig), "watches": [path for path, _ in watches],
              "resource_version": start["metadata"]["resourceVersion"],
              "timeout": int(duration) + 60}
    arrivals: list[dict[tuple[str, str, str], float]] = [{} for _ in watches]
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.watchers", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, limit=2**24, preexec_fn=die_with_parent())
    assert child.stdin is not None and child.stdout is not None
    stdout = child.stdout
    connected = asyncio.get_running_loop().create_future()

    async def read() -> None:
        async for line in stdout:
            fields = line.rstrip(b"\n").split(b"\t")
            if fields[0] == b"connected":
                connected.set_result(None)
            elif fields[0] == b"error":
                failed = RuntimeError(f"a watch failed: {fields[1].decode()}")
                if not connected.done():
                    connected.set_exception(failed)
                raise failed
            else:
                i, ns, name, rv, at = fields
                arrivals[int(i)][(ns.decode(), name.decode(), rv.decode())] = float(at)
        if not connected.done():
            connected.set_exception(RuntimeError("the watchers' process ended"))

    reading = asyncio.create_task(read())
    try:
        child.stdin.write(orjson.dumps(config) + b"\n")
        await child.stdin.drain()
        await asyncio.wait_for(asyncio.shield(connected), 60 + len(watches) / 10)
        run = await open_loop(driver, pool, rate=rate, duration=duration, kind="background")

        def expected(i: int) -> set[tuple[str, str, str]]:
            ns = watches[i][1]
            return {k for k in sent if ns is None or k[0] == ns}
        wanted = [expected(i) for i in range(len(watches))]
        deadline = time.perf_counter() + 10
        while time.perf_counter() < deadline and not reading.done() and any(
                not want <= got.keys() for want, got in zip(wanted, arrivals, strict=True)):
            await asyncio.sleep(0.05)
        if reading.done():
            reading.result()  # a watch that failed says why
    finally:
        driver.on_write = None
        if not child.stdin.is_closing():
            child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), 30)
        except TimeoutError:
            child.kill()
            await child.wait()
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    timed = [(sent[key] - run.started, got[key] - sent[key])
             for want, got in zip(wanted, arrivals, strict=True) for key in want if key in got]
    missing = sum(1 for want, got in zip(wanted, arrivals, strict=True)
                  for key in want if key not in got)
    return WatchLags(timed, missing, run.writes())


async def run(options: Options, *, progress: Callable[[str], None] = print) -> Report:
    report = Report()
    report.context = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": psutil.cpu_count(), "memory_gib": round(
            psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version(),
            "platform": platform.platform()},
        "options": {k: str(v) if isinstance(v, Path) else v
                    for k, v in asdict(options).items()}}
    base = options.data_dir or Path(tempfile.mkdtemp(prefix="reports-bench-"))
    keep = options.data_dir is not None
    mix = Mix.parse(options.mix)
    clients = options.client_counts()
    try:
        system = RunningSystem(base / "system")
        started = time.perf_counter()
        await system.start()
        report.add("startup", time.perf_counter() - started, "s",
                   note="reports-pipeline up until ready (broker, chDB, worker, frontend)")
        try:
            ours = await _this_system(system, options, report, mix, progress)
        finally:
            await system.stop()
        baseline = None
        if options.baseline:
            etcd = EtcdCrds(base / "etcd-crds", progress=progress)
            await etcd.start()
            try:
                baseline = await _other(sidebyside.Api(
                    etcd.name, sidebyside.Servers(etcd.processes), etcd.disk, _nothing),
                    etcd.kubeconfig, options, mix, progress,
                    soak_minutes=options.others_soak_minutes())
            finally:
                await etcd.stop()
        others = []
        if options.against is not None:
            others.append(await _other(sidebyside.Api("against", None, None, _nothing),
                                       options.against, options, mix, progress,
                                       soak_minutes=options.others_soak_minutes()))
        sidebyside.side_by_side(report, sidebyside.compared(clients, options.list_size), ours,
                                baseline, others)
        comparison = await versuspostgres.compare(base / "analytics",
                                                  reports=options.analytics_reports,
                                                  runs=options.analytics_runs,
                                                  progress=progress)
        _analytics_figures(report, comparison)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return report


async def _nothing(client: Client) -> None:
    return None


def _workload(options: Options) -> tuple[random.Random, list[Resource], list[Resource],
                                         Resource]:
    """The same reports for every API measured: the workload's Pods, the list
    namespace's, and the freshness probe."""
    rng = random.Random(options.seed)
    pool = resources(options.resources, options.namespaces, prefix="bench", rng=rng)
    listed = [replace(r, namespace="bench-list") for r in
              resources(options.list_size, 1, prefix="bench-list", rng=rng)]
    probe = resources(1, 1, prefix="bench-fresh", rng=rng)[0]
    return rng, pool, listed, probe


async def _other(api: sidebyside.Api, kubeconfig: Path, options: Options, mix: Mix,
                 progress: Callable[[str], None], *, soak_minutes: float
                 ) -> sidebyside.Measured:
    """The compared phases on an API other than this system."""
    rng, pool, listed, _ = _workload(options)
    clients = options.client_counts()
    async with Client(kubeconfig, connections=max(clients) + 8) as client:
        driver = Driver(client, mix, rng)

        async def sustained(n: int) -> Run | None:
            if soak_minutes <= 0:
                return None
            progress(f"{api.name}: sustained mixed traffic, {n} clients,"
                     f" {soak_minutes:g} min")
            run = await closed_loop(driver, pool, concurrency=n, duration=soak_minutes * 60)
            progress(f"{api.name}: writes/s each minute at {n} clients: "
                     + " ".join(f"{rate:.0f}" for rate in run.per_minute()))
            return run

        return await sidebyside.measure(
            api, client, driver, pool=pool, listed=listed, clients=clients,
            duration=options.duration, list_runs=options.list_runs, soak=sustained,
            progress=progress)


async def _this_system(system: RunningSystem, options: Options, report: Report, mix: Mix,
                       progress: Callable[[str], None]) -> sidebyside.Measured:
    rng, pool, listed, probe = _workload(options)
    clients = options.client_counts()
    many = max(clients)
    written = Run()

    def tally(r: Run) -> Run:
        written.bytes_written += r.bytes_written
        written.versions_written += r.versions_written
        return r

    api = sidebyside.Api("this system", sidebyside.Servers(
        lambda: [psutil.Process(system.pid)]), system.disk, settle, namespaces=False,
        stages=True)
    async with Client(system.kubeconfig, connections=many + options.watchers + 8) as client:
        driver = Driver(client, mix, rng)
        tally(await _seed(driver, [probe], 1))

        async def own_phases(client: Client, driver: Driver,
                             ours: sidebyside.Measured) -> None:
            await _latency_and_watch(system, client, options, report, mix, rng, pool, probe,
                                     tally, progress)

        async def at_rest(client: Client, driver: Driver, ours: sidebyside.Measured) -> None:
            mixed = ours.runs[f"mixed@{many}"]
            report.add("write throughput", ours.values[f"writes@{many}"], "writes/s",
                       (">=", 1000), note=f"mix {mix}, {many} clients, "
                       f"{len(mixed.reads()) / mixed.seconds:.0f} reads/s alongside"
                       + _errors(mixed))
            seed = ours.runs["create"]
            report.add("create throughput", len(seed.writes()) / seed.seconds, "writes/s",
                       note=f"{len(listed)} PolicyReport creates, {min(clients)} clients")
            n = len(seed.completed)
            window = min(1000, n // 2)
            report.add("create throughput, first creates", seed.rate(0, window), "writes/s",
                       note=f"the first {window}")
            report.add("create throughput, last creates", seed.rate(n - window, n),
                       "writes/s", note=f"the last {window} (does the pace hold as the log"
                       " and tables grow?)")
            _stage_figures(report, ours, clients)
            await _lists(system, client, options, report, progress)
            await _storage(client, report, written, ours)

        async def sustained(n: int) -> Run | None:
            if options.soak_minutes <= 0:
                return None
            await settle(client)
            progress(f"this system: sustained mixed traffic ({mix}), {n} clients,"
                     f" {options.soak_minutes:g} min")
            phase = await soak.sustain(Driver(client, mix, rng), pool,
                                       minutes=options.soak_minutes, concurrency=n,
                                       pid=system.pid, progress=progress)
            if n == many:  # the memory figures, of the many clients' phase
                reads = len(phase.run.reads()) / phase.run.seconds
                window = Settings.from_env().window_seconds
                soak.figures(report, phase, note=f"{options.soak_minutes:g} min of mix {mix},"
                             f" {n} clients, {reads:.0f} reads/s alongside",
                             full_after=(WINDOWS_KEPT + 1) * window + soak.MINUTE)
            # every phase's: whether the pace holds, and what grows if it does not
            progress(f"soak per minute, {n} clients:\n" + soak.table(phase.minutes()))
            return phase.run

        ours = await sidebyside.measure(
            api, client, driver, pool=pool, listed=listed, clients=clients,
            duration=options.duration, list_runs=options.list_runs, soak=sustained,
            between=own_phases, before_sustained=at_rest, progress=progress)
        await _scrape_metrics(client, report)
    return ours


STAGES = ("frontend", "produce", "queue", "decide", "transaction", "reply", "visible")


def _stage_figures(report: Report, ours: sidebyside.Measured, clients: tuple[int, ...]
                   ) -> None:
    """Where a write's time went in each mixed phase (means per write)."""
    for n in clients:
        if f"stage:request@{n}" not in ours.values:
            continue
        parts = ", ".join(f"{stage} {ours.values.get(f'stage:{stage}@{n}', float('nan')):.1f}"
                          for stage in STAGES)
        report.add(f"write time, {n} clients", ours.values[f"stage:request@{n}"], "ms",
                   note=f"mean per write, by stage (ms): {parts}")


async def _storage(client: Client, report: Report, written: Run,
                   ours: sidebyside.Measured) -> None:
    rows = await client.query(
        "SELECT table, sum(bytes_on_disk) AS bytes FROM system.parts WHERE active"
        " AND database = currentDatabase() GROUP BY table ORDER BY bytes DESC")
    on_disk = sum(int(r[1]) for r in rows)
    raw_bytes, versions = ours.written()
    raw_bytes += written.bytes_written
    versions += written.versions_written
    tables = ", ".join(f"{r[0]} {int(r[1]) / max(versions, 1):.0f}" for r in rows[:4])
    raw = raw_bytes / max(versions, 1)
    per_report = on_disk / max(versions, 1)
    report.add("ClickHouse bytes per report", per_report, "bytes",
               note=f"{versions} stored versions; per table: {tables}")
    report.add("raw JSON bytes per report", raw, "bytes")
    report.add("storage ratio", per_report / raw, "x raw", ("<=", 0.1))


async def _latency_and_watch(system: RunningSystem, client: Client, options: Options,
                             report: Report, mix: Mix, rng: random.Random,
                             pool: list[Resource], probe: Resource,
                             tally: Callable[[Run], Run],
                             progress: Callable[[str], None]) -> None:
    """This system's own phases: latency at offered rates, watch lag and the
    freshness of the trend tables."""
    await settle(client)
    progress(f"writes at {options.rate:g}/s for {options.latency_duration:g}s")
    write_mix = replace(mix, read=0)
    paced = tally(await open_loop(Driver(client, write_mix, rng), pool, rate=options.rate,
                                  duration=options.latency_duration))
    writes = paced.writes()
    note = f"offered {options.rate:g}/s, achieved {len(writes) / paced.seconds:.0f}/s"
    report.add("write latency p50", percentile(writes, 50) * 1000, "ms", note=note)
    report.add("write latency p99", percentile(writes, 99) * 1000, "ms", ("<", 100),
               note=note + _errors(paced))

    await settle(client)
    progress(f"writes at {options.low_rate:g}/s for {options.latency_duration:g}s")
    paced = tally(await open_loop(Driver(client, write_mix, rng), pool,
                                  rate=options.low_rate, duration=options.latency_duration))
    writes = paced.writes()
    note = f"offered {options.low_rate:g}/s, achieved {len(writes) / paced.seconds:.0f}/s"
    report.add(f"write latency p50 at {options.low_rate:g}/s",
               percentile(writes, 50) * 1000, "ms", note=note)
    report.add(f"write latency p99 at {options.low_rate:g}/s",
               percentile(writes, 99) * 1000, "ms", note=note + _errors(paced))

    await settle(client)
    progress(f"{options.watchers} watchers, writes at {options.watch_rate:g}/s,"
             " freshness probes")
    stop = asyncio.Event()
    fresh_task = asyncio.create_task(_freshness(client, Driver(client, mix, rng), probe,
                                                stop, rng))
    try:
        watched = await watch_lag(
            system.kubeconfig, Driver(client, write_mix, rng), pool,
            watches=[(f"{POLR_PATH}/policyreports", None)] * options.watchers,
            rate=options.watch_rate, duration=options.watch_duration)
    finally:
        stop.set()
        fresh = await fresh_task
    lags, writes = watched.lags, watched.writes
    note = (f"{options.watchers} watchers x {len(writes)} writes; "
            f"{watched.missing} events not delivered in time; from the write's start")
    report.add("watch lag p50", percentile(lags, 50) * 1000, "ms", note=note)
    report.add("watch lag p99", percentile(lags, 99) * 1000, "ms",
               ("<", WATCH_LAG_TARGET_MS),
               note=f"the same writes were acknowledged at p50 "
               f"{percentile(writes, 50) * 1000:.0f} ms, p99 "
               f"{percentile(writes, 99) * 1000:.0f} ms; {watched.seconds_note()}")
    report.add("freshness p50", percentile(fresh, 50), "s",
               note=f"{len(fresh)} probes during the watch phase: write acknowledged ->"
               " in policy_counts and policy_windows")
    report.add("freshness p99", percentile(fresh, 99), "s", ("<", 2))
    await settle(client)


async def _scrape_metrics(client: Client, report: Report) -> None:
    """Keep the frontend's metrics page as it stands after the phases."""
    report.metrics_page = await client.text("/metrics") or report.metrics_page


async def _lists(system: RunningSystem, client: Client, options: Options, report: Report,
                 progress: Callable[[str], None]) -> None:
    progress(f"LIST of {options.list_size} reports")
    for label, path in (("one namespace", polr_collection("bench-list")),
                        ("all namespaces", f"{POLR_PATH}/policyreports")):
        for fmt, accept in (("JSON", "application/json"), ("Table", TABLE)):
            times, growth, size, items = [], 0, 0, 0
            for _ in range(options.list_runs):
                with Memory(system.pid) as memory:
                    listed = await client.list_timed(path, accept=accept)
                times.append(listed.seconds)
                growth = max(growth, memory.peak - memory.baseline)
                size, items = listed.size, listed.items or 0
            name = f"LIST {label} {fmt}"
            report.add(name, statistics.median(times), "s", ("<", 1.5),
                       note=f"{items} items, {size / MB:.0f} MB, median of {len(times)}")
            report.add(f"{name} memory growth", growth / MB, "MB", ("<", 200),
                       note="frontend peak RSS over its RSS before the request")


async def settle(client: Client, timeout: float = 120) -> None:
    """Wait until a consistent read succeeds (the frontend has read the whole
    change log and ClickHouse covers what its cache no longer holds) and the
    materializer has written every committed change, so that a phase does not
    pay for the backlog of the one before."""
    deadline = time.perf_counter() + timeout
    while True:
        try:
            listed = await client.get(f"{POLR_PATH}/policyreports?limit=1")
            break
        except APIError as err:
            if err.status != 503 or time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.5)
    head = int(listed["metadata"]["resourceVersion"])
    while int((await client.query("SELECT max(resource_version) FROM reports"))[0][0]) < head:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"ClickHouse did not reach resourceVersion {head} in {timeout}s")
        await asyncio.sleep(0.2)


def _errors(run: Run) -> str:
    return f"; errors {dict(run.errors)}" if run.errors else ""


def _analytics_figures(report: Report, c: versuspostgres.Comparison) -> None:
    for q in c.questions:
        same = "same rows" if q.clickhouse_rows == q.postgres_rows or q.name == "daily-fails" \
            else f"rows differ: {q.clickhouse_rows} vs {q.postgres_rows}"
        report.add(f"analytics {q.name} speedup", q.speedup, "x", (">=", 20),
                   note=f"ClickHouse {q.clickhouse_seconds * 1000:.1f} ms, PostgreSQL JSONB "
                   f"{q.postgres_seconds * 1000:.0f} ms, {c.reports} reports; {same}")
    for page, seconds in c.pages:
        report.add(f"dashboard {page}", seconds * 1000, "ms", ("<", 200),
                   note=f"server time: its queries and HTML, {c.reports} reports, median")
    report.add("analytics ClickHouse bytes per report", c.clickhouse_bytes / c.reports, "bytes",
               note=f"PostgreSQL {c.postgres_bytes / c.reports:.0f}, raw JSON "
               f"{c.raw_json_bytes / c.reports:.0f}")


def write_json(report: Report, path: Path) -> list[Path]:
    """The figures as JSON at ``path``, and the metrics page beside it."""
    path.write_bytes(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2))
    written = [path]
    if report.metrics_page:
        page = path.with_suffix(".metrics.txt")
        page.write_text(report.metrics_page)
        written.append(page)
    return written

