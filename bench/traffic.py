"""Kyverno-shaped traffic through the frontend: a driver that performs one
step of the mix on one resource, and the loops that pace it (closed: as fast
as the system answers; open: at a fixed offered rate, latency measured from
each request's scheduled start so a slow system cannot hide its queueing)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import orjson

from bench.client import Client
from bench.workload import EPHR_PATH, POLR_PATH, Mix, flip, random_failing
from kubeclient import APIError
from reportsamples.reports import Resource, ephemeral_report, policy_report

WRITES = ("create", "merge", "delete", "update")
#: (resource, new resourceVersion, when the request was sent)
OnWrite = Callable[[Resource, str, float], None]


def polr_collection(ns: str) -> str:
    return f"{POLR_PATH}/namespaces/{ns}/policyreports"


def ephr_collection(ns: str) -> str:
    return f"{EPHR_PATH}/namespaces/{ns}/ephemeralreports"


@dataclass
class Run:
    """What one loop did: latencies (seconds) per operation kind."""

    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    bytes_written: int = 0
    versions_written: int = 0
    #: when each write completed (perf_counter), in order, and its latency
    completed: list[float] = field(default_factory=list)
    write_latencies: list[float] = field(default_factory=list)
    #: when each error happened (perf_counter), in order
    failed: list[float] = field(default_factory=list)
    #: when the loop started (perf_counter)
    started: float = 0.0

    def record(self, kind: str, seconds: float) -> None:
        self.latencies.setdefault(kind, []).append(seconds)
        if kind in WRITES:
            self.completed.append(time.perf_counter())
            self.write_latencies.append(seconds)

    def error(self, key: str) -> None:
        self.errors[key] += 1
        self.failed.append(time.perf_counter())

    def rate(self, first: int, last: int) -> float:
        """Writes/s between the ``first``-th and ``last``-th completed write."""
        done = sorted(self.completed)[first:last]
        return (len(done) - 1) / (done[-1] - done[0]) if len(done) > 1 else float("nan")

    def per_minute(self) -> list[float]:
        """Writes/s in each whole minute from the loop's start (a last minute
        shorter than half of one is left out)."""
        minute, done, out = 60.0, self.completed, []
        start, end = self.started, self.started + self.seconds
        while end - start >= minute / 2:
            span = min(minute, end - start)
            out.append((bisect.bisect_left(done, start + span) - bisect.bisect_left(done, start))
                       / span)
            start += span
        return out

    def writes(self) -> list[float]:
        return [x for k in WRITES for x in self.latencies.get(k, [])]

    def reads(self) -> list[float]:
        return [x for k in ("get", "list") for x in self.latencies.get(k, [])]


class Driver:
    def __init__(self, client: Client, mix: Mix, rng: random.Random, *,
                 on_write: OnWrite | None = None):
        self.client = client
        self.mix = mix
        self.rng = rng
        self.on_write = on_write
        self.now = int(time.time())

    async def create(self, res: Resource, run: Run) -> None:
        """Create the resource's PolicyReport (seeding)."""
        await self._write(res, run, "create", self._create_report)

    async def step(self, res: Resource, run: Run, *, kind: str | None = None,
                   scheduled: float | None = None) -> None:
        kind = kind or self.mix.choose(self.rng)
        if kind == "read":
            await self._read(res, run, scheduled)
        elif kind == "admission":
            op = ("create", "merge", "delete")[res.admission_step]
            await self._write(res, run, op, {"create": self._admit, "merge": self._merge,
                                             "delete": self._discard}[op], scheduled)
        else:
            await self._write(res, run, "update", self._scan, scheduled)

    async def _write(self, res: Resource, run: Run, kind: str,
                     op: Callable[[Resource, Run, float], object],
                     scheduled: float | None = None) -> None:
        sent = time.perf_counter()
        try:
            await op(res, run, sent)  # type: ignore[misc]
        except APIError as err:
            run.error(f"{kind} {err.status}")
            if err.status == 409:
                await self._refresh(res)
            elif err.status == 404 and kind == "delete":
                # gone already (an earlier delete whose answer was lost): as
                # the policy engine, take it as deleted
                res.ephemeral_name = None
                res.admission_step = 0
            return
        except (TimeoutError, OSError) as err:
            run.error(f"{kind} {type(err).__name__}")
            return
        run.record(kind, time.perf_counter() - (scheduled if scheduled is not None else sent))

    def _stored(self, res: Resource, run: Run, body: dict[str, object], sent: float,
                size: int) -> None:
        meta = body["metadata"]
        assert isinstance(meta, dict)
        res.report_version = str(meta["resourceVersion"])
        run.bytes_written += size
        run.versions_written += 1
        if self.on_write is not None:
            self.on_write(res, res.report_version, sent)

    async def _create_report(self, res: Resource, run: Run, sent: float) -> None:
        res.report_version = None
        body = orjson.dumps(policy_report(res, self.now))
        created = await self.client.create(polr_collection(res.namespace), body)
        self._stored(res, run, created, sent, len(body))

    async def _put_report(self, res: Resource, run: Run, sent: float) -> None:
        path = f"{polr_collection(res.namespace)}/{res.uid}"
        if res.report_version is None:
            # as a controller does, the object is read before it is replaced
            # when its version is not known (a conflict whose read failed):
            # an update without one is refused as invalid (422)
            await self._read_version(res)
        body = orjson.dumps(policy_report(res, self.now))
        self._stored(res, run, await self.client.replace(path, body), sent, len(body))

    async def _scan(self, res: Resource, run: Run, sent: float) -> None:
        res.failing = flip(res.failing, self.rng)
        await self._put_report(res, run, sent)

    async def _admit(self, res: Resource, run: Run, sent: float) -> None:
        res.failing = random_failing(self.rng)
        body = orjson.dumps(ephemeral_report(res, self.now))
        created = await self.client.create(ephr_collection(res.namespace), body)
        res.ephemeral_name = str(created["metadata"]["name"])
        res.admission_step = 1
        run.bytes_written += len(body)
        run.versions_written += 1

    async def _merge(self, res: Resource, run: Run, sent: float) -> None:
        await self._put_report(res, run, sent)
        res.admission_step = 2

    async def _discard(self, res: Resource, run: Run, sent: float) -> None:
        await self.client.delete(f"{ephr_collection(res.namespace)}/{res.ephemeral_name}")
        res.ephemeral_name = None
        res.admission_step = 0

    async def _read(self, res: Resource, run: Run, scheduled: float | None) -> None:
        started = time.perf_counter()
        listing = self.rng.random() < 0.2
        try:
            if listing:
                await self.client.get(polr_collection(res.namespace))
            else:
                await self.client.get(f"{polr_collection(res.namespace)}/{res.uid}")
        except APIError as err:
            run.error(f"read {err.status}")
            return
        end = time.perf_counter()
        run.record("list" if listing else "get",
                   end - (scheduled if scheduled is not None else started))

    async def _refresh(self, res: Resource) -> None:
        try:
            await self._read_version(res)
        except APIError:
            res.report_version = None

    async def _read_version(self, res: Resource) -> None:
        current = await self.client.get(f"{polr_collection(res.namespace)}/{res.uid}")
        res.report_version = str(current["metadata"]["resourceVersion"])


