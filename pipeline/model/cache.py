"""What the frontend's change-log cache holds and hands out: a change as
cached, an event of the log, a watcher's scope and subscription. Plain values
and an in-memory queue, no I/O: the frontend's ports (``apiserver.storage.ports``)
speak of them, and the cache (``pipeline.serving.changelog``) makes them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.model.messages import Change

Key = tuple[str, str, str]
JSON = dict[str, Any]


@dataclass(frozen=True)
class Cached:
    """A change as the cache keeps it: the object as JSON text, and its
    metadata parsed. Thousands of parsed reports would be millions of objects
    for the garbage collector to walk; these are a few each."""

    type: str
    resource_version: int
    raw: bytes
    #: ``apiVersion``, ``kind`` and ``metadata``: what selectors and
    #: metadata-only representations read.
    head: JSON

    @classmethod
    def of(cls, change: Change, record: bytes | None = None) -> Cached:
        """``record``: the change as the log holds it, whose object is reused."""
        obj = change.obj
        raw = Change.object_json(record) if record is not None else None
        return cls(change.type, change.resource_version, raw or orjson.dumps(obj),
                   {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                    "metadata": obj.get("metadata") or {}})

    @property
    def obj(self) -> JSON:
        """The whole object, parsed anew on each call."""
        value: JSON = orjson.loads(self.raw)
        return value


@dataclass(frozen=True)
class Event:
    key: Key
    change: Cached
    #: The key's previous version, when the cache still held it.
    previous: Cached | None = None
    #: when the change was committed (its record's time, Unix seconds)
    at: float = 0.0
    #: the key's resourceVersion before this change (0: it did not exist)
    previous_rv: int = 0


#: What a watcher sees: a resource's objects in one namespace, or (None) in
#: every namespace (and cluster-scoped ones).
Scope = tuple[str, str | None]


def in_scope(scope: Scope, key: Key) -> bool:
    return key[0] == scope[0] and (scope[1] is None or key[1] == scope[1])


class Subscription:
    """Events of one scope for one watcher, in order; ``overflowed`` when the
    watcher fell too far behind and must start again. ``None`` in the queue:
    the server is stopping, and the watch ends after what came before it."""

    def __init__(self, scope: Scope, limit: int):
        self.scope = scope
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._limit = limit
        self.overflowed = False

    def close(self) -> None:
        self.queue.put_nowait(None)

    def offer(self, event: Event) -> None:
        if self.queue.qsize() >= self._limit:
            self.overflowed = True
        if not self.overflowed:
            self.queue.put_nowait(event)
