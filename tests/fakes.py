"""In-memory fakes of the frontend's ports (``apiserver.storage.ports``): a committer
deciding with the committer's own pure ``decide``, the change feed it
publishes to, and a store of what was materialized before the feed's
history. No sockets, no Kafka, no ClickHouse."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from pipeline.commit.decision import current_after, decide, dry
from pipeline.model.cache import Cached, Event, Key, Scope, Subscription, in_scope
from pipeline.model.messages import Reply, WriteRequest
from pipeline.model.storage import Expired, Refused, StoredObject, Unavailable
from pipeline.model.versions import EMPTY_RESOURCE_VERSION, Current


class MemoryReader:
    """``ObjectReader``: the objects "ClickHouse" holds, by (resource,
    namespace, name). ``list_page`` takes no selector conditions: a test that
    lists with a selector keeps its objects in the feed."""

    def __init__(self, objects: Sequence[tuple[str, StoredObject]] = ()):
        self.objects = {(resource, o.namespace, o.name): o for resource, o in objects}

    def watermark(self) -> int:
        """The highest version held: where the feed's history starts."""
        return max((o.resource_version for o in self.objects.values()),
                   default=EMPTY_RESOURCE_VERSION)

    async def get(self, resource: str, namespace: str, name: str) -> StoredObject | None:
        return self.objects.get((resource, namespace, name))

    async def list_page(self, resource: str, *, namespace: str | None,
                        conditions: Sequence[str] = (), params: dict[str, Any] | None = None,
                        after: tuple[str, str] | None = None, limit: int = 1000
                        ) -> list[StoredObject]:
        assert not (conditions and self.objects), "selectors are not evaluated here"
        rows = sorted((o for (r, ns, _), o in self.objects.items()
                       if r == resource and (namespace is None or ns == namespace)
                       and (after is None or (o.namespace, o.name) > after)),
                      key=lambda o: (o.namespace, o.name))
        return rows[:limit]

    async def versions(self, resource: str, wanted: Sequence[tuple[str, str, int]]
                       ) -> dict[tuple[str, str], StoredObject]:
        return {(ns, name): o for ns, name, rv in wanted
                if (o := self.objects.get((resource, ns, name))) and o.resource_version == rv}


class MemoryFeed:
    """``ChangeFeed``: every change since the start, always read up to the
    end of the log (nothing is ever behind)."""

    def __init__(self, start: int = EMPTY_RESOURCE_VERSION):
        self.events: list[Event] = []
        self._rv = self._start = start
        self._subs: list[Subscription] = []

    def append(self, key: Key, cached: Cached, previous_rv: int) -> None:
        before = self.latest(key)
        event = Event(key, cached, before, 0.0, previous_rv)
        self.events.append(event)
        self._rv = max(self._rv, cached.resource_version)
        for sub in self._subs:
            if in_scope(sub.scope, key):
                sub.offer(event)

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def stored(self) -> int:
        return self._start

    def holds_after(self, rv: int) -> bool:
        return rv >= self._start

    async def sync(self, *, settle: bool = True) -> None:
        return None

    async def settled(self) -> None:
        return None

    async def wait_for(self, rv: int, timeout: float | None = None) -> None:
        if rv > self._rv:
            raise Unavailable("the change log is behind; retry")

    async def admit(self) -> None:
        return None

    async def committed(self, key: Key, rv: int) -> Cached:
        for event in self.events:
            if event.key == key and event.change.resource_version == rv:
                return event.change
        raise Unavailable(f"no change of {key} at {rv}")

    def latest(self, key: Key) -> Cached | None:
        found = [e.change for e in self.events if e.key == key]
        return found[-1] if found else None

    async def below(self, key: Key, read: Callable[[], Awaitable[StoredObject | None]]
                    ) -> StoredObject | None:
        return await read()  # the feed holds every change: what is below it is stored

    def newest(self, resource: str, namespace: str | None,
               after: tuple[str, str] | None = None, upto: tuple[str, str] | None = None
               ) -> list[tuple[Key, Cached]]:
        latest = {e.key: e.change for e in self.events}
        return sorted((key, c) for key, c in latest.items()
                      if key[0] == resource and (namespace is None or key[1] == namespace)
                      and (after is None or key[1:] > after)
                      and (upto is None or key[1:] <= upto))

    def first_changes(self, resource: str, namespace: str | None, since: int,
                      after: tuple[str, str] | None, upto: tuple[str, str] | None = None
                      ) -> dict[tuple[str, str], Event]:
        first: dict[tuple[str, str], Event] = {}
        for event in self.events:
            _, ns, name = event.key
            if (event.change.resource_version > since and event.key[0] == resource
                    and (namespace is None or ns == namespace)
                    and (after is None or (ns, name) > after)
                    and (upto is None or (ns, name) <= upto)):
                first.setdefault((ns, name), event)
        return first

    def subscribe(self, since: int, scope: Scope, *, limit: int = 10000
                  ) -> tuple[list[Event], Subscription]:
        if since < EMPTY_RESOURCE_VERSION:
            raise Expired(f"too old resource version: {since}")
        backlog = [e for e in self.events
                   if e.change.resource_version > since and in_scope(scope, e.key)]
        sub = Subscription(scope, limit)
        self._subs.append(sub)
        return backlog, sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.remove(sub)


class MemoryCommitter:
    """``WriteSubmitter``: decides each write as the committer does
    (``pipeline.commit.decision``), assigns the next resourceVersion and
    publishes the change to ``feed``."""

    def __init__(self, feed: MemoryFeed):
        self.feed = feed
        self.current: dict[Key, Current] = {}

    async def submit(self, request: WriteRequest) -> Reply:
        req = replace(request, id=str(uuid.uuid4()))
        key = (req.resource, req.namespace, req.name)
        decision = decide(req, self.current.get(key), self.feed.resource_version + 1)
        if req.dry_run:
            decision = dry(decision)
        if decision.reply.status is not None:
            raise Refused(decision.reply.status)
        change = decision.change
        if change is not None:
            self.current[key] = current_after(change)
            self.feed.append(key, Cached.of(change), change.previous)
        return decision.reply
