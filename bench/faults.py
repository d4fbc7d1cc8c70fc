"""Kafka's brokers failing under load: Kyverno-shaped writers and open watches
through ``up`` against a replicated Kafka cluster while one fault happens,
then what every client was told checked against what the change log and
ClickHouse hold.

A fault is one of :data:`FAULTS`. For each the phase measures the longest
write outage (the longest time no write was acknowledged), the write p99
around the fault and every error a client saw, and it checks:

- no acknowledged write is lost: each resourceVersion a client got back is in
  the change log, with the object and the content acknowledged, and in
  ClickHouse (each PolicyReport version's results; ClickHouse's live objects
  are the log's);
- resourceVersions strictly increase in the log, none is used twice, and no
  write request is applied twice (each change's request id is unique);
- every watch continues without a gap, or ends with 410 after which its
  client lists again and sees the state as of that list;
- the only errors are 429 and 503 carrying ``retryAfterSeconds``;
- writes resume by themselves.

The cluster is anything with :class:`Brokers`' methods (``launcher.broker.cluster``'s).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from bench.client import Client
from bench.figures import Report, percentile, sampled
from bench.soak import cpu_seconds
from bench.traffic import Driver, Run, closed_loop
from bench.upprocess import RunningSystem
from bench.workload import EPHR_PATH, POLR_PATH, Mix, resources
from kubeclient import APIError, KubeClientError
from launcher.broker.cluster import PRODUCTION
from pipeline.commit.service import COMMITTER_RETRY_BACKOFF_MS
from pipeline.kafka import changelog, clientconfig, retries, transactions
from pipeline.kafka.tail import Tail
from pipeline.model.messages import Change
from pipeline.observe import metrics
from pipeline.runtime.logs import quiet
from pipeline.settings import Settings

JSON = dict[str, Any]
#: what a kind of report is called in paths
PLURALS = {"PolicyReport": "policyreports", "EphemeralReport": "ephemeralreports"}


class Brokers(Protocol):
    """A Kafka cluster whose nodes a fault can reach."""

    @property
    def bootstrap(self) -> str: ...
    def node_ids(self) -> list[int]: ...
    def broker_ids(self) -> list[int]: ...
    def kill(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    async def restart(self, node_id: int) -> None: ...
    async def stop_node(self, node_id: int) -> None: ...
    def active_controller(self) -> int: ...
    def serving(self, node_id: int) -> bool: ...
    def pids(self) -> list[int]: ...


# -- what clients were told --------------------------------------------------
@dataclass(frozen=True)
class Ack:
    """A write a client got an object back for."""

    resource: str
    namespace: str
    name: str
    resource_version: int
    deleted: bool
    fails: int
    at: float


def fails_of(obj: JSON) -> int:
    results = obj.get("results") or (obj.get("spec") or {}).get("results") or []
    return sum(1 for r in results if r.get("result") == "fail")


class Recording(Client):
    """The benchmark's client, keeping every acknowledged write and every
    refusal (its status, and whether it said when to try again)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.acks: list[Ack] = []
        self.refusals: Counter[str] = Counter()
        #: objects a write was refused for with 503: it may still have been
        #: committed, and the next write of the object may meet that
        self._unknown: set[str] = set()
        #: every refusal: (when, method, path, what)
        self.refused: list[tuple[float, str, str, str]] = []

    async def request(self, method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json") -> JSON:
        try:
            out = await super().request(method, path, body, content_type=content_type)
        except APIError as err:
            self.refused.append((time.perf_counter(), method, path, refusal(err)))
            if err.status == 503 and method in ("PUT", "DELETE"):
                self._unknown.add(path)
            if err.status in (404, 409) and path in self._unknown:
                # the write a 503 left unknown had been committed: as a
                # client that tries again meets it (AlreadyExists, Conflict,
                # NotFound), not a refusal of its own
                self._unknown.discard(path)
                self.refusals[f"{err.status} after 503"] += 1
                raise
            self.refusals[refusal(err)] += 1
            # as client-go: the next request after the time asked, not at once
            await asyncio.sleep(retry_after(err))
            raise
        except KubeClientError:
            self.refusals["no answer"] += 1
            raise
        if method in ("POST", "PUT", "DELETE") and not path.startswith("/analytics"):
            self._unknown.discard(path)
            self._ack(method, path, out)
        return out

    def _ack(self, method: str, path: str, out: JSON) -> None:
        if out.get("kind") not in PLURALS:
            return  # a Status (a delete answered without the object)
        meta = out["metadata"]
        self.acks.append(Ack(PLURALS[out["kind"]], meta.get("namespace", ""), meta["name"],
                             int(meta["resourceVersion"]), method == "DELETE", fails_of(out),
                             time.perf_counter()))


def refusal(err: APIError) -> str:
    """``"503 Retry-After"``, ``"500"``, ...: a refusal as the checks see it."""
    details = (err.details or {}).get("details") or {}
    return f"{err.status} Retry-After" if "retryAfterSeconds" in details else str(err.status)


def retry_after(err: APIError) -> float:
    details = (err.details or {}).get("details") or {}
    return float(details.get("retryAfterSeconds") or 0)


ALLOWED = {"429 Retry-After", "503 Retry-After", "404 after 503", "409 after 503"}


# -- watches -----------------------------------------------------------------
@dataclass
class Segment:
    """One watch from ``start`` until it ended; ``listed`` is the state a
    list gave at ``start`` (None: the watch went on from where one ended)."""

    start: int
    listed: dict[tuple[str, str], int] | None
    events: list[tuple[str, str, str, int]] = field(default_factory=list)

    @property
    def last(self) -> int:
        return self.events[-1][3] if self.events else self.start


class Watcher:
    """A client-go-like informer: list, watch from the list's version, watch
    again from the last event when a watch ends, list again after 410."""

    def __init__(self, client: Client, resource: str, *, namespace: str | None = None,
                 labels: str = ""):
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.segments: list[Segment] = []
        self.gone = 0
        self.problems: list[str] = []
        self.interrupted: Counter[str] = Counter()

    @property
    def name(self) -> str:
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return f"{self.resource} in {where}" + (f" ({self.labels})" if self.labels else "")

    def _path(self) -> str:
        base = POLR_PATH if self.resource == "policyreports" else EPHR_PATH
        ns = f"/namespaces/{self.namespace}" if self.namespace else ""
        return f"{base}{ns}/{self.resource}"

    def matches(self, resource: str, namespace: str) -> bool:
        return resource == self.resource and self.namespace in (None, namespace)

    @property
    def seen(self) -> int:
        return self.segments[-1].last if self.segments else 0

    async def run(self) -> None:
        query = f"labelSelector={self.labels}&" if self.labels else ""
        while True:
            if self._list_again:
                try:
                    listed = await self.client.get(f"{self._path()}?{query}limit=100000")
                except KubeClientError:
                    self.interrupted["list refused"] += 1
                    await asyncio.sleep(0.5)
                    continue
                self.segments.append(Segment(int(listed["metadata"]["resourceVersion"]), {
                    (i["metadata"].get("namespace", ""), i["metadata"]["name"]):
                    int(i["metadata"]["resourceVersion"]) for i in listed["items"]}))
                self._list_again = False
            await self._watch(query)

    _list_again = True

    async def _watch(self, query: str) -> None:
        segment = self.segments[-1]
        path = (f"{self._path()}?{query}watch=1&resourceVersion={segment.last}"
                "&timeoutSeconds=60")
        try:
            async with self.client.api.stream(path) as events:
                async for event in events:
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        self._ended(obj.get("code"))
                        return
                    meta = obj["metadata"]
                    rv = int(meta["resourceVersion"])
                    if rv <= segment.last:
                        self.problems.append(f"{self.name}: event at {rv} after {segment.last}")
                    segment.events.append((event["type"], meta.get("namespace", ""),
                                           meta["name"], rv))
        except APIError as err:
            self._ended(err.status)
            await asyncio.sleep(0.5)
            return
        except KubeClientError:
            self._ended("no answer")
            await asyncio.sleep(0.5)
            return
        # the watch ended (its timeout, or the server closed it): go on from
        # its last event, as client-go's reflector does
        self._ended(None)

    def _ended(self, code: object) -> None:
        """A watch ended: after 410 the next starts from a new list, else from
        the last event."""
        if code == 410:
            self.gone += 1
            self._list_again = True
            return
        if code is not None:
            self.interrupted[str(code)] += 1
        self.segments.append(Segment(self.segments[-1].last, None))


# -- the phase ---------------------------------------------------------------
@dataclass
class Outcome:
    """One fault's figures and the checks that failed."""

    fault: str
    injected: float
    recovered: float
    run: Run
    acks: list[Ack]
    refusals: Counter[str]
    watchers: list[Watcher]
    problems: list[str] = field(default_factory=list)
    detail: str = ""
    #: Kafka requests ``up`` sent again during the phase, by error
    kafka_retries: dict[str, float] = field(default_factory=dict)
    #: through the phase, (when, whether every partition leader and
    #: coordinator a write needs was on a node that serves)
    roles: list[tuple[float, bool]] = field(default_factory=list)

    def write_times(self) -> list[float]:
        return sorted(a.at for a in self.acks)

    def outage_window(self) -> tuple[float, float]:
        """From the fault on, the longest time in which no write was
        acknowledged (its end infinite when none was)."""
        times = [t for t in self.write_times() if t >= self.injected]
        if not times:
            return self.injected, float("inf")
        return max(zip([self.injected, *times], times, strict=False), key=lambda w: w[1] - w[0])

    @property
    def outage(self) -> float:
        start, end = self.outage_window()
        return end - start

    @property
    def failover(self) -> float:
        """Of the longest outage, the time Kafka itself had a partition or a
        coordinator a write needs on a node that was down (its election not
        yet over): what no client of this cluster can do without."""
        start, end = self.outage_window()
        samples = [*self.roles, (end, True)]
        return sum(max(0.0, min(b, end) - max(a, start))
                   for (a, served), (b, _) in zip(samples, samples[1:], strict=False)
                   if not served)

    def p99_around(self, seconds: float = 30.0) -> float:
        """Write p99 (ms) of the writes completed within ``seconds`` of the fault."""
        lats = [lat for done, lat in zip(self.run.completed, self.run.write_latencies,
                                         strict=True)
                if abs(done - self.injected) <= seconds]
        return percentile(lats, 99) * 1000


Inject = Callable[[Brokers, "KafkaView"], Awaitable[str]]


#: the cluster's min.insync.replicas
MIN_IN_SYNC = int(PRODUCTION["min.insync.replicas"])


class KafkaView:
    """Who leads what, asked of the cluster."""

    def __init__(self, settings: Settings, bootstrap: str):
        self.settings = settings
        self.bootstrap = bootstrap

    async def leader(self, topic: str) -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            [described] = await admin.describe_topics([topic])
            return int(described["partitions"][0]["leader"])
        finally:
            await admin.close()

    async def transaction_coordinator(self) -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            return int(await admin.find_coordinator(
                self.settings.committer_transactional_id, 1))
        finally:
            await admin.close()

    async def roles(self, admin: AIOKafkaAdminClient) -> dict[str, int]:
        """The nodes a write goes through: the leaders of the requests and
        change-log partitions, the committer's transaction and group
        coordinators (the leaders of the partitions of ``__transaction_state``
        and ``__consumer_offsets`` its ids hash to; -1: none), and every
        replica in sync of those partitions (an acknowledged write waits for
        each until Kafka drops a dead one from the set). A partition with
        fewer replicas in sync than ``min.insync.replicas`` takes no write:
        it has the role ``"<topic> in sync"`` on no node (-1) then."""
        wanted = {self.settings.requests_topic: 0, self.settings.changes_topic: 0}
        internal = {clientconfig.TRANSACTIONS_TOPIC: self.settings.committer_transactional_id,
                    clientconfig.OFFSETS_TOPIC: self.settings.committer_group}
        topics = await admin.describe_topics([*wanted, *internal])
        roles: dict[str, int] = {}
        for t in topics:
            name, partitions = t["topic"], t["partitions"]
            if name in internal:
                wanted[name] = transactions.coordinator_partition(internal[name], len(partitions))
            for p in partitions:
                if name in wanted and p["partition"] == wanted[name]:
                    roles[name] = int(p["leader"])
                    roles.update({f"{name} in sync {n}": int(n) for n in p["isr"]})
                    if len(p["isr"]) < MIN_IN_SYNC:
                        roles[f"{name} in sync"] = -1
        return roles

    async def sample(self, brokers: Brokers, into: list[tuple[float, bool]],
                     every: float = 0.25) -> None:
        """Until cancelled, append to ``into`` whether every node of
        :meth:`roles` serves, every ``every`` seconds (when Kafka does not
        answer within 2 s, the roles are where it last said)."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=2000)
        await admin.start()
        try:
            # its connections to the node down fail, as they are meant to
            with quiet("aiokafka"):
                await self._sample(admin, brokers, into, every)
        finally:
            with contextlib.suppress(KafkaError, TimeoutError, OSError):
                async with asyncio.timeout(2):
                    await admin.close()

    async def _sample(self, admin: AIOKafkaAdminClient, brokers: Brokers,
                      into: list[tuple[float, bool]], every: float) -> None:
        # The roles are asked for in the background: an answer may wait 2 s
        # (its broker stopped), and meanwhile each sample judges the roles
        # last known by the nodes' state now.
        roles: dict[str, int] = {}

        async def refresh() -> None:
            nonlocal roles
            while True:
                with contextlib.suppress(KafkaError, TimeoutError, OSError):
                    async with asyncio.timeout(2):
                        roles = await self.roles(admin)
                await asyncio.sleep(every)
        refreshing = asyncio.create_task(refresh())
        try:
            while True:
                if roles:
                    into.append((time.perf_counter(),
                                 all(n >= 0 and brokers.serving(n) for n in roles.values())))
                await asyncio.sleep(every)
        finally:
            refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refreshing


async def _kill_then_restart(brokers: Brokers, node: int, what: str, after: float) -> str:
    brokers.kill(node)
    await asyncio.sleep(after)
    await brokers.restart(node)
    return f"SIGKILL node {node} ({what}); started again {after:g} s later"


async def requests_leader(brokers: Brokers, view: KafkaView) -> str:
    node = await view.leader(view.settings.requests_topic)
    return await _kill_then_restart(brokers, node, "the requests partition's leader", 10)


async def changes_leader(brokers: Brokers, view: KafkaView) -> str:
    node = await view.leader(view.settings.changes_topic)
    return await _kill_then_restart(brokers, node, "the change log's leader", 10)


async def transaction_coordinator(brokers: Brokers, view: KafkaView) -> str:
    node = await view.transaction_coordinator()
    return await _kill_then_restart(brokers, node, "the committer's transaction coordinator",
                                    10)


async def controller(brokers: Brokers, view: KafkaView) -> str:
    node = brokers.active_controller()
    return await _kill_then_restart(brokers, node, "the active controller", 10)


async def pause(brokers: Brokers, view: KafkaView) -> str:
    node = await view.leader(view.settings.changes_topic)
    brokers.pause(node)
    await asyncio.sleep(30)
    brokers.resume(node)
    return f"SIGSTOP node {node} (the change log's leader) for 30 s, then SIGCONT"


async def rolling(brokers: Brokers, view: KafkaView) -> str:
    for node in brokers.node_ids():
        await brokers.stop_node(node)
        await brokers.restart(node)
    return "every node stopped (SIGTERM) and started again, one after another"


async def two_lost(brokers: Brokers, view: KafkaView) -> str:
    leader = await view.leader(view.settings.changes_topic)
    other = next(n for n in brokers.broker_ids() if n != leader)
    brokers.kill(leader)
    brokers.kill(other)
    await asyncio.sleep(20)
    await brokers.restart(other)
    await asyncio.sleep(10)
    await brokers.restart(leader)
    return (f"SIGKILL nodes {leader} (the change log's leader) and {other} at once; {other}"
            f" started again 20 s later, {leader} 10 s after that")


FAULTS: dict[str, Inject] = {
    "requests-leader": requests_leader,
    "changes-leader": changes_leader,
    "transaction-coordinator": transaction_coordinator,
    "controller": controller,
    "pause": pause,
    "rolling": rolling,
    "two-lost": two_lost,
}


async def phase(fault: str, brokers: Brokers, kubeconfig: Any, settings: Settings, *,
                clients: int = 16, before: float = 10.0, after: float = 15.0,
                pool_size: int = 200, seed: int = 1,
                progress: Callable[[str], None] = print) -> Outcome:
    """Writers and watches through the frontend at ``kubeconfig`` for
    ``before`` seconds, the fault, then ``after`` seconds more once it is
    over; then every check."""
    rng = random.Random(seed)
    prefix = f"fault-{fault}"
    pool = resources(pool_size, 4, prefix=prefix, rng=rng)
    view = KafkaView(settings, brokers.bootstrap)
    async with Recording(kubeconfig, connections=clients + 8) as client, \
            Client(kubeconfig, connections=8) as watch_client:
        driver = Driver(client, Mix(), rng)
        await closed_loop(driver, pool, concurrency=clients, seed=True)
        client.acks.clear()
        client.refusals.clear()
        watchers = [Watcher(watch_client, "policyreports"),
                    Watcher(watch_client, "policyreports", namespace=pool[0].namespace),
                    Watcher(watch_client, "policyreports",
                            labels="app.kubernetes.io/managed-by=kyverno"),
                    Watcher(watch_client, "ephemeralreports")]
        watching = [asyncio.create_task(w.run()) for w in watchers]
        roles: list[tuple[float, bool]] = []
        sampling = asyncio.create_task(view.sample(brokers, roles))
        retried = await kafka_retries(client)
        run = Run()
        load = asyncio.create_task(closed_loop(driver, pool, concurrency=clients,
                                               duration=24 * 3600, run=run))
        try:
            await asyncio.sleep(before)
            progress(f"fault {fault}: injecting")
            injected = time.perf_counter()
            detail = await FAULTS[fault](brokers, view)
            recovered = time.perf_counter()
            progress(f"fault {fault}: {detail}; {recovered - injected:.0f} s")
            resumed = await _resumed(client, recovered, timeout=120)
            if resumed:
                await asyncio.sleep(after)
        finally:
            for task in (load, sampling):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        run.seconds = time.perf_counter() - run.started
        outcome = Outcome(fault, injected, recovered, run, list(client.acks),
                          Counter(client.refusals), watchers, detail=detail, roles=roles)
        if not resumed:
            outcome.problems.append("writes did not resume in 120 s after the fault")
        after_phase = await kafka_retries(client)
        outcome.kafka_retries = {k: n - retried.get(k, 0) for k, n in after_phase.items()
                                 if n - retried.get(k, 0)}
        try:
            head = await _quiet(client)
            log = await read_log(settings, brokers.bootstrap)
            await _caught_up(watchers, log, head, timeout=30)
        finally:
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)
        outcome.problems += await verify(outcome, client, log, head)
    return outcome


_RETRIES = re.compile(r'^reports_kafka_retries_total\{error="(\w+)"\} (\S+)$', re.M)


async def kafka_retries(client: Client) -> dict[str, float]:
    """``up``'s count of Kafka retries so far, by error (its /metrics)."""
    return {error: float(n) for error, n in _RETRIES.findall(await client.text("/metrics"))}


async def _resumed(client: Recording, since: float, timeout: float) -> bool:
    """Whether a write is acknowledged after ``since`` within ``timeout``:
    writes resume by themselves."""
    deadline = time.perf_counter() + timeout
    while not any(a.at > since for a in client.acks[-50:]):
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _quiet(client: Client, still: float = 2.0, timeout: float = 30.0) -> int:
    """The resourceVersion once no write has been committed for ``still``
    seconds: writes the stopped clients had sent may still be committed."""
    head, since = await _head(client), time.perf_counter()
    deadline = since + timeout
    while time.perf_counter() - since < still and time.perf_counter() < deadline:
        await asyncio.sleep(0.25)
        now = await _head(client)
        if now != head:
            head, since = now, time.perf_counter()
    return head


async def _head(client: Client) -> int:
    for _ in range(120):
        with contextlib.suppress(KubeClientError):
            listed = await client.get(f"{POLR_PATH}/policyreports?limit=1")
            return int(listed["metadata"]["resourceVersion"])
        await asyncio.sleep(0.5)
    raise AssertionError("no consistent list in 60 s after the fault")


async def _caught_up(watchers: list[Watcher], log: list[tuple[int, Change]], head: int,
                     timeout: float) -> None:
    """Until every watch has had its last change up to ``head`` (at most
    ``timeout``: one that never does fails the checks)."""
    targets = [max((c.resource_version for _, c in log if c.resource_version <= head
                    and w.matches(*identity(c)[:2])), default=0) for w in watchers]
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if all(w.seen >= t for w, t in zip(watchers, targets, strict=True)):
            return
        await asyncio.sleep(0.1)


# -- the checks --------------------------------------------------------------
async def read_log(settings: Settings, bootstrap: str) -> list[tuple[int, Change]]:
    """Every committed change, with its offset, in log order."""
    out: list[tuple[int, Change]] = []
    async with Tail(clientconfig.consumer(bootstrap),
                    TopicPartition(settings.changes_topic, 0)) as tail:
        async for records in tail.everything():
            for record in records:
                change = changelog.change_from_record(record)
                if change is not None:
                    out.append((record.offset, change))
    return out


def identity(change: Change) -> tuple[str, str, str]:
    meta = change.obj.get("metadata") or {}
    return (PLURALS.get(change.obj.get("kind", ""), ""), meta.get("namespace", ""),
            meta.get("name", ""))


def check_log(log: list[tuple[int, Change]]) -> list[str]:
    """resourceVersions strictly increase, none twice; no request twice. Pure."""
    problems = []
    last = 0
    requests: Counter[str] = Counter()
    for offset, change in log:
        if change.resource_version <= last:
            problems.append(f"change log offset {offset}: resourceVersion"
                            f" {change.resource_version} after {last}")
        last = max(last, change.resource_version)
        if change.request_id:
            requests[change.request_id] += 1
    twice = [r for r, n in requests.items() if n > 1]
    if twice:
        problems.append(f"{len(twice)} write requests applied more than once, e.g. {twice[:3]}")
    return problems


def check_acks(acks: list[Ack], log: list[tuple[int, Change]]) -> list[str]:
    """Every acknowledged version is in the log, as acknowledged. Pure."""
    by_rv = {c.resource_version: c for _, c in log}
    problems = []
    for ack in acks:
        change = by_rv.get(ack.resource_version)
        if change is None:
            problems.append(f"acknowledged {ack.resource}/{ack.namespace}/{ack.name} at"
                            f" {ack.resource_version} is not in the change log")
        elif identity(change) != (ack.resource, ack.namespace, ack.name) \
                or (change.type == "DELETED") != ack.deleted \
                or (not ack.deleted and fails_of(change.obj) != ack.fails):
            problems.append(f"the change log's {ack.resource_version} is {change.type}"
                            f" {identity(change)}, not what was acknowledged: {ack}")
    return problems


def check_watch(watcher: Watcher, log: list[tuple[int, Change]], head: int) -> list[str]:
    """Each of the watch's runs saw every change of its objects between its
    start and where it ended, and nothing that is not in the log; its last
    list with the events after it is the log's state at ``head``, as an
    informer's cache would be. Pure."""
    problems = list(watcher.problems)
    mine = [(c.resource_version, identity(c), c.type) for _, c in log
            if c.resource_version <= head and watcher.matches(*identity(c)[:2])]
    versions = {rv for rv, _, _ in mine}
    segments = watcher.segments
    cache: dict[tuple[str, str], int] = {}
    for i, seg in enumerate(segments):
        end = segments[i + 1].start if i + 1 < len(segments) else head
        got = {e[3] for e in seg.events}
        unknown = {rv for rv in got - versions if rv <= head}
        if unknown:
            problems.append(f"{watcher.name}: events not in the change log:"
                            f" {sorted(unknown)[:5]}")
        # a run cut short by 410 need not reach ``end``: the next list covers it
        gone = i + 1 < len(segments) and segments[i + 1].listed is not None
        missing = {rv for rv in versions - got
                   if seg.start < rv <= (seg.last if gone else max(end, seg.last))}
        if missing:
            problems.append(f"{watcher.name}: {len(missing)} changes missed after"
                            f" {seg.start}, e.g. {sorted(missing)[:5]}")
        if seg.listed is not None:
            cache = dict(seg.listed)
        for etype, ns, name, rv in seg.events:
            if rv > head:
                break
            if etype == "DELETED":
                cache.pop((ns, name), None)
            else:
                cache[(ns, name)] = rv
    state: dict[tuple[str, str], int] = {}
    for rv, (_, ns, name), etype in mine:
        if etype == "DELETED":
            state.pop((ns, name), None)
        else:
            state[(ns, name)] = rv
    if cache != state:
        differ = set(cache.items()) ^ set(state.items())
        problems.append(f"{watcher.name}: what the list and the events left differs from the"
                        f" change log in {len(differ)} objects, e.g. {sorted(differ)[:3]}")
    return problems


async def check_clickhouse(client: Client, acks: list[Ack], log: list[tuple[int, Change]],
                           head: int, timeout: float = 120) -> list[str]:
    """ClickHouse holds each acknowledged PolicyReport version's results, and
    its live objects are the change log's."""
    deadline = time.perf_counter() + timeout
    while int((await client.query("SELECT max(resource_version) FROM reports"))[0][0]) < head:
        if time.perf_counter() > deadline:
            return [f"ClickHouse did not reach resourceVersion {head} in {timeout:g} s"]
        await asyncio.sleep(0.5)
    problems = []
    wanted = {a.resource_version: a.fails for a in acks
              if a.resource == "policyreports" and not a.deleted}
    rows = await client.query(
        "SELECT resource_version, uniqExactIf(idx, result = 'fail') FROM results"
        " WHERE resource_version IN {rvs:Array(UInt64)} GROUP BY resource_version",
        {"rvs": sorted(wanted)})
    held = {int(r[0]): int(r[1]) for r in rows}
    lost = [rv for rv in wanted if rv not in held]
    if lost:
        problems.append(f"{len(lost)} acknowledged PolicyReport versions have no results in"
                        f" ClickHouse, e.g. {sorted(lost)[:5]}")
    wrong = [rv for rv, fails in wanted.items() if rv in held and held[rv] != fails]
    if wrong:
        problems.append(f"{len(wrong)} PolicyReport versions in ClickHouse differ from what"
                        f" was acknowledged, e.g. {sorted(wrong)[:5]}")
    live: dict[tuple[str, str, str], int] = {}
    for _, change in log:
        if change.type == "DELETED":
            live.pop(identity(change), None)
        else:
            live[identity(change)] = change.resource_version
    rows = await client.query("SELECT namespace, name, resource_version FROM reports FINAL")
    stored = {(str(r[0]), str(r[1])): int(r[2]) for r in rows}
    expected = {(ns, name): rv for (_, ns, name), rv in live.items()}
    if stored != expected:
        differ = set(stored.items()) ^ set(expected.items())
        problems.append(f"ClickHouse's live objects differ from the change log's in"
                        f" {len(differ)}, e.g. {sorted(differ)[:3]}")
    return problems


async def verify(outcome: Outcome, client: Client, log: list[tuple[int, Change]],
                 head: int) -> list[str]:
    problems = check_log(log) + check_acks(outcome.acks, log)
    for watcher in outcome.watchers:
        problems += check_watch(watcher, log, head)
    problems += await check_clickhouse(client, outcome.acks, log, head)
    refused = {k: n for k, n in outcome.refusals.items() if k not in ALLOWED}
    if refused:
        problems.append(f"clients were refused other than with 429 or 503 and Retry-After:"
                        f" {refused}")
    return problems


# -- the benchmark's fault phases ----------------------------------------------
#: faults that lose one broker: writes must resume within this (seconds)
OUTAGE_TARGET = 10.0
#: ... of which, once Kafka's election is over (seconds)
SHARE_TARGET = 2.0


async def run(brokers: Brokers, data_dir: Path, names: list[str], *, clients: int = 16,
              before: float = 30.0, after: float = 30.0,
              progress: Callable[[str], None] = print) -> Report:
    """``up`` on ``data_dir`` with KAFKA_BOOTSTRAP at ``brokers``; each fault of
    ``names`` in turn under ``clients`` writers; a figure per measure. First,
    the cost of replication: ``clients`` writers for ``before + after``
    seconds against ``up`` on its embedded broker, then on ``brokers``."""
    report = Report()
    for backoff in (100, COMMITTER_RETRY_BACKOFF_MS):
        progress(f"transaction verification: back-to-back transactions, retry backoff"
                 f" {backoff} ms")
        verification_figures(report, await verification(brokers.bootstrap,
                                                         retry_backoff_ms=backoff))
    seconds = before + after
    progress(f"replication's cost: {clients} writers for {seconds:g} s on the embedded broker")
    embedded = RunningSystem(data_dir.with_name(data_dir.name + "-embedded"))
    await embedded.start()
    try:
        alone = await throughput(embedded.kubeconfig, clients=clients, seconds=seconds,
                                 cpu=cpu_of(embedded.pid))
    finally:
        await embedded.stop()
    env = {"KAFKA_BOOTSTRAP": brokers.bootstrap}
    settings = Settings.from_env(env)
    system = RunningSystem(data_dir, env=env)
    await system.start()
    try:
        progress(f"replication's cost: {clients} writers for {seconds:g} s on the"
                 f" {len(brokers.broker_ids())}-broker cluster")
        replication_figures(report, alone, await throughput(
            system.kubeconfig, clients=clients, seconds=seconds,
            cpu=cpu_of(system.pid, brokers.pids())), len(brokers.broker_ids()))
        for name in names:
            progress(f"fault {name}: {clients} clients, {before:g} s before, {after:g} s"
                     " after it is over")
            said = len(system.output)
            outcome = await phase(name, brokers, system.kubeconfig, settings, clients=clients,
                                  before=before, after=after, progress=progress)
            figures(report, outcome)
            for problem in outcome.problems:
                progress(f"fault {name}: {problem}")
            if outcome.problems or outcome.outage - outcome.failover > SHARE_TARGET:
                # what the system said meanwhile (its own loggers)
                for line in system.output[said:]:
                    if " pipeline." in line or " apiserver." in line or " launcher." in line:
                        progress(f"fault {name}: up said: {line.rstrip()}")
    finally:
        await system.stop()
    return report


def figures(report: Report, o: Outcome) -> None:
    """One fault's figures. Pure."""
    one_broker = o.fault not in ("two-lost", "rolling")
    errors = ", ".join(f"{n} x {k}" for k, n in sorted(o.refusals.items())) or "none"
    report.add(f"fault {o.fault}: longest write outage", o.outage, "s",
               ("<=", OUTAGE_TARGET) if one_broker else None, note=o.detail)
    report.add(f"fault {o.fault}: Kafka's own failover in it", o.failover, "s",
               note="a partition leader or coordinator a write needs on a node that was down"
                    " or not yet registered again"
                    " (Kafka moves them once its controller fences the node,"
                    " broker.session.timeout.ms after its last heartbeat)")
    report.add(f"fault {o.fault}: the system's share of it", o.outage - o.failover, "s",
               ("<=", SHARE_TARGET) if one_broker else None,
               note="the outage once Kafka had every leader and coordinator on a node that"
                    " serves")
    report.add(f"fault {o.fault}: write p99 around it", o.p99_around(), "ms",
               note=f"writes completed within 30 s of the fault; {len(o.acks)} acknowledged")
    report.add(f"fault {o.fault}: client-visible errors", sum(o.refusals.values()), "",
               note=errors)
    report.add(f"fault {o.fault}: failed checks", len(o.problems), "", ("<=", 0),
               note="; ".join(o.problems)[:300])
    retried = ", ".join(f"{k} {n:.0f}" for k, n in sorted(o.kafka_retries.items()))
    report.add(f"fault {o.fault}: Kafka retries in up", sum(o.kafka_retries.values()), "",
               note=retried or "none")


# -- the cost of replication --------------------------------------------------
#: writes/s on the cluster against the embedded broker, at least
REPLICATED_RATIO_TARGET = 0.8


@dataclass(frozen=True)
class Throughput:
    writes: int
    seconds: float
    p99: float  # ms
    #: the committer's mean requests per transaction, and its mean publish
    #: (the transaction: changes, replies, offsets, commit) in ms
    batch: float = float("nan")
    publish_ms: float = float("nan")
    #: CPU seconds of ``up``'s processes (but a broker) and of the brokers
    cpu_up: float = float("nan")
    cpu_brokers: float = float("nan")

    @property
    def per_second(self) -> float:
        return self.writes / self.seconds if self.seconds else float("nan")


#: the committer's batches and transactions, from ``up``'s /metrics
COMMITTER_SAMPLES = ("reports_committer_batch_requests_sum",
                     "reports_committer_batch_requests_count")
PUBLISH = 'step="publish"'
CpuSample = Callable[[], tuple[float, float]]


def cpu_of(up: int, brokers: list[int] | None = None) -> CpuSample:
    """CPU seconds so far of the ``up`` process ``up`` and its children but a
    broker, and of the brokers (its embedded one, or ``brokers``)."""
    def sample() -> tuple[float, float]:
        root = psutil.Process(up)
        tree = [root, *root.children(recursive=True)]
        java = [p for p in tree if p.name() == "java"]
        rest = [p for p in tree if p.name() != "java"]
        nodes = java + [psutil.Process(pid) for pid in brokers or ()]
        return sum(map(cpu_seconds, rest)), sum(map(cpu_seconds, nodes))
    return sample


async def throughput(kubeconfig: Path, *, clients: int = 16, seconds: float = 30.0,
                     pool_size: int = 400, seed: int = 2, cpu: CpuSample | None = None
                     ) -> Throughput:
    """The benchmark's Kyverno-shaped writers, ``clients`` of them, for
    ``seconds`` after each of ``pool_size`` reports was created once; with
    the committer's batches and transactions meanwhile, and the CPU
    ``cpu`` samples."""
    rng = random.Random(seed)
    pool = resources(pool_size, 8, prefix="replication", rng=rng)
    nothing = (float("nan"), float("nan"))
    async with Client(kubeconfig, connections=clients + 8) as client:
        driver = Driver(client, Mix(), rng)
        await closed_loop(driver, pool, concurrency=clients, seed=True)
        before, cpu_before = _committer(await client.text("/metrics")), cpu() if cpu else nothing
        run = await closed_loop(driver, pool, concurrency=clients, duration=seconds)
        after, cpu_after = _committer(await client.text("/metrics")), cpu() if cpu else nothing
    if run.errors:
        raise RuntimeError(f"writes failed without a fault: {dict(run.errors)}")
    requests, batches, publish, published = (a - b for a, b in zip(after, before, strict=True))
    return Throughput(len(run.write_latencies), run.seconds,
                      percentile(run.write_latencies, 99) * 1000,
                      requests / batches if batches else float("nan"),
                      publish / published * 1000 if published else float("nan"),
                      cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1])


