"""``reports-pipeline bench --scale 10000,100000,1000000``: how every cost of
the system grows with the number of reports it holds.

One ``up`` on a fresh data directory is filled size after size. The bulk of
each size is written on a fast path: create requests sent straight to the
requests topic, which the committer decides as it decides the frontend's
(versions, uids, timestamps, the change log, ClickHouse, the trend tables).
What is measured goes through the API: the last creates of each size, GETs,
LISTs of everything, the watches; then ``up`` is stopped with SIGTERM and
started again on the same directory, and the analytics questions are asked
of ClickHouse and PostgreSQL JSONB holding as many reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import resource
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil
from aiokafka import AIOKafkaProducer

from bench import soak, versuspostgres
from bench.baseline import EtcdCrds
from bench.client import Client
from bench.figures import histogram_percentile, percentile
from bench.soak import Minute
from bench.standardrun import WATCH_LAG_TARGET_MS, Memory, settle, watch_lag
from bench.traffic import Driver, closed_loop, polr_collection
from bench.upprocess import RunningSystem
from bench.workload import POLR_PATH, Mix, random_failing
from kubeclient import APIConflictError, APIError
from kubeclient.errors import api_error
from pipeline.kafka import clientconfig
from pipeline.model.messages import WriteRequest
from pipeline.model.objects import now_rfc3339, object_key
from pipeline.model.resources import by_id
from pipeline.model.topics import PARTITION
from pipeline.settings import Settings
from reportsamples.reports import Resource, policy_report

MB = 1024 * 1024
REPORT = by_id("policyreports.wgpolicyk8s.io")
#: the label every Kyverno report carries: the label-selected watches' selector
MANAGED = "app.kubernetes.io/managed-by=kyverno"


@dataclass(frozen=True)
class Options:
    sizes: tuple[int, ...]
    #: creates through the API at each size (the create rate is theirs)
    creates: int = 10_000
    clients: int = 16
    namespaces: int = 200
    gets: int = 2_000
    page: int = 500
    watchers: int = 1_000
    #: of the watchers, how many watch every namespace (the rest watch one
    #: namespace each, half of them with a label selector)
    cluster_watchers: int = 10
    watch_rate: float = 200.0
    watch_seconds: float = 30.0
    analytics_runs: int = 3
    #: minutes of the bench's mixed traffic (closed loop, ``clients``
    #: clients, over the reports created through the API) at the largest
    #: size, with figures per minute: whether the pace, the latency and the
    #: memory hold there (0: none)
    soak_minutes: float = 0.0
    #: this system's rows
    system: bool = True
    #: the same sizes as etcd CRDs, up to where they give out
    baseline: bool = True
    seed: int = 1
    data_dir: Path | None = None


@dataclass
class Row:
    """The figures of one size, by name (see ``COLUMNS``)."""

    size: int
    values: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: why the API could not hold this size (its figures are not measured)
    gave_out: str | None = None
    #: the sustained phase's figures per minute, at the largest size
    soak: list[Minute] = field(default_factory=list)


#: (name, header, format) of the table's columns, in order
COLUMNS = (
    ("create_rate", "creates/s", "{:.0f}"),
    ("get_p50_ms", "GET p50 ms", "{:.1f}"),
    ("get_p99_ms", "GET p99 ms", "{:.1f}"),
    ("list_s", "LIST all s", "{:.1f}"),
    ("list_rss_mb", "its peak RSS MB", "{:.0f}"),
    ("paged_s", "LIST paged s", "{:.1f}"),
    ("paged_rss_mb", "its peak RSS MB", "{:.0f}"),
    ("server_rss_mb", "server RSS MB", "{:.0f}"),
    ("store_rss_mb", "log/etcd RSS MB", "{:.0f}"),
    ("restart_s", "restart-to-ready s", "{:.1f}"),
    ("recovery_s", "committer recovery s", "{:.1f}"),
    ("disk_per_report", "disk B/report", "{:.0f}"),
    ("disk_ratio", "disk / raw JSON", "{:.2f}"),
    ("analytics_min_speedup", "analytics x PG (least)", "{:.1f}"),
    ("watch_p50_ms", "watch lag p50 ms", "{:.0f}"),
    ("watch_p99_ms", "watch lag p99 ms", "{:.0f}"),
)


def table(rows: list[Row]) -> str:
    """One line per size; "gave out" where the API could not hold it."""
    headers = ["reports", *(h for _, h, _ in COLUMNS)]
    lines = [[f"{r.size:,}", *(fmt.format(r.values[k]) if k in r.values else
                              "gave out" if r.gave_out else "-" for k, _, fmt in COLUMNS)]
             for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    out = [" | ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    out.append("-+-".join("-" * w for w in widths))
    out += [" | ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)


#: (what, check of the last row against the first) of the targets at a million
TARGETS: tuple[tuple[str, Callable[[Row, Row], bool | None]], ...] = (
    ("server RSS (up; kube-apiserver) <= 1.5 GiB at rest and during a paged LIST of all",
     lambda first, last: max(last.values["server_rss_mb"],
                             last.values["paged_rss_mb"]) <= 1536),
    ("create rate >= 0.8x the first size's",
     lambda first, last: last.values["create_rate"] >= 0.8 * first.values["create_rate"]),
    ("GET p99 <= 1.2x the first size's",
     lambda first, last: last.values["get_p99_ms"] <= 1.2 * first.values["get_p99_ms"]),
    ("paged LIST of everything <= 60 s", lambda first, last: last.values["paged_s"] <= 60),
    ("restart-to-ready <= 30 s", lambda first, last: last.values["restart_s"] <= 30),
    ("every analytics question >= 20x PostgreSQL JSONB",
     lambda first, last: last.values["analytics_min_speedup"] >= 20
     if "analytics_min_speedup" in last.values else None),
    (f"watch lag p99 < {WATCH_LAG_TARGET_MS} ms",
     lambda first, last: last.values["watch_p99_ms"] < WATCH_LAG_TARGET_MS),
    ("disk <= 0.3x the raw JSON", lambda first, last: last.values["disk_ratio"] <= 0.3),
)


def verdicts(rows: list[Row]) -> str:
    """Each target, met or not, at the largest size."""
    first, last = rows[0], rows[-1]
    if last.gave_out:
        return f"gave out at {last.size:,} reports: {last.gave_out}"
    out = [f"targets, at {last.size:,} reports:"]
    for what, check in TARGETS:
        try:
            met = check(first, last)
        except KeyError:
            met = None
        out.append(f"  {'-' if met is None else 'met' if met else 'MISSED':>6}  {what}")
    return "\n".join(out)


class _Reports:
    """The sizes' reports, made one at a time: Pods over ``namespaces``
    namespaces, each with a Kyverno-shaped PolicyReport (about 6 KB)."""

    def __init__(self, namespaces: int, seed: int):
        self._namespaces = namespaces
        self._rng = random.Random(seed)
        self.made = 0
        #: a uniform sample of every report made (for the GETs)
        self.sample: list[tuple[str, str]] = []

    def take(self, count: int) -> Iterator[Resource]:
        for _ in range(count):
            i = self.made
            uid = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            res = Resource(_namespace(i % self._namespaces), f"pod-{i:07d}", uid,
                           random_failing(self._rng))
            self.made += 1
            if len(self.sample) < 20_000:
                self.sample.append((res.namespace, res.uid))
            else:
                j = self._rng.randrange(self.made)
                if j < len(self.sample):
                    self.sample[j] = (res.namespace, res.uid)
            yield res


def _namespace(i: int) -> str:
    return f"scale-{i:03d}"


def _bootstrap(system: RunningSystem) -> str:
    """The embedded broker's address, as ``up`` said when it was ready."""
    for line in reversed(system.output):
        found = re.match(r"\s*kafka:\s+(\S+)", line)
        if found:
            return found.group(1)
    raise RuntimeError("reports-pipeline up did not say where its Kafka is")


