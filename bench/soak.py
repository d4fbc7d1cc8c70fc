"""The sustained ("soak") phase of ``reports-pipeline bench``: the bench's mixed
workload, closed-loop, for minutes. Per wall-clock minute from the phase's start
it keeps the writes, their latency, the errors, and the resident memory and
the CPU per write of the system and of its broker; per 15-second window the
throughput, to see stalls. The figures ask whether the system keeps its pace
and whether its memory stays flat once warm."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from bench.figures import Report, percentile
from bench.traffic import Driver, Run, closed_loop
from kubeclient import KubeClientError
from reportsamples.reports import Resource

MB = 1024 * 1024
MINUTE = 60.0
WINDOW = 15.0
#: how long past its end the phase waits for its last requests before cancelling them
GRACE = 60.0


@dataclass(frozen=True)
class Sample:
    at: float  #: seconds since the phase started
    system: int  #: RSS of ``up`` (bytes)
    broker: int  #: RSS of its child processes, summed (bytes)
    #: CPU seconds (user and system) so far of ``up`` with its other children
    #: (those that ended too), and of the broker; NaN where unknown
    system_cpu: float = float("nan")
    broker_cpu: float = float("nan")
    #: RSS of ``up`` alone, its children apart (bytes; 0 where unknown)
    own: int = 0


class Sampler:
    """The resident memory and the CPU time of a process and of its children,
    sampled from a thread every ``interval`` seconds, and once more at the
    start and at the end: the embedded broker (a JVM) apart, the system's
    other processes (the aggregation agent's) with the system's."""

    def __init__(self, pid: int, started: float, interval: float = 2.0):
        self._process = psutil.Process(pid)
        self._started = started
        self._interval = interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        try:
            system = own = self._process.memory_info().rss
            system_cpu = cpu_seconds(self._process)
            children = self._process.children(recursive=True)
        except psutil.Error:
            return
        broker, broker_cpu = 0, 0.0
        for child in children:
            with contextlib.suppress(psutil.Error):
                if child.name() == "java":
                    broker += child.memory_info().rss
                    broker_cpu += cpu_seconds(child)
                else:
                    system += child.memory_info().rss
                    system_cpu += cpu_seconds(child)
        self.samples.append(Sample(time.perf_counter() - self._started, system, broker,
                                   system_cpu, broker_cpu, own))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def cpu_seconds(process: psutil.Process) -> float:
    """``process``'s CPU seconds so far (user and system), with those of its
    children that have ended (a restarted agent's do not vanish)."""
    times = process.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


@dataclass(frozen=True)
class Minute:
    minute: int
    seconds: float
    writes: int
    writes_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    system_rss_mb: float
    broker_rss_mb: float
    #: the most change-log records ClickHouse was behind in the minute (the
    #: materializer's lag, from the frontend's /metrics); NaN if never read
    clickhouse_lag: float = float("nan")
    #: the most change-log records the aggregate agent's committed offset was
    #: behind in the minute (it commits every 2 s); NaN if never read
    aggregate_lag: float = float("nan")
    #: medians in the minute of ClickHouse's tracked memory and of the Python
    #: interpreter's allocated blocks (thousands): which part of the system's
    #: memory grows
    clickhouse_mb: float = float("nan")
    python_kblocks: float = float("nan")
    #: CPU milliseconds per write in the minute: ``up`` with the agent, and
    #: the broker (what grows when the pace falls)
    system_cpu_ms: float = float("nan")
    broker_cpu_ms: float = float("nan")
    #: requests the committer decided per transaction in the minute (the
    #: fewer, the more each write pays of a transaction's round trips)
    batch_requests: float = float("nan")
    #: the RSS of ``up`` alone in the minute (median), the agent's process apart
    own_rss_mb: float = float("nan")


@dataclass(frozen=True)
class Scrape:
    """What the frontend's /metrics page said, ``at`` seconds into the phase."""

    at: float
    lag: float  #: change-log records ClickHouse was behind (the materializer)
    aggregate_lag: float  #: change-log records the aggregate agent was behind
    clickhouse_mb: float  #: ClickHouse's tracked memory
    python_kblocks: float  #: the interpreter's allocated blocks, in thousands
    #: the committer's requests and transactions so far (its batch histogram's
    #: sum and count)
    batched: float = float("nan")
    transactions: float = float("nan")


@dataclass
class Soak:
    """What the phase did, with its times as seconds since its start."""

    seconds: float  #: the phase's nominal length
    run: Run
    started: float  #: perf_counter at the start
    samples: list[Sample]
    cut_short: bool = False  #: the last requests outlived the grace period
    scrapes: list[Scrape] = field(default_factory=list)
    _done: list[float] = field(default_factory=list, init=False, repr=False)
    _failed: list[float] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self._done = [t - self.started for t in self.run.completed]
        self._failed = [t - self.started for t in self.run.failed]

    def _index(self, at: float) -> int:
        return bisect.bisect_left(self._done, at)

    def writes(self, start: float, end: float) -> int:
        return self._index(end) - self._index(start)

    def rate(self, start: float, end: float) -> float:
        return self.writes(start, end) / (end - start) if end > start else float("nan")

    def spans(self, width: float) -> list[tuple[float, float]]:
        """``[start, end)`` of each ``width`` from the start; the last may be shorter."""
        n = max(1, math.ceil(self.seconds / width - 1e-9))
        return [(i * width, min((i + 1) * width, self.seconds)) for i in range(n)]

    def rss_between(self, start: float, end: float) -> Sample:
        """The median of the samples taken in ``[start, end]`` (the nearest
        sample before ``start`` if none): one sample alone swings by the pages
        an allocator has freed but not yet returned."""
        inside = [s for s in self.samples if start <= s.at <= end]
        if not inside:
            i = bisect.bisect_right([s.at for s in self.samples], start)
            return self.samples[max(i - 1, 0)]
        return Sample(end, int(statistics.median(s.system for s in inside)),
                      int(statistics.median(s.broker for s in inside)),
                      own=int(statistics.median(s.own for s in inside)))

    def cpu_per_write(self, start: float, end: float) -> tuple[float, float]:
        """CPU milliseconds per write of the system and of the broker from the
        last sample at or before ``start`` (the first after it when there is
        none: the first sample comes just after the phase starts) to the
        first at or after ``end`` (the last before it when there is none),
        over the writes between those two samples; NaN when no two samples
        span part of the minute or no write came between them."""
        nan = float("nan"), float("nan")
        times = [s.at for s in self.samples]
        before = max(bisect.bisect_right(times, start) - 1, 0)
        after = min(bisect.bisect_left(times, end), len(times) - 1)
        if after <= before or times[before] >= end or times[after] <= start:
            return nan
        first, last = self.samples[before], self.samples[after]
        writes = self.writes(first.at, last.at)
        if not writes:
            return nan
        return ((last.system_cpu - first.system_cpu) / writes * 1000,
                (last.broker_cpu - first.broker_cpu) / writes * 1000)

    def minutes(self) -> list[Minute]:
        rows = []
        spans = self.spans(MINUTE)
        for i, (start, end) in enumerate(spans):
            latencies = self.run.write_latencies[self._index(start):self._index(end)]
            rss = self.rss_between(start, end)
            scraped = [sc for sc in self.scrapes if start <= sc.at <= end]
            system_cpu, broker_cpu = self.cpu_per_write(start, end)
            batch = _batch(scraped)
            rows.append(Minute(
                i + 1, end - start, len(latencies), self.rate(start, end),
                percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000,
                bisect.bisect_left(self._failed, end) - bisect.bisect_left(self._failed, start),
                rss.system / MB, rss.broker / MB, _most([sc.lag for sc in scraped]),
                _most([sc.aggregate_lag for sc in scraped]),
                _median([sc.clickhouse_mb for sc in scraped]),
                _median([sc.python_kblocks for sc in scraped]), system_cpu, broker_cpu,
                batch, rss.own / MB if rss.own else float("nan")))
        return rows

    def windows(self) -> list[float]:
        """Writes/s in each 15-second window."""
        return [self.rate(start, end) for start, end in self.spans(WINDOW)]

    def first_and_last(self) -> tuple[float, float]:
        """Writes/s in the phase's first minute and in its last."""
        s = self.seconds
        return self.rate(0, min(MINUTE, s)), self.rate(max(0.0, s - MINUTE), s)

    @staticmethod
    def slowest(rows: list[Minute]) -> Minute:
        """The minute of the fewest writes/s, of those at least half a minute
        long (the last may be shorter)."""
        full = [r for r in rows if r.seconds >= MINUTE / 2] or rows
        return min(full, key=lambda r: r.writes_per_s)

    def memory_since(self, start: float) -> tuple[float, Sample, Sample]:
        """(the spans' width, the memory just after ``start``, the memory at
        the end): medians of a minute's samples each, or of what is left."""
        width = min(MINUTE, self.seconds - start)
        return (width, self.rss_between(start, start + width),
                self.rss_between(self.seconds - width, self.seconds))

    def warm(self) -> float:
        """When the system counts as warm: after the first minute, or half way
        through a shorter phase."""
        return min(MINUTE, self.seconds / 2)


async def sustain(driver: Driver, pool: list[Resource], *, minutes: float, concurrency: int,
                  pid: int, progress: Callable[[str], None] = print,
                  interval: float = 2.0) -> Soak:
    """``concurrency`` clients of the driver's mix for ``minutes``, watching the
    memory of the process ``pid`` and of its children."""
    seconds = minutes * MINUTE
    run = Run()
    started = time.perf_counter()
    cut_short = False
    scrapes: list[Scrape] = []
    with Sampler(pid, started, interval) as sampler:
        ticker = asyncio.create_task(_tick(run, sampler, started, seconds, progress))
        lagging = asyncio.create_task(_scrape(driver, started, scrapes, interval * 5))
        try:
            await asyncio.wait_for(closed_loop(driver, pool, concurrency=concurrency,
                                               duration=seconds, run=run), seconds + GRACE)
        except TimeoutError:
            cut_short = True
        finally:
            for task in (ticker, lagging):
                task.cancel()
            await asyncio.gather(ticker, lagging, return_exceptions=True)
    run.seconds = time.perf_counter() - started
    return Soak(seconds, run, started, sampler.samples, cut_short, scrapes)


def _batch(scraped: list[Scrape]) -> float:
    """Requests per transaction between the first and the last of ``scraped``
    (NaN when fewer than two were read, or no transaction came between)."""
    known = [sc for sc in scraped if not math.isnan(sc.batched + sc.transactions)]
    if len(known) < 2 or known[-1].transactions <= known[0].transactions:
        return float("nan")
    return ((known[-1].batched - known[0].batched)
            / (known[-1].transactions - known[0].transactions))


def _known(values: list[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _median(values: list[float]) -> float:
    known = _known(values)
    return statistics.median(known) if known else float("nan")


def _most(values: list[float]) -> float:
    known = _known(values)
    return max(known) if known else float("nan")


def gauge(page: str, name: str, labels: str = "") -> float:
    """A sample's value on a Prometheus text page (NaN if absent)."""
    pattern = re.escape(name) + (re.escape("{" + labels + "}") if labels else "")
    found = re.search(rf"^{pattern} (\S+)$", page, re.M)
    return float(found[1]) if found else float("nan")


async def _scrape(driver: Driver, started: float, scrapes: list[Scrape],
                  every: float) -> None:
    """How far ClickHouse is behind the change log and where the memory is,
    from the frontend's metrics."""
    while True:
        await asyncio.sleep(every)
        try:
            page = await driver.client.text("/metrics")
        except KubeClientError:
            continue
        scrapes.append(Scrape(
            time.perf_counter() - started,
            gauge(page, "reports_consumer_lag_records", 'agent="materializer"'),
            gauge(page, "reports_consumer_lag_records", 'agent="aggregate"'),
            gauge(page, "reports_clickhouse_memory_bytes") / MB,
            gauge(page, "reports_python_allocated_blocks") / 1000,
            gauge(page, "reports_committer_batch_requests_sum"),
            gauge(page, "reports_committer_batch_requests_count")))


async def _tick(run: Run, sampler: Sampler, started: float, seconds: float,
                progress: Callable[[str], None]) -> None:
    """A line of progress at the end of each full minute."""
    minute = 1
    while minute * MINUTE < seconds:
        await asyncio.sleep(started + minute * MINUTE - time.perf_counter())
        last = len(run.completed) - bisect.bisect_left(run.completed,
                                                       started + (minute - 1) * MINUTE)
        now = sampler.samples[-1] if sampler.samples else Sample(0, 0, 0)
        progress(f"soak minute {minute}: {last / MINUTE:.0f} writes/s, system "
                 f"{now.system / MB:.0f} MB, broker {now.broker / MB:.0f} MB")
        minute += 1


def figures(report: Report, soak: Soak, *, note: str, full_after: float = 5 * MINUTE) -> None:
    """The phase's figures; ``full_after``: seconds after which the worker's
    windowed tables hold all the windows they keep."""
    rows = soak.minutes()
    s = soak.seconds
    first, last = soak.first_and_last()
    errors = f"; errors {dict(soak.run.errors)}" if soak.run.errors else ""
    cut = f"; stopped {GRACE:g} s past its end with requests unanswered" if soak.cut_short else ""
    report.add("soak throughput, first minute", first, "writes/s", note=note + errors + cut)
    report.add("soak throughput, last minute", last, "writes/s")
    slowest = soak.slowest(rows)
    report.add("soak throughput, minimum minute", slowest.writes_per_s, "writes/s",
               (">=", 300), note=f"minute {slowest.minute} of {len(rows)}")
    if s >= 10 * MINUTE:
        span, what = 5 * MINUTE, "last 5 minutes over the first 5"
    elif s >= 2 * MINUTE:
        span, what = MINUTE, "last minute over the first"
    else:
        span, what = s / 2, f"last {s / 2:g} s over the first (a phase under 2 minutes)"
    report.add("soak throughput, last vs first", soak.rate(s - span, s) / soak.rate(0, span),
               "x", (">=", 0.9), note=what)
    windows = soak.windows()
    median = statistics.median(windows)
    stalls = sum(1 for w in windows if w < median / 2)
    report.add("soak stall windows", stalls, "windows",
               note=f"of {len(windows)} {WINDOW:g}-s windows, below half their median"
               f" ({median:.0f} writes/s); slowest {min(windows):.0f} writes/s")
    latencies = soak.run.write_latencies
    report.add("soak write latency p99", percentile(latencies, 99) * 1000, "ms", ("<", 250),
               note=f"p50 {percentile(latencies, 50) * 1000:.0f} ms over {len(latencies)}"
               " writes, closed loop")
    behind = _known([r.aggregate_lag for r in rows])
    if behind:
        report.add("soak aggregate agent lag, most", max(behind), "records",
                   note="change-log records (transaction markers included) past the"
                   " aggregate agent's committed offset, the most in any minute;"
                   f" last minute {behind[-1]:.0f}")
    _memory_figures(report, soak, soak.warm(), "")
    if soak.seconds >= 2 * full_after:
        # the windowed tables hold their most once WINDOWS_KEPT windows have passed
        _memory_figures(report, soak, full_after, ", tables full")
    report.series["soak_minutes"] = [asdict(r) for r in rows]
    report.series["soak_windows"] = [
        {"start_s": start, "seconds": end - start, "writes_per_s": rate}
        for (start, end), rate in zip(soak.spans(WINDOW), windows, strict=True)]


def _memory_figures(report: Report, soak: Soak, start: float, label: str) -> None:
    """RSS growth from the minute after ``start`` to the last minute (medians)."""
    width, warm, end = soak.memory_since(start)
    since = soak.writes(start, float("inf"))
    after = ("after the first minute" if start == MINUTE else f"after {start:g} s"
             ) + f", medians of {width:g}-s spans"
    for part in ("system", "broker"):
        before, now = getattr(warm, part) / MB, getattr(end, part) / MB
        what = "reports-pipeline up" if part == "system" else "its child processes (broker)"
        report.add(f"soak {part} RSS growth per 1,000 writes{label}",
                   (now - before) / since * 1000 if since else float("nan"), "MB",
                   note=f"{what} {after}: {before:.0f} -> {now:.0f} MB over {since} writes")
        report.add(f"soak {part} RSS growth{label}", now - before, "MB", ("<", 50), note=after)


def table(rows: list[Minute]) -> str:
    header = ("MINUTE", "WRITES/S", "P50 MS", "P99 MS", "ERRORS", "SYSTEM RSS MB",
              "UP RSS MB", "BROKER RSS MB", "CH LAG", "AGG LAG", "CH MEM MB", "PY BLOCKS K",
              "SYSTEM CPU MS/W", "BROKER CPU MS/W", "WRITES/TXN")
    lines: list[tuple[Any, ...]] = [header]
    for r in rows:
        minute = f"{r.minute}" if r.seconds >= MINUTE - 1e-6 else f"{r.minute} ({r.seconds:.0f} s)"
        lines.append((minute, f"{r.writes_per_s:.0f}", f"{r.p50_ms:.0f}", f"{r.p99_ms:.0f}",
                      str(r.errors), f"{r.system_rss_mb:.0f}",
                      "-" if math.isnan(r.own_rss_mb) else f"{r.own_rss_mb:.0f}",
                      f"{r.broker_rss_mb:.0f}",
                      *("-" if math.isnan(v) else f"{v:.0f}"
                        for v in (r.clickhouse_lag, r.aggregate_lag, r.clickhouse_mb,
                                  r.python_kblocks)),
                      *("-" if math.isnan(v) else f"{v:.2f}"
                        for v in (r.system_cpu_ms, r.broker_cpu_ms)),
                      "-" if math.isnan(r.batch_requests) else f"{r.batch_requests:.1f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(line, widths, strict=True)))
                     .rstrip() for line in lines)