def _committer(page: str) -> tuple[float, float, float, float]:
    """Requests decided, batches, publish seconds and publishes so far."""
    return (sampled(page, COMMITTER_SAMPLES[0]), sampled(page, COMMITTER_SAMPLES[1]),
            sampled(page, "reports_committer_transaction_seconds_sum", PUBLISH),
            sampled(page, "reports_committer_transaction_seconds_count", PUBLISH))


def replication_figures(report: Report, alone: Throughput, replicated: Throughput,
                        nodes: int) -> None:
    """Pure."""
    report.add("replication: writes/s, embedded broker", alone.per_second, "/s",
               note=f"{alone.writes} writes in {alone.seconds:.0f} s")
    report.add(f"replication: writes/s, {nodes} brokers", replicated.per_second, "/s",
               note=f"{replicated.writes} writes in {replicated.seconds:.0f} s; three replicas,"
                    " two in sync, transaction verification on")
    report.add(f"replication: writes/s, {nodes} brokers / embedded",
               replicated.per_second / alone.per_second, "x",
               (">=", REPLICATED_RATIO_TARGET))
    report.add("replication: write p99, embedded broker", alone.p99, "ms")
    report.add(f"replication: write p99, {nodes} brokers", replicated.p99, "ms")
    for where, run in (("embedded broker", alone), (f"{nodes} brokers", replicated)):
        report.add(f"replication: committer's requests per transaction, {where}", run.batch,
                   "", note="mean over the phase (reports_committer_batch_requests)")
        report.add(f"replication: committer's transaction, {where}", run.publish_ms, "ms",
                   note="mean time to publish a batch: its changes, replies and offsets,"
                        " committed (reports_committer_transaction_seconds, publish)")
        for part, seconds in (("up", run.cpu_up), ("brokers", run.cpu_brokers)):
            report.add(f"replication: CPU per write, {part}, {where}",
                       seconds / run.writes * 1000 if run.writes else float("nan"), "ms",
                       note="user and system time over the phase: `up`'s processes but a"
                            " broker" if part == "up" else "the same, of every broker")


