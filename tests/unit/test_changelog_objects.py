"""The change-log cache's object cache: a GET of a key the cache let go of
is answered from memory, a deletion is never undone by a read that raced
it, and a restarted frontend reads ClickHouse's objects back."""

from __future__ import annotations

import asyncio

from pipeline.model.cache import Cached, Event
from pipeline.model.messages import Change, EventType
from pipeline.model.resources import RESOURCES
from pipeline.model.storage import StoredObject
from pipeline.model.versions import Progress
from pipeline.serving.changelog import ChangeLog
from pipeline.settings import Settings
from tests.fakes import MemoryReader

R = RESOURCES[0].id


class Materialized:
    """ClickHouse holding every change up to ``watermark``."""

    def __init__(self) -> None:
        self.mark = 0

    async def progress(self, topic: str, partition: int = 0) -> Progress | None:
        return None

    async def watermark(self) -> int:
        return self.mark


def _cache(store: Materialized, size: int = 2) -> ChangeLog:
    return ChangeLog(Settings(watch_cache_size=size), store=store, bootstrap="")


def _obj(name: str, rv: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "X", "metadata": {"name": name, "namespace": "ns",
                                                         "resourceVersion": str(rv)}}


def _event(name: str, rv: int, etype: EventType = "MODIFIED") -> Event:
    return Event((R, "ns", name), Cached.of(Change(etype, _obj(name, rv), rv)))


async def _unread() -> StoredObject | None:
    raise AssertionError("ClickHouse was read")


async def test_a_key_let_go_of_is_read_from_memory() -> None:
    store = Materialized()
    log = _cache(store)
    for rv, name in enumerate(["a", "b", "c", "d"], start=1):
        log._append(_event(name, rv))
    store.mark = 4
    assert log.latest((R, "ns", "a")) is None  # the watch cache let it go
    found = await log.below((R, "ns", "a"), _unread)
    assert found is not None and found.resource_version == 1 and b'"name":"a"' in found.raw


async def test_a_deletion_let_go_of_is_not_found_and_not_undone() -> None:
    store = Materialized()
    log = _cache(store)
    log._append(_event("a", 1))
    log._append(_event("b", 2))
    log._append(_event("a", 3, "DELETED"))
    log._append(_event("c", 4))
    log._append(_event("d", 5))  # a's deletion goes below the floor
    store.mark = 5
    stale = StoredObject(1, "ns", "a", b'{"stale":true}')
    assert await log.below((R, "ns", "a"), lambda: _none()) is None

    # a read that began before the deletion went below the floor returns
    # the version before it: it is answered, and not kept
    log2 = _cache(store)
    log2._append(_event("a", 1))
    log2._append(_event("b", 2))
    log2._append(_event("c", 3))  # a (rv 1) kept
    reading = asyncio.Event()

    async def slow_read() -> StoredObject | None:
        reading.set()
        await asyncio.sleep(0.05)
        return stale
    log2._objects.drop((R, "ns", "a"), 1)  # as if evicted; the read goes to ClickHouse
    task = asyncio.create_task(log2.below((R, "ns", "a"), slow_read))
    await reading.wait()
    log2._append(_event("a", 4, "DELETED"))
    log2._append(_event("d", 5))
    log2._append(_event("e", 6))  # the deletion goes below the floor mid-read
    assert await task is stale
    assert log2._objects.get((R, "ns", "a")) is None


async def _none() -> StoredObject | None:
    return None


async def test_a_restarted_frontend_reads_every_object_back() -> None:
    store = Materialized()
    objects = [(R, StoredObject(i + 1, "ns", f"o{i:04d}", b'{"n":%d}' % i)) for i in range(2500)]
    reader = MemoryReader(objects)
    log = _cache(store)
    log.warm(reader.list_page, batch=1000)
    assert log._warming is not None
    await log._warming
    assert len(log._objects) == 2500
    found = await log.below((R, "ns", "o2499"), _unread)
    assert found is not None and found.raw == b'{"n":2499}'
    await log.stop()
