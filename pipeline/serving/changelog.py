"""The frontend's view of the change log: a tailing consumer that keeps the
newest events in memory (a watch cache).

It serves three purposes:
- consistent reads: ``sync()`` waits until every change committed before the
  call is in the cache, whose events are overlaid on ClickHouse's state;
- read-your-writes: ``wait_for(rv)`` after a write;
- watches (streaming events to clients).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from sortedcontainers import SortedDict

from pipeline.kafka import changelog, clientconfig
from pipeline.kafka.published import Published, reader_of
from pipeline.kafka.tail import Tail
from pipeline.model.cache import Cached, Event, Key, Scope, Subscription, in_scope
from pipeline.model.objectcache import ObjectCache
from pipeline.model.objects import identity
from pipeline.model.resources import RESOURCES
from pipeline.model.storage import Expired, StoredObject, Unavailable, json_bytes
from pipeline.model.versions import EMPTY_RESOURCE_VERSION, Current, Progress
from pipeline.observe import metrics
from pipeline.runtime.tasks import cancel
from pipeline.settings import Settings

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class Watermarks(Protocol):
    """What the cache asks ClickHouse: how far the materializer has copied
    the change log (``pipeline.clickhouse.progress.ProgressReads`` does)."""

    async def progress(self, topic: str, partition: int = 0) -> Progress | None: ...

    async def watermark(self) -> int: ...


class Watchers:
    """The watches' subscriptions by scope: an event is offered to those that
    can see it, not to every watcher (a thousand watches of one namespace
    each would otherwise each wake for every change)."""

    def __init__(self) -> None:
        self._by_scope: dict[Scope, set[Subscription]] = {}

    def add(self, sub: Subscription) -> None:
        self._by_scope.setdefault(sub.scope, set()).add(sub)

    def remove(self, sub: Subscription) -> None:
        subs = self._by_scope.get(sub.scope)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._by_scope[sub.scope]

    def offer(self, event: Event) -> int:
        """Offers ``event`` to the watches that can see it; how many."""
        resource, namespace, _ = event.key
        offered = 0
        for scope in ((resource, None), (resource, namespace)):
            subs = self._by_scope.get(scope, ())
            for sub in subs:
                sub.offer(event)
            offered += len(subs)
        return offered

    def close(self) -> None:
        for subs in self._by_scope.values():
            for sub in subs:
                sub.close()


class ChangeLog:
    def __init__(self, settings: Settings, store: Watermarks, *, bootstrap: str,
                 published: Published | None = None):
        self._settings = settings
        self._store = store
        self._bootstrap = bootstrap
        #: the changes this process's committer published: not parsed again
        self._changes = reader_of(published)
        self._tp = TopicPartition(settings.changes_topic, 0)
        self._tail: Tail | None = None
        #: Asks for the log's end on a connection of its own: the broker
        #: answers a connection's requests in order, so behind the tail's
        #: pending fetch it would wait as long as that fetch.
        self._offsets: AIOKafkaConsumer | None = None
        self._events: deque[Event] = deque()
        #: the latest event of each key, in key order: a list's page takes the
        #: keys past its cursor without scanning and sorting every one
        self._latest: SortedDict[Key, Event] = SortedDict()
        self._position = 0  # next offset to read
        self._rv = 0  # highest resourceVersion seen
        #: highest resourceVersion read from the log itself (``_rv`` starts
        #: at ClickHouse's watermark, before the tail has read up to it)
        self._tailed = 0
        self._floor = 0  # every change at or below this is in ClickHouse
        self._history = 0  # the cache holds every change after this
        self._watermark = 0  # last known ClickHouse watermark
        self._refreshing: asyncio.Future[int] | None = None
        #: readers waiting for the cache to advance, with what they wait for
        self._waiting: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._watchers = Watchers()
        self._closing = False
        #: every object seen below the floor, compressed: GETs of keys the
        #: cache no longer holds
        self._objects = ObjectCache(settings.object_cache_mib * 2**20)
        self._training: asyncio.Task[None] | None = None
        self._warming: asyncio.Task[None] | None = None

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def stored(self) -> int:
        return self._watermark

    def holds_after(self, rv: int) -> bool:
        return self._history <= rv

    async def start(self) -> None:
        self._offsets = clientconfig.consumer(self._bootstrap)
        await self._offsets.start()
        self._tail = Tail(clientconfig.follower(self._bootstrap,
                                         max_partition_fetch_bytes=clientconfig.MAX_REQUEST_BYTES),
                          self._tp)
        await self._tail.start()
        progress = await self._store.progress(self._settings.changes_topic)
        self._watermark = await self._store.watermark()
        self._rv = max(self._watermark, EMPTY_RESOURCE_VERSION)
        start, _ = await changelog.start_offset(self._tail, progress)
        if progress is not None and start == progress.offset + 1:
            self._floor = progress.resource_version
        self._history = max(self._floor, self._watermark)
        self._tail.seek(start)
        self._position = start
        self._task = asyncio.create_task(self._run(), name="changelog-tail")
        metrics.CACHE_AGE.set_function(self._age)
        metrics.OBJECT_CACHE_OBJECTS.set_function(lambda: len(self._objects))
        metrics.OBJECT_CACHE_BYTES.set_function(lambda: self._objects.size)

    def _age(self) -> float:
        """Seconds since the oldest cached change was committed."""
        return time.time() - self._events[0].at if self._events else 0.0

    async def stop(self) -> None:
        await cancel(self._warming)
        await cancel(self._training)
        await cancel(self._task)
        if self._tail is not None:
            await self._tail.stop()
        if self._offsets is not None:
            await self._offsets.stop()

    async def _run(self) -> None:
        tail = self._tail
        assert tail is not None
        async for records in tail.follow(what="the change log", log=log):
            # Past the records and any transaction markers after them.
            position = await tail.position()
            if not records and position == self._position:
                continue
            for record in records:
                change = self._changes.change(record)
                if change is None:
                    continue
                if change.resource_version <= self._floor:
                    self._tailed = max(self._tailed, change.resource_version)
                    continue
                key = identity(change.obj)
                before = self._latest.get(key)
                event = Event(key, Cached.of(change, record.value),
                              before.change if before else None, record.timestamp / 1000,
                              change.previous)
                self._append(event)
                # timed when a watch sees it (none sees the past read at a start)
                if self._watchers.offer(event):
                    metrics.WATCH_DISPATCH_SECONDS.observe(max(0.0, time.time() - event.at))
            self._position = position
            self._advance()

    def _advance(self) -> None:
        """Wake the readers whose wait is over, each at once (a condition's
        every waiter would take its lock in turn, one turn of the loop each,
        to find out)."""
        if not self._waiting:
            return
        waiting = []
        for done, fut in self._waiting:
            if fut.done():
                continue
            if done():
                fut.set_result(None)
            else:
                waiting.append((done, fut))
        self._waiting = waiting

    async def _until(self, done: Callable[[], bool], timeout: float, message: str) -> None:
        """Until ``done`` holds of the cache; Unavailable after ``timeout``."""
        if done():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((done, fut))
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError as err:
            raise Unavailable(message, retry_after=1) from err
        finally:
            fut.cancel()  # dropped at the next advance

    def _append(self, event: Event) -> None:
        self._events.append(event)
        self._latest[event.key] = event
        self._rv = max(self._rv, event.change.resource_version)
        self._tailed = max(self._tailed, event.change.resource_version)
        while len(self._events) > self._settings.watch_cache_size:
            old = self._events.popleft()
            self._floor = old.change.resource_version
            self._history = max(self._history, self._floor)
            if self._latest.get(old.key) is old:
                del self._latest[old.key]
                self._let_go(old)
        metrics.CACHE_EVENTS.set(len(self._events))

    def _let_go(self, event: Event) -> None:
        """The key's latest change leaves the cache: the object cache keeps it."""
        change = event.change
        if change.type == "DELETED":
            self._objects.drop(event.key, change.resource_version)
            return
        self._objects.keep(event.key, change.resource_version, change.raw)
        self._train()

    def _train(self) -> None:
        samples = self._objects.samples()
        if samples is None:
            return

        async def train() -> None:
            try:
                self._objects.use(await asyncio.to_thread(ObjectCache.trained, samples))
            except Exception:  # noqa: BLE001 - objects stay compressed without one
                log.exception("could not train the object cache's dictionary")
        self._training = asyncio.create_task(train(), name="object-cache-dictionary")

    async def below(self, key: Key, read: Callable[[], Awaitable[StoredObject | None]]
                    ) -> StoredObject | None:
        """The latest version of a key the cache does not hold: from the
        object cache, or else ``read`` from ClickHouse once it holds every
        change older than the cache (and kept, when nothing newer came meanwhile)."""
        kept = self._objects.get(key)
        if kept is not None:
            metrics.OBJECT_CACHE_READS.labels("hit").inc()
            return StoredObject(kept[0], key[1], key[2], kept[1])
        metrics.OBJECT_CACHE_READS.labels("miss").inc()
        await self.settled()
        with self._objects.reading():
            stored = await read()
            if stored is not None and key not in self._latest:
                self._objects.offer(key, stored.resource_version, json_bytes(stored.raw))
        return stored

    async def _until_settled(self) -> None:
        """``settled``, however long the materializer takes (after a start
        it may be minutes behind)."""
        while True:
            try:
                return await self.settled()
            except Unavailable:
                await asyncio.sleep(1)

    def warm(self, page: Callable[..., Awaitable[list[StoredObject]]], *,
             batch: int = 1000) -> None:
        """Read every object ClickHouse holds into the object cache, in the
        background, until its budget is spent: a restarted frontend answers
        GETs from memory again, as kube-apiserver fills its watch cache with a
        list. ``page``: ``ObjectReader.list_page``."""
        async def run() -> None:
            started, before = time.monotonic(), len(self._objects)
            for resource in RESOURCES:
                after: tuple[str, str] | None = None
                while not self._objects.spent:
                    await self._until_settled()
                    with self._objects.reading():
                        rows = await page(resource.id, namespace=None, after=after,
                                          limit=batch)
                        for row in rows:
                            key = (resource.id, row.namespace, row.name)
                            if key not in self._latest:
                                self._objects.offer(key, row.resource_version,
                                                    json_bytes(row.raw))
                    self._train()
                    if len(rows) < batch:
                        break
                    after = (rows[-1].namespace, rows[-1].name)
            log.info("object cache: %d objects read from ClickHouse in %.0f s (%d kept, %d"
                     " MiB)", len(self._objects) - before, time.monotonic() - started,
                     len(self._objects), self._objects.size >> 20)

        async def logged() -> None:
            try:
                await run()
            except Exception:  # noqa: BLE001 - GETs read ClickHouse instead
                log.exception("object cache: stopped reading ClickHouse")
        self._warming = asyncio.create_task(logged(), name="object-cache-warm")

    async def wait_for(self, rv: int, timeout: float | None = None) -> None:
        """Wait until the change with resourceVersion ``rv`` has been read."""
        timeout = self._settings.write_timeout if timeout is None else timeout
        await self._until(lambda: self._rv >= rv, timeout, "the change log is behind; retry")

    async def committed(self, key: Key, rv: int) -> Cached:
        """The change of ``key`` at resourceVersion ``rv``, once read: what a
        writer answers (the committer's reply names only the version)."""
        await self.wait_for(rv)
        event = self._latest.get(key)
        if event is not None and event.change.resource_version == rv:
            return event.change
        for event in reversed(self._events):  # a later change of the key came since
            if event.change.resource_version <= rv:
                if event.change.resource_version == rv and event.key == key:
                    return event.change
                break
        raise Unavailable(f"the write was committed at resourceVersion {rv}, which is no"
                          " longer cached; read the object again", retry_after=1)

    async def sync(self, *, settle: bool = True) -> None:
        """Wait until every change committed before this call has been read,
        and (``settle``) ClickHouse holds everything older than the cache."""
        assert self._offsets is not None
        try:
            end = (await self._offsets.end_offsets([self._tp]))[self._tp]
        except KafkaError as err:
            raise Unavailable("Kafka is unavailable", retry_after=1) from err
        await self._until(lambda: self._position >= end, self._settings.write_timeout,
                          "the change log is behind; retry")
        if settle:
            await self.settled()

    async def settled(self) -> None:
        """Wait until ClickHouse holds every change older than the cache, so
        ClickHouse overlaid with the cache is the whole state."""
        await self._materialized(lambda: self._watermark >= self._floor,
                                 "the materializer is behind; retry")

    async def admit(self) -> None:
        """Backpressure for writes: wait while ClickHouse lags the log by more
        than half the cache. Beyond the cache, reads would have to wait for the
        materializer; this way writes queue instead, and reads keep working."""
        limit = max(self._settings.watch_cache_size // 2, 1)
        await self._materialized(lambda: self._rv - self._watermark <= limit,
                                 "the materializer is behind; retry the write")

    async def _materialized(self, done: Callable[[], bool], message: str) -> None:
        """Until ``done`` holds of the ClickHouse watermark, asking for it again
        while it does not; Unavailable after the write timeout."""
        if done():
            return  # as nearly always: no timer to arm
        try:
            async with asyncio.timeout(self._settings.write_timeout):
                while not done():
                    await self._refresh_watermark()
                    if not done():
                        await asyncio.sleep(0.05)
        except TimeoutError as err:
            raise Unavailable(message, retry_after=1) from err

    async def _refresh_watermark(self) -> None:
        """One query for every reader waiting at the same moment."""
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._store.watermark())
        refreshing = self._refreshing
        try:
            self._watermark = max(self._watermark, await asyncio.shield(refreshing))
        finally:
            if self._refreshing is refreshing and refreshing.done():
                self._refreshing = None

    def _newest_after(self, since: int) -> Iterator[Event]:
        """The cached events after resourceVersion ``since``, the newest
        first: the cache is in resourceVersion order, so no older one is read."""
        for event in reversed(self._events):
            if event.change.resource_version <= since:
                return
            yield event

    def subscribe(self, since: int, scope: Scope, *, limit: int = 10000
                  ) -> tuple[list[Event], Subscription]:
        """Events of ``scope`` after resourceVersion ``since`` from the cache,
        and a subscription to every later one. Raises Expired when the cache
        no longer reaches back to ``since``."""
        if since < self._history:
            raise Expired(f"too old resource version: {since} ({self._history})")
        # a watch from a recent list reads its few events, not the whole
        # cache (a thousand watches starting together, a thousand times)
        backlog = [e for e in self._newest_after(since) if in_scope(scope, e.key)]
        backlog.reverse()
        sub = Subscription(scope, limit)
        self._watchers.add(sub)
        if self._closing:
            sub.close()
        return backlog, sub

    def close_watches(self) -> None:
        """End every watch, now and from now on, as a stopping kube-apiserver
        does: each stream ends cleanly after the events already sent, and its
        client watches again elsewhere."""
        self._closing = True
        self._watchers.close()

    def unsubscribe(self, sub: Subscription) -> None:
        self._watchers.remove(sub)

    def first_changes(self, resource: str, namespace: str | None, since: int,
                      after: tuple[str, str] | None, upto: tuple[str, str] | None = None
                      ) -> dict[tuple[str, str], Event]:
        """The first change after resourceVersion ``since`` of every
        (namespace, name) of ``resource`` (in ``namespace``) past ``after``
        and up to ``upto`` (inclusive): what a list as of ``since`` must see
        differently from now. Raises Expired when the cache no longer reaches
        back to ``since``."""
        if since < self._history:
            raise Expired(f"too old resource version: {since} ({self._history})")
        first: dict[tuple[str, str], Event] = {}
        for event in self._newest_after(since):
            _, ns, name = event.key
            if event.key[0] != resource or (namespace is not None and ns != namespace):
                continue
            if (after is None or (ns, name) > after) and (upto is None or (ns, name) <= upto):
                first[(ns, name)] = event  # the earliest is seen last
        return first

    def known(self, key: Key, upto: int) -> Current | None:
        """The key's latest committed version, from the cache or the object
        cache, if the tail has read the log up to ``upto`` and the key's
        latest change is at or below it; None when this cache cannot say.
        For a committer in this process (``Committer.know``), which knows
        that of the keys it let go of."""
        if self._tailed < upto:
            return None
        event = self._latest.get(key)
        if event is not None:
            change = event.change
            return Current(change.resource_version, change.raw, change.type == "DELETED")
        kept = self._objects.get(key)
        return Current(kept[0], kept[1], False) if kept is not None else None

    def latest(self, key: Key) -> Cached | None:
        event = self._latest.get(key)
        return event.change if event else None

    def newest(self, resource: str, namespace: str | None,
               after: tuple[str, str] | None = None, upto: tuple[str, str] | None = None
               ) -> list[tuple[Key, Cached]]:
        """The latest change of every key of ``resource`` (in ``namespace``)
        past ``after`` and up to ``upto`` (inclusive), in key order."""
        start: Key = (resource, *after) if after else (resource, namespace or "", "")
        out = []
        latest = self._latest
        for key in latest.irange(minimum=start, maximum=(resource, *upto) if upto else None,
                                 inclusive=(after is None, True)):
            if key[0] != resource or (namespace is not None and key[1] != namespace):
                break
            out.append((key, latest[key].change))
        return out

    def stats(self) -> dict[str, Any]:
        return {"events": len(self._events), "resourceVersion": self._rv, "floor": self._floor,
                "objects": len(self._objects), "objectBytes": self._objects.size}