# -- transaction verification (KIP-890 part 1) ----------------------------------
@dataclass(frozen=True)
class Verification:
    transactions: int
    retry_backoff_ms: int
    not_enough_replicas: int
    seconds: list[float]


async def verification(bootstrap: str, *, transactions: int = 500,
                       retry_backoff_ms: int = 100) -> Verification:
    """The committer's pattern through the requests topic, back to back:
    produce changes and replies, add the requests' offset
    (``send_offsets_to_transaction``), commit. On a cluster with transaction
    verification on, a produce that meets the coordinator still completing
    the last transaction is answered NOT_ENOUGH_REPLICAS, which aiokafka
    retries after ``retry_backoff_ms``: counted here, with each transaction's
    time."""
    retries.count_retries()
    name = f"verification-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{name}.{t}", 1, 3) for t in
                                   ("changes", "replies", "requests")])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                transactional_id=name, retry_backoff_ms=retry_backoff_ms)
    await producer.start()
    counter = metrics.KAFKA_RETRIES.labels("NotEnoughReplicas")
    seconds: list[float] = []
    try:
        async with producer.transaction():  # the topics' leaders elected
            await producer.send(f"{name}.changes", b"warm", partition=0)
        before = counter._value.get()
        requests = TopicPartition(f"{name}.requests", 0)
        for i in range(transactions):
            started = time.perf_counter()
            async with producer.transaction():
                for _ in range(i % 3):
                    await producer.send(f"{name}.changes", b"%d" % i, partition=0)
                await producer.send(f"{name}.replies", b"%d" % i, partition=0)
                await producer.send_offsets_to_transaction(
                    {requests: OffsetAndMetadata(i + 1, "")}, f"{name}-group")
            seconds.append(time.perf_counter() - started)
        retried = int(counter._value.get() - before)
    finally:
        await producer.stop()
    return Verification(transactions, retry_backoff_ms, retried, seconds)


def verification_figures(report: Report, v: Verification) -> None:
    report.add(f"verification retries, backoff {v.retry_backoff_ms} ms",
               v.not_enough_replicas / v.transactions * 100, "per 100 transactions",
               note=f"NOT_ENOUGH_REPLICAS answers to {v.transactions} back-to-back"
               " transactions with the requests' offset")
    report.add(f"verification transaction p50, backoff {v.retry_backoff_ms} ms",
               percentile(v.seconds, 50) * 1000, "ms")
    report.add(f"verification transaction p99, backoff {v.retry_backoff_ms} ms",
               percentile(v.seconds, 99) * 1000, "ms")
