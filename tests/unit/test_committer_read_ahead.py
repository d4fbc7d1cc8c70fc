"""The committer reads ahead the state of keys it has let go of: a batch takes
what was read without asking ClickHouse again, and a read that a decision
overtook is never taken for the key's state. With a frontend in its process,
it takes them from the frontend's caches instead, only once those have read
the change log as far as every key let go of."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson

from pipeline.clickhouse.recovery import CommitterQueries
from pipeline.commit.decision import current_after
from pipeline.commit.state import Committer
from pipeline.model.cache import Cached, Event
from pipeline.model.messages import Change, WriteRequest
from pipeline.model.objects import identity, key_id
from pipeline.model.resources import RESOURCES
from pipeline.model.versions import Current, Progress
from pipeline.serving.changelog import ChangeLog
from pipeline.settings import Settings
from tests.helpers import report

POLR = RESOURCES[0]
KEY = (POLR.id, "ns", "a")


class Store:
    """ClickHouse holding ``latest`` (each key's newest version). A read of
    the state answers ``latest`` as it was asked, once ``gate`` (when one is
    set) is."""

    def __init__(self, latest: dict[Any, Current]):
        self.latest = latest
        self.asked: list[list[Any]] = []
        self.gate: asyncio.Event | None = None

    async def progress(self, topic: str) -> Progress | None:
        rv = max((c.resource_version for c in self.latest.values()), default=0)
        return Progress(rv - 1, rv) if rv else None

    async def live_keys(self) -> dict[int, None]:
        return {key_id(k): None for k, c in self.latest.items() if not c.deleted}

    async def watermark(self) -> int:
        return max(c.resource_version for c in self.latest.values())

    async def current(self, keys: Any) -> dict[Any, Current]:
        asked = sorted(keys)
        self.asked.append(asked)
        found = {k: self.latest[k] for k in asked if k in self.latest}
        gate = self.gate
        if gate is not None:
            await gate.wait()
        return found


async def no_tail(after: Progress | None) -> list[Change]:
    return []


def stored(rv: int) -> Current:
    obj = report(POLR, "a", "ns")
    obj["metadata"].update(uid="u", resourceVersion=str(rv), generation=1)
    return Current(rv, orjson.dumps(obj), False)


def update(rv: int, request: str) -> WriteRequest:
    obj = report(POLR, "a", "ns")
    obj["metadata"]["resourceVersion"] = str(rv)
    return WriteRequest(id=request, op="update", resource=POLR.id, namespace="ns", name="a",
                        reply_to="", now="2026-12-06T10:00:00Z", obj=obj)


async def recovered(store: Store, max_keys: int = 5000) -> Committer:
    c = Committer(cast(CommitterQueries, store), no_tail, topic="changes", max_keys=max_keys)
    await c.recover()
    return c


async def until(condition: Any) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)


async def test_a_batch_takes_the_state_read_ahead_without_asking_again() -> None:
    store = Store({KEY: stored(7)})
    c = await recovered(store)
    c.prefetch([update(7, "r1")])
    await until(lambda: store.asked)
    [decided] = await c.decide_batch([update(7, "r1")])
    assert store.asked == [[KEY]]
    assert decided.change is not None and decided.change.resource_version == 8
    assert decided.change.previous == 7


async def test_a_batch_waits_for_a_read_under_way_rather_than_asking_again() -> None:
    store = Store({KEY: stored(7)})
    c = await recovered(store)
    store.gate = asyncio.Event()
    c.prefetch([update(7, "r1")])
    deciding = asyncio.create_task(c.decide_batch([update(7, "r1")]))
    await until(lambda: store.asked)
    assert not deciding.done()
    store.gate.set()
    [decided] = await deciding
    assert store.asked == [[KEY]]
    assert decided.change is not None and decided.change.resource_version == 8


async def test_a_read_overtaken_by_a_decision_is_not_taken_for_the_state() -> None:
    store = Store({KEY: stored(7)})
    c = await recovered(store, max_keys=0)
    # the batch asks ClickHouse itself (nothing was read ahead), and a write
    # of the key handed over meanwhile is read ahead: both reads see version 7
    answered = store.gate = asyncio.Event()
    first = asyncio.create_task(c.decide_batch([update(7, "r1")]))
    await until(lambda: len(store.asked) == 1)
    ahead = store.gate = asyncio.Event()
    c.prefetch([update(7, "r2")])
    await until(lambda: len(store.asked) == 2)
    answered.set()
    [decided] = await first
    assert decided.change is not None and decided.change.resource_version == 8
    # version 8 materialized, the committer lets go of the key ...
    store.latest[KEY] = current_after(decided.change)
    await c.trim()
    # ... and then the read ahead of it answers with version 7
    ahead.set()
    await until(lambda: not c._reading)  # noqa: SLF001 - the read's end
    store.gate = None
    [stale] = await c.decide_batch([update(7, "r2")])
    assert stale.change is None
    assert stale.reply.status is not None and stale.reply.status["reason"] == "Conflict"
    [fresh] = await c.decide_batch([update(8, "r3")])
    assert fresh.change is not None and fresh.change.previous == 8


async def test_a_recovery_drops_what_was_read_before_it() -> None:
    store = Store({KEY: stored(7)})
    c = await recovered(store)
    c.prefetch([update(7, "r1")])
    await until(lambda: store.asked)
    # another committer wrote version 9 meanwhile; this one recovers
    store.latest[KEY] = stored(9)
    c.invalidate()
    [decided] = await c.decide_batch([update(9, "r1")])
    assert decided.change is not None and decided.change.previous == 9
    assert identity(decided.change.obj) == KEY


def frontend(*versions: int, size: int = 10) -> ChangeLog:
    """A frontend's change-log cache that has read ``versions`` of the key."""
    log = ChangeLog(Settings(watch_cache_size=size), store=cast(Any, None), bootstrap="")
    for rv in versions:
        log._append(Event(KEY, Cached.of(Change("MODIFIED", stored(rv).obj, rv))))  # noqa: SLF001
    return log


async def test_a_key_let_go_of_is_read_from_the_frontends_cache() -> None:
    store = Store({KEY: stored(7)})
    c = await recovered(store)
    c.know(frontend(3, 7).known)
    c.prefetch([update(7, "r1")])
    [decided] = await c.decide_batch([update(7, "r1")])
    assert store.asked == []
    assert decided.change is not None and decided.change.previous == 7


async def test_a_key_let_go_of_is_read_from_the_frontends_object_cache() -> None:
    store = Store({KEY: stored(7)})
    c = await recovered(store)
    log = frontend(7, size=0)  # the watch cache let it go at once: the object cache has it
    assert log.latest(KEY) is None
    c.know(log.known)
    [decided] = await c.decide_batch([update(7, "r1")])
    assert store.asked == []
    assert decided.change is not None and decided.change.previous == 7


async def test_a_frontend_behind_the_keys_let_go_of_is_not_asked() -> None:
    # ClickHouse holds version 7 of the key; the frontend has read the log
    # only as far as version 3. Taken from it, the update would conflict.
    store = Store({KEY: stored(7)})
    c = await recovered(store)
    c.know(frontend(3).known)
    c.prefetch([update(7, "r1")])
    [decided] = await c.decide_batch([update(7, "r1")])
    assert store.asked == [[KEY]]
    assert decided.change is not None and decided.change.previous == 7


async def test_a_trim_raises_how_far_the_frontend_must_have_read() -> None:
    store = Store({KEY: stored(7)})
    c = await recovered(store, max_keys=0)
    log = frontend(7)
    c.know(log.known)
    [first] = await c.decide_batch([update(7, "r1")])
    assert first.change is not None and store.asked == []
    # version 8 materialized and let go of, before the frontend read it
    store.latest[KEY] = current_after(first.change)
    await c.trim()
    [second] = await c.decide_batch([update(8, "r2")])
    assert store.asked == [[KEY]]
    assert second.change is not None and second.change.previous == 8
    # once the frontend has read version 9, the key is read there
    store.latest[KEY] = current_after(second.change)
    log._append(Event(KEY, Cached.of(first.change), at=0))  # noqa: SLF001
    log._append(Event(KEY, Cached.of(second.change), at=0))  # noqa: SLF001
    c._trimmed = 0.0  # noqa: SLF001 - trims are at most once a second
    await c.trim()
    [third] = await c.decide_batch([update(9, "r3")])
    assert store.asked == [[KEY]]
    assert third.change is not None and third.change.previous == 9
