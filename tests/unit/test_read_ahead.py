"""A paged list's next batch is read while its page is sent, for the request
that continues it; what it serves is the list as of its first page, whatever
changed between the read and the request, and a batch older than the cache's
history is read again."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Sequence
from typing import Any

import orjson

from apiserver.storage.service import ListQuery, ReportService
from pipeline.model.cache import Cached
from pipeline.model.messages import Change
from pipeline.model.resources import RESOURCES
from pipeline.model.storage import StoredObject
from tests.fakes import MemoryCommitter, MemoryFeed, MemoryReader
from tests.helpers import report

POLR = RESOURCES[0]


def _stored(name: str, rv: int, fail: int = 0) -> StoredObject:
    obj = report(POLR, name, "ns", fail=fail)
    obj["metadata"]["resourceVersion"] = str(rv)
    return StoredObject(rv, "ns", name, orjson.dumps(obj))


class _Batch(list[StoredObject]):
    """A batch as read (a list that can be referred to weakly)."""


class _Logged(MemoryReader):
    """Logs each batch it is asked for, in ``log`` beside the test's own
    marks; keeps the versions replaced by ``replace`` (as ClickHouse does
    until it merges them)."""

    def __init__(self, objects: list[tuple[str, StoredObject]], log: list[Any]):
        super().__init__(objects)
        self.log = log
        self.replaced: list[StoredObject] = []
        #: every batch it answered, while something still holds it
        self.batches: list[weakref.ref[_Batch]] = []

    def replace(self, obj: StoredObject) -> None:
        self.replaced.append(self.objects[(POLR.id, obj.namespace, obj.name)])
        self.objects[(POLR.id, obj.namespace, obj.name)] = obj

    async def list_page(self, resource: str, **kwargs: Any) -> list[StoredObject]:
        self.log.append(("read", kwargs.get("after")))
        batch = _Batch(await super().list_page(resource, **kwargs))
        self.batches.append(weakref.ref(batch))
        return batch

    async def versions(self, resource: str, wanted: Sequence[tuple[str, str, int]]
                       ) -> dict[tuple[str, str], StoredObject]:
        found = await super().versions(resource, wanted)
        for o in self.replaced:
            if (o.namespace, o.name, o.resource_version) in wanted:
                found[(o.namespace, o.name)] = o
        return found


class _Forgetful(MemoryFeed):
    """A feed whose history has moved past anything read before."""

    def holds_after(self, rv: int) -> bool:
        return False


async def _paged(service: ReportService, log: list[Any], reader: _Logged,
                 feed: MemoryFeed) -> list[tuple[str, int]]:
    """Every object in pages of 3; between the first and second pages the
    store and the feed change an object of the second (as the materializer
    and the change log would), and an object is created in its range."""
    out, token = [], ""
    for page in range(10):
        await asyncio.sleep(0)  # the client's turn: a read begun by now has begun
        log.append(("request", page))
        listed = await service.list_objects(ListQuery(POLR, "ns"), limit=3,
                                            continue_token=token)
        out += [(item.name, item.resource_version) async for item in listed.items]
        token = listed.continue_token
        if page == 0:
            changed = _stored("r-4", feed.resource_version + 1, fail=2)
            reader.replace(changed)
            feed.append((POLR.id, "ns", "r-4"), Cached.of(Change(
                "MODIFIED", orjson.loads(changed.raw), changed.resource_version)), 4)
            created = report(POLR, "r-35", "ns")
            await service.create(POLR, "ns", created)
        if not token:
            return out
    raise AssertionError("the list did not end")


async def _read_with(feed_type: type[MemoryFeed]) -> list[Any]:
    """The reads and requests of a paged list of r-1..r-8 over a feed of
    ``feed_type``, once the list has been checked as of its first page."""
    log: list[Any] = []
    reader = _Logged([(POLR.id, _stored(f"r-{i}", i)) for i in range(1, 9)], log)
    feed = feed_type(start=reader.watermark())
    service = ReportService(store=reader, changelog=feed, writer=MemoryCommitter(feed))
    assert await _paged(service, log, reader, feed) == [(f"r-{i}", i) for i in range(1, 9)]
    # nothing is held once the list is done (and the loop has had a turn, in
    # which a finished read's callbacks let go of it): a read's objects are
    # not kept until its expiry once a request has taken them
    await asyncio.sleep(0)
    gc.collect()
    assert [ref() for ref in reader.batches] == [None] * len(reader.batches)
    return log


async def test_the_next_batch_is_read_before_its_request_and_the_list_is_as_of_its_first_page(
        ) -> None:
    # each continuing request found its first batch read already: the read
    # after a page's last key came before the request for the next page
    assert await _read_with(MemoryFeed) == [
        ("request", 0), ("read", None), ("read", ("ns", "r-3")),
        ("request", 1), ("read", ("ns", "r-6")),
        ("request", 2)]


async def test_a_batch_read_before_the_caches_history_is_read_again() -> None:
    assert await _read_with(_Forgetful) == [
        ("request", 0), ("read", None), ("read", ("ns", "r-3")),
        ("request", 1), ("read", ("ns", "r-3")), ("read", ("ns", "r-6")),
        ("request", 2), ("read", ("ns", "r-6"))]