async def fill(settings: Settings, bootstrap: str, pods: Iterator[Resource], *,
               now: int) -> int:
    """Create the pods' reports on the fast path: requests straight to the
    requests topic, decided by the committer as any other. Returns the bytes
    of JSON sent."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20,
        max_batch_size=clientconfig.MAX_BATCH_BYTES,
        max_request_size=clientconfig.MAX_REQUEST_BYTES,
        compression_type=clientconfig.COMPRESSION)
    await producer.start()
    sent = 0
    try:
        stamp = now_rfc3339()
        for res in pods:
            obj = policy_report(res, now)
            sent += len(orjson.dumps(obj))
            req = WriteRequest(id=str(uuid.uuid4()), op="create", resource=REPORT.id,
                               namespace=res.namespace, name=res.uid,
                               reply_to=settings.replies_topic, now=stamp, obj=obj)
            await producer.send(settings.requests_topic, req.encode(),
                                key=object_key(REPORT.id, res.namespace, res.uid).encode(),
                                partition=PARTITION)
        await producer.flush()
    finally:
        await producer.stop()
    return sent


async def _head(client: Client) -> int:
    listed = await client.get(f"{POLR_PATH}/policyreports?limit=1")
    return int(listed["metadata"]["resourceVersion"])


async def _until_head(client: Client, wanted: int, progress: Callable[[str], None]) -> None:
    """Wait until the change log reaches ``wanted`` (the committer has
    decided every request sent), saying how far it is once a minute. The
    frontend refuses consistent reads (503) while the materializer is far
    behind: those are waited out."""
    said, head, refused = time.monotonic(), 0, ""
    while head < wanted:
        try:
            head, refused = await _head(client), ""
        except APIError as err:
            if err.status != 503:
                raise
            refused = f" (reads refused: {err.reason})"
        if time.monotonic() - said > 60:
            progress(f"scale: the change log was at resourceVersion {head:,} of {wanted:,}"
                     + refused)
            said = time.monotonic()
        await asyncio.sleep(1)


async def _gets(client: Client, keys: list[tuple[str, str]], count: int, clients: int,
                rng: random.Random) -> list[float]:
    chosen = [keys[rng.randrange(len(keys))] for _ in range(count)]
    times: list[float] = []

    async def one_client() -> None:
        while chosen:
            ns, name = chosen.pop()
            started = time.perf_counter()
            await client.get(f"{polr_collection(ns)}/{name}")
            times.append(time.perf_counter() - started)
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return times


async def _list_all(client: Client, pid: int) -> tuple[float, int, int]:
    """One LIST of every PolicyReport, read as it streams: (seconds to its
    last byte, items, the server's peak RSS)."""
    marker = b'"kind":"PolicyReport"'
    with Memory(pid, interval=0.05) as memory:
        started = time.perf_counter()
        items, carry = 0, b""
        async with client.api.session.get(
                f"{POLR_PATH}/policyreports", headers=await client.api.target.headers(),
                server_hostname=client.api.target.tls_server_name) as response:
            if response.status != 200:
                raise api_error("GET", "policyreports", response.status, await response.read())
            async for chunk in response.content.iter_any():
                data = carry + chunk
                items += data.count(marker)
                carry = data[-(len(marker) - 1):]
                items -= carry.count(marker)
        seconds = time.perf_counter() - started
    return seconds, items, memory.peak


async def _list_paged(client: Client, pid: int, limit: int) -> tuple[float, int, int, int]:
    """Every PolicyReport in pages of ``limit``: (seconds of the requests,
    items, pages, the server's peak RSS)."""
    path = f"{POLR_PATH}/policyreports?limit={limit}"
    seconds, items, pages, token = 0.0, 0, 0, ""
    with Memory(pid, interval=0.05) as memory:
        while True:
            page = await client.list_timed(path + (f"&continue={token}" if token else ""))
            seconds += page.seconds
            items += page.items or 0
            pages += 1
            token = page.continue_token
            if not token:
                break
    return seconds, items, pages, memory.peak


async def _metric(client: Client, name: str) -> float | None:
    page = await client.text("/metrics")
    found = re.search(rf"^{re.escape(name)} (\S+)$", page, re.MULTILINE)
    return float(found.group(1)) if found else None


async def _restarted(stop: Callable[[], Awaitable[None]], start: Callable[[], Awaitable[None]],
                     kubeconfig: Path, probe: Resource, now: int) -> tuple[float, float]:
    """``stop``, then ``start`` until a consistent read is served and a write
    (of ``probe``) acknowledged: (seconds from the stop, from the start)."""
    stopping = time.perf_counter()
    await stop()
    starting = time.perf_counter()
    await start()
    await _until_written(kubeconfig, probe, now)
    done = time.perf_counter()
    return done - stopping, done - starting


async def _until_written(kubeconfig: Path, probe: Resource, now: int) -> None:
    """Until a consistent read is served and a write acknowledged."""
    async with Client(kubeconfig, connections=4) as client:
        while True:
            try:
                await _head(client)
                await client.create(polr_collection(probe.namespace),
                                    orjson.dumps(policy_report(probe, now)))
                return
            except APIError as err:
                if err.status != 503:
                    raise
                await asyncio.sleep(0.1)


class _Ours:
    """This system: one ``up`` on a data directory."""

    name = "this system"
    analytics = True

    def __init__(self, base: Path):
        self.system = RunningSystem(base / "system")
        self.kubeconfig = self.system.kubeconfig
        self._settings = Settings.from_env()

    async def start(self) -> None:
        await self.system.start(timeout=300)

    async def stop(self) -> None:
        await self.system.stop()

    def server_pid(self) -> int:
        return self.system.pid

    def rss(self) -> tuple[int, int]:
        """(``up``, its broker)."""
        broker = sum(p.memory_info().rss for p in psutil.Process(self.system.pid).children(
            recursive=True) if "java" in p.name())
        return self.system.rss(), broker

    def disk(self) -> tuple[int, str]:
        return self.system.disk()

    async def fill(self, client: Client, pods: Iterator[Resource], count: int, now: int,
                   progress: Callable[[str], None]) -> tuple[int, str | None]:
        """The fast path: requests straight to the requests topic. Returns the
        bytes of JSON written, and never gives out."""
        head = await _head(client)
        sent = await fill(self._settings, _bootstrap(self.system), pods, now=now)
        await _until_head(client, head + count, progress)
        await self.settled(client)
        return sent, None

    async def settled(self, client: Client) -> None:
        """ClickHouse has every change, and the aggregation agent (in a
        process of its own, on the same cores) has caught up with them: a
        measure does not pay for the backlog of what came before it."""
        await settle(client, timeout=3600)
        deadline = time.monotonic() + 3600
        while (lag := await _metric(client, 'reports_consumer_lag_records{agent="aggregate"}')
               ) is None or lag > AGENT_SETTLED:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the aggregation agent is still {lag} records behind")
            await asyncio.sleep(1)
        # and ClickHouse's merges of what came in (minutes of both cores after
        # a fill) are done, or have run long enough
        deadline = time.monotonic() + MERGES_SETTLE
        while time.monotonic() < deadline and (await client.query(
                "SELECT count() FROM system.merges WHERE database = currentDatabase()"))[0][0]:
            await asyncio.sleep(2)

    async def restart(self, probe: Resource, now: int) -> tuple[float, float, float | None]:
        """SIGTERM, then ``up`` again on the same directory until it serves a
        consistent read and acknowledges a write: (seconds from SIGTERM,
        seconds from the start, the committer's recovery seconds)."""
        restart, start = await _restarted(self.system.stop, lambda: self.system.start(
            timeout=900), self.kubeconfig, probe, now)
        async with Client(self.kubeconfig, connections=1) as client:
            recovery = await _metric(client, "reports_committer_recovery_seconds")
        return restart, start, recovery


#: the aggregation agent's lag (records, transaction markers included) taken
#: as caught up
AGENT_SETTLED = 50

#: the longest wait for ClickHouse's merges before a measure (seconds)
MERGES_SETTLE = 900

#: the etcd-CRD baseline gives out when kube-apiserver and etcd together
#: pass this much memory (half of a 24 GiB machine), or refuse writes
CRD_MEMORY_LIMIT = 12 * 1024**3


class _Crds:
    """The reports as CRDs: kube-apiserver and etcd (its 8 GiB quota)."""

    name = "etcd CRDs"
    analytics = False

    def __init__(self, base: Path, namespaces: int, progress: Callable[[str], None]):
        self.etcd = EtcdCrds(base / "etcd-crds", progress=progress)
        self.kubeconfig = self.etcd.kubeconfig
        self._namespaces = namespaces

    async def start(self) -> None:
        """kube-apiserver and etcd, and the workload's namespaces (a
        namespaced object is refused in a namespace that does not exist)."""
        await self.etcd.start()
        async with Client(self.kubeconfig, connections=4) as client:
            for i in range(self._namespaces):
                with contextlib.suppress(APIConflictError):  # made by an earlier start
                    await client.create("/api/v1/namespaces", {
                        "apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": _namespace(i)}})

    async def stop(self) -> None:
        await self.etcd.stop()

    def server_pid(self) -> int:
        return self.etcd.pids()[-1]

    def rss(self) -> tuple[int, int]:
        """(kube-apiserver, etcd)."""
        etcd, apiserver = (p.memory_info().rss for p in self.etcd.processes())
        return apiserver, etcd

    def disk(self) -> tuple[int, str]:
        return self.etcd.disk()

    async def fill(self, client: Client, pods: Iterator[Resource], count: int, now: int,
                   progress: Callable[[str], None]) -> tuple[int, str | None]:
        """Creates through kube-apiserver (it has no other way in), 64 clients,
        10,000 at a time; stops when it gives out: writes refused, or its
        memory past ``CRD_MEMORY_LIMIT``."""
        driver = Driver(client, Mix(), random.Random(0))
        driver.now = now
        written, done = 0, 0
        while done < count:
            chunk = [next(pods) for _ in range(min(10_000, count - done))]
            run = await closed_loop(driver, chunk, concurrency=64, seed=True)
            written += run.bytes_written
            done += len(chunk)
            failed = sum(run.errors.values())
            memory = sum(self.rss())
            progress(f"scale: {self.name}: {done:,} of {count:,} created"
                     f" ({len(chunk) / run.seconds:.0f}/s, kube-apiserver and etcd"
                     f" {memory / MB:,.0f} MB{f', errors {dict(run.errors)}' if failed else ''})")
            if failed > len(chunk) // 100:
                return written, f"creates refused: {dict(run.errors)}; " + self._why()
            if memory > CRD_MEMORY_LIMIT:
                return written, (f"kube-apiserver and etcd at {memory / 2**30:.1f} GiB of"
                                 " memory")
        return written, None

    def _why(self) -> str:
        found = re.findall(r"(database space exceeded|etcdserver: [^\"]+|timeout[^\"]*)",
                           self.etcd.logs())
        return found[-1] if found else "see kube-apiserver's log"

    async def settled(self, client: Client) -> None:
        return None

    async def restart(self, probe: Resource, now: int) -> tuple[float, float, float | None]:
        """SIGTERM to both, then both again on the same directory until a
        consistent read is served and a write acknowledged."""
        restart, start = await _restarted(self.etcd.stop, lambda: self.etcd.start(
            timeout=1800), self.kubeconfig, probe, now)
        return restart, start, None