@contextlib.contextmanager
def collector_aside() -> Iterator[None]:
    """During a measured phase, the client's garbage collector walks only
    what the phase itself allocates. Its full collections walked everything
    the bench had built before (the workload's reports, the runs so far):
    80-175 ms each, two or three in a 30-s phase at 16 clients, and every
    request in flight (all on this one event loop) looked that much slower,
    whichever server answered it."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def closed_loop(driver: Driver, pool: list[Resource], *, concurrency: int,
                      duration: float | None = None, seed: bool = False,
                      run: Run | None = None) -> Run:
    """``concurrency`` clients, each taking an idle resource and performing the
    next step of the mix on it, until ``duration`` is over; with ``seed`` each
    resource's PolicyReport is created once instead. Steps are recorded in
    ``run`` if given (so that a caller keeps what was done if it cancels the
    loop), else in a new one."""
    run = run if run is not None else Run()
    idle: asyncio.Queue[Resource] = asyncio.Queue()
    for res in pool:
        idle.put_nowait(res)

    async def client() -> None:
        while time.perf_counter() < deadline:
            try:
                res = idle.get_nowait()
            except asyncio.QueueEmpty:
                return
            if seed:
                await driver.create(res, run)
            else:
                await driver.step(res, run)
                idle.put_nowait(res)

    with collector_aside():
        run.started = started = time.perf_counter()
        deadline = started + duration if duration is not None else float("inf")
        await asyncio.gather(*(client() for _ in range(concurrency)))
        run.seconds = time.perf_counter() - started
    return run


async def open_loop(driver: Driver, pool: list[Resource], *, rate: float, duration: float,
                    kind: str | None = None) -> Run:
    """Steps started at a fixed rate whatever the system's answers; a step
    waits for an idle resource if every one is busy."""
    run = Run()
    idle: asyncio.Queue[Resource] = asyncio.Queue()
    for res in pool:
        idle.put_nowait(res)
    tasks: set[asyncio.Task[None]] = set()

    async def one(scheduled: float) -> None:
        res = await idle.get()
        try:
            await driver.step(res, run, kind=kind, scheduled=scheduled)
        finally:
            idle.put_nowait(res)

    with collector_aside():
        run.started = started = time.perf_counter()
        for i in range(int(rate * duration)):
            scheduled = started + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(scheduled))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
        run.seconds = time.perf_counter() - started
    return run