Target = _Ours | _Crds


#: ``up``'s histogram of the time from a change's commit to its dispatch to
#: the watches that see it (kube-apiserver has none)
DISPATCH_METRIC = "reports_watch_dispatch_seconds"


def _watches(options: Options, namespaces: list[str]) -> list[tuple[str, str | None]]:
    """(path, the namespace it sees or None) of each watch: every namespace,
    one namespace, or one namespace with a label selector."""
    out: list[tuple[str, str | None]] = [
        (f"{POLR_PATH}/policyreports", None)] * min(options.cluster_watchers, options.watchers)
    for i in range(options.watchers - len(out)):
        ns = namespaces[i // 2 % len(namespaces)]
        selector = f"labelSelector={MANAGED}&" if i % 2 else ""
        out.append((f"{polr_collection(ns)}?{selector}", ns))
    return out


async def _size(target: Target, options: Options, size: int, reports: _Reports,
                raw: list[int], rng: random.Random, progress: Callable[[str], None]) -> Row:
    row = Row(size)
    now = int(time.time())
    creates = min(options.creates, size - reports.made)
    bulk = size - reports.made - creates
    async with Client(target.kubeconfig,
                      connections=options.watchers + max(options.clients, 64) + 8) as client:
        if bulk > 0:
            progress(f"scale: {target.name}: {bulk:,} creates to fill")
            started = time.perf_counter()
            sent, row.gave_out = await target.fill(client, reports.take(bulk), bulk, now,
                                                   progress)
            raw[0] += sent
            raw[1] += bulk
            row.notes.append(f"fill: {bulk / (time.perf_counter() - started):.0f} creates/s")
            if row.gave_out:
                return row
        progress(f"scale: {target.name}: {creates:,} creates through the API,"
                 f" {options.clients} clients")
        pool = list(reports.take(creates))
        driver = Driver(client, Mix(), rng)
        driver.now = now
        run = await closed_loop(driver, pool, concurrency=options.clients, seed=True)
        raw[0] += run.bytes_written
        raw[1] += run.versions_written
        if run.errors:
            row.notes.append(f"create errors {dict(run.errors)}")
        row.values["create_rate"] = len(run.writes()) / run.seconds
        await target.settled(client)

        progress(f"scale: {target.name}: {options.gets} GETs")
        gets = await _gets(client, reports.sample, options.gets, options.clients, rng)
        row.values["get_p50_ms"] = percentile(gets, 50) * 1000
        row.values["get_p99_ms"] = percentile(gets, 99) * 1000

        server, store = target.rss()
        row.values["server_rss_mb"], row.values["store_rss_mb"] = server / MB, store / MB

        progress(f"scale: {target.name}: LIST of all {size:,} reports, whole")
        seconds, items, peak = await _list_all(client, target.server_pid())
        row.values["list_s"], row.values["list_rss_mb"] = seconds, peak / MB
        row.notes.append(f"whole LIST: {items:,} items")
        progress(f"scale: {target.name}: LIST of all {size:,} reports, in pages of"
                 f" {options.page}")
        seconds, items, pages, peak = await _list_paged(client, target.server_pid(),
                                                        options.page)
        row.values["paged_s"], row.values["paged_rss_mb"] = seconds, peak / MB
        row.notes.append(f"paged LIST: {items:,} items in {pages:,} pages")

        progress(f"scale: {target.name}: {options.watchers} watchers, writes at"
                 f" {options.watch_rate:g}/s for {options.watch_seconds:g} s")
        watch_pool = pool[:max(1, int(options.watch_rate * 2))]
        metered = await client.text("/metrics")
        watched = await watch_lag(
            target.kubeconfig, Driver(client, Mix(admission=0, background=100, read=0), rng),
            watch_pool, watches=_watches(options, sorted({r.namespace for r in watch_pool})),
            rate=options.watch_rate, duration=options.watch_seconds)
        row.values["watch_p50_ms"] = percentile(watched.lags, 50) * 1000
        row.values["watch_p99_ms"] = percentile(watched.lags, 99) * 1000
        row.notes.append(f"watches: {len(watched.lags):,} events, {watched.missing} not"
                         f" delivered in time, {len(watched.writes)} writes (p99"
                         f" {percentile(watched.writes, 99) * 1000:.0f} ms);"
                         f" {watched.seconds_note()}")
        dispatch = [histogram_percentile(metered, await client.text("/metrics"),
                                         DISPATCH_METRIC, q) for q in (50, 99)]
        if dispatch[0] is not None and dispatch[1] is not None:
            # without the write's own time: Kubernetes' watch latency SLI
            row.values["watch_dispatch_p99_ms"] = dispatch[1] * 1000
            row.notes.append(f"watches: from each change's commit to its dispatch to the"
                             f" watches, p50 / p99 at most {dispatch[0] * 1000:.0f} /"
                             f" {dispatch[1] * 1000:.0f} ms")
        await target.settled(client)
        if options.soak_minutes > 0 and size == max(options.sizes):
            await _sustained(target, options, client, pool, row, rng, progress)

    total, what = target.disk()
    row.values["disk_per_report"] = total / size
    row.values["disk_ratio"] = total / size / (raw[0] / max(raw[1], 1))
    row.notes.append(f"disk: {what}")

    progress(f"scale: {target.name}: restart (SIGTERM, then again on the same directory)")
    probe = next(reports.take(1))
    restart, start, recovery = await target.restart(probe, now)
    row.values["restart_s"] = restart
    if recovery is not None:
        row.values["recovery_s"] = recovery
    row.notes.append(f"restart: {start:.1f} s of it from the start")
    settling = time.perf_counter()
    async with Client(target.kubeconfig, connections=2) as client:
        await target.settled(client)  # the analytics that follow run on a quiet machine
    row.notes.append(f"restart: settled {time.perf_counter() - settling:.0f} s after it")
    return row


async def _sustained(target: Target, options: Options, client: Client, pool: list[Resource],
                     row: Row, rng: random.Random, progress: Callable[[str], None]) -> None:
    """The bench's mixed traffic for ``options.soak_minutes``: writes/s and
    their latency, and the memory, per minute."""
    mix = Mix()
    progress(f"scale: {target.name}: sustained mixed traffic ({mix}), {options.clients}"
             f" clients, {options.soak_minutes:g} min")
    phase = await soak.sustain(Driver(client, mix, rng), pool, minutes=options.soak_minutes,
                               concurrency=options.clients, pid=target.server_pid(),
                               progress=progress)
    row.soak = phase.minutes()
    row.values["soak_first_wps"], row.values["soak_last_wps"] = phase.first_and_last()
    row.values["soak_min_wps"] = phase.slowest(row.soak).writes_per_s
    latencies = phase.run.write_latencies
    row.values["soak_p50_ms"] = percentile(latencies, 50) * 1000
    row.values["soak_p99_ms"] = percentile(latencies, 99) * 1000
    # the server alone (``up`` without the aggregation agent's process;
    # kube-apiserver): the most sampled, and its growth once warm
    own = [x.own for x in phase.samples if x.own]
    if own:
        row.values["soak_rss_max_mb"] = max(own) / MB
        _, warm, end = phase.memory_since(phase.warm())
        row.values["soak_rss_growth_mb"] = (end.own - warm.own) / MB
    errors = f", errors {dict(phase.run.errors)}" if phase.run.errors else ""
    row.notes.append(
        f"soak: {options.soak_minutes:g} min of mix {mix}, {options.clients} clients:"
        f" {row.values['soak_first_wps']:.0f} writes/s in the first minute,"
        f" {row.values['soak_last_wps']:.0f} in the last, {row.values['soak_min_wps']:.0f}"
        f" the least; write p50 / p99 {row.values['soak_p50_ms']:.0f} /"
        f" {row.values['soak_p99_ms']:.0f} ms"
        + (f"; server RSS at most {row.values['soak_rss_max_mb']:.0f} MB, grown"
           f" {row.values['soak_rss_growth_mb']:+.0f} MB once warm" if own else "") + errors)
    progress(f"scale: {target.name}, {row.size:,} reports, sustained, per minute:\n"
             + soak.table(row.soak))
    await target.settled(client)


async def _analytics(base: Path, row: Row, runs: int, progress: Callable[[str], None]
                     ) -> None:
    compared = await versuspostgres.compare(base, reports=row.size, runs=runs, progress=progress)
    for q in compared.questions:
        row.values[f"analytics {q.name}"] = q.speedup
        row.notes.append(f"analytics {q.name}: ClickHouse {q.clickhouse_seconds * 1000:.0f} ms,"
                         f" PostgreSQL {q.postgres_seconds * 1000:.0f} ms ({q.speedup:.1f}x)")
    row.values["analytics_min_speedup"] = min(q.speedup for q in compared.questions)


def _more_files() -> None:
    """A thousand watches need more open files than a login's usual 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def run(options: Options, *, progress: Callable[[str], None] = print
              ) -> dict[str, list[Row]]:
    """Every size's row, in order of size, of this system and (unless
    ``baseline`` is off) of etcd CRDs, which stop at the size they give out."""
    sizes = sorted(set(options.sizes))
    _more_files()
    base = options.data_dir or Path(tempfile.mkdtemp(prefix="reports-scale-"))
    keep = options.data_dir is not None
    targets: list[Target] = [_Ours(base)] if options.system else []
    if options.baseline:
        targets.append(_Crds(base, options.namespaces, progress))
    out: dict[str, list[Row]] = {}
    try:
        for target in targets:
            # the same reports, the same way, for each
            rng = random.Random(options.seed)
            reports = _Reports(options.namespaces, options.seed)
            raw = [0, 0]  # bytes of JSON written, reports written
            rows = out[target.name] = []
            await target.start()
            try:
                for size in sizes:
                    row = await _size(target, options, size, reports, raw, rng, progress)
                    if target.analytics and not row.gave_out:
                        # said before the analytics' long load
                        progress(f"scale so far, {target.name} (analytics to come):\n"
                                 + table([*rows, row]))
                        progress(f"scale: analytics questions at {size:,} reports")
                        where = base / f"analytics-{size}"
                        await _analytics(where, row, options.analytics_runs, progress)
                        shutil.rmtree(where, ignore_errors=True)
                    rows.append(row)
                    progress(f"scale so far, {target.name}:\n" + table(rows))
                    if row.gave_out:
                        progress(f"scale: {target.name} gave out at {size:,}: {row.gave_out}")
                        break
            finally:
                await target.stop()
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return out


def to_json(options: Options, rows: dict[str, list[Row]]) -> dict[str, Any]:
    return {"options": {k: str(v) if isinstance(v, Path) else v
                        for k, v in vars(options).items()},
            "apis": {name: [{"size": r.size, **r.values, "gave_out": r.gave_out,
                             "notes": r.notes, "soak_minutes": [asdict(m) for m in r.soak]}
                            for r in api_rows]
                     for name, api_rows in rows.items()}}
