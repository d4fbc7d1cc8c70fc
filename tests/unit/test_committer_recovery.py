"""The committer's recovery never gives out a resourceVersion that was
committed, whatever the materializer does meanwhile and whatever the change
log shows."""

from __future__ import annotations

import gc
from typing import Any, cast

import pytest

from pipeline.clickhouse.recovery import CommitterQueries
from pipeline.commit.state import Committer, IncompleteLog
from pipeline.model.messages import Change, WriteRequest
from pipeline.model.objects import identity, key_id
from pipeline.model.resources import RESOURCES
from pipeline.model.versions import Progress
from tests.helpers import report

POLR = RESOURCES[0]
TOPIC = "changes"


class Materialized:
    """The change log (``log``: offset = index) and ClickHouse's copy of its
    first ``materialized`` changes. ``catch_up``: the materializer writes the
    whole log right after the first question ClickHouse is asked."""

    def __init__(self, log: list[Change], materialized: int = 0, *, catch_up: bool = False):
        self.log = log
        self.materialized = materialized
        self.catch_up = catch_up

    def _asked(self) -> list[Change]:
        held = self.log[:self.materialized]
        if self.catch_up:
            self.materialized, self.catch_up = len(self.log), False
        return held

    async def progress(self, topic: str) -> Progress | None:
        assert topic == TOPIC
        held = self._asked()
        return Progress(len(held) - 1, held[-1].resource_version) if held else None

    async def live_keys(self) -> dict[int, None]:
        live: dict[int, None] = {}
        for c in self._asked():
            if c.type == "DELETED":
                live.pop(key_id(identity(c.obj)), None)
            else:
                live[key_id(identity(c.obj))] = None
        return live

    async def current(self, keys: Any) -> dict[Any, Any]:
        return {}

    async def tail(self, after: Progress | None) -> list[Change]:
        return self.log[(after.offset + 1 if after else 0):]


def committer(store: Materialized) -> Committer:
    return Committer(cast(CommitterQueries, store), store.tail, topic=TOPIC)


def create(name: str, request: str = "") -> WriteRequest:
    return WriteRequest(id=request or name, op="create", resource=POLR.id,
                        namespace="ns", name=name, reply_to="", now="2026-11-29T10:00:00Z",
                        obj=report(POLR, name, "ns"))


async def changes(*names: str) -> list[Change]:
    """The changes a committer on an empty log decides for creates of ``names``."""
    decided = await committer(Materialized([])).decide_batch([create(n) for n in names])
    return [d.change for d in decided if d.change is not None]


async def test_a_batch_materialized_during_recovery_is_neither_missed_nor_given_out_again(
        ) -> None:
    store = Materialized(await changes("a", "b"), catch_up=True)
    c = committer(store)
    await c.recover()
    assert c.next_resource_version == 4
    [again] = await c.decide_batch([create("a", request="a again")])
    assert again.reply.status is not None and again.reply.status["reason"] == "AlreadyExists"


async def test_a_recovery_short_of_a_committed_version_is_refused_until_the_log_shows_it(
        ) -> None:
    store = Materialized([])
    c = committer(store)
    first = await c.decide_batch([create("a"), create("b")])
    c.confirm(first)  # its transaction committed ...
    c.invalidate()  # ... and the next batch failed
    with pytest.raises(IncompleteLog, match="before 3"):
        await c.recover()  # ... before the log shows the commit
    store.log.extend(d.change for d in first if d.change is not None)
    await c.recover()
    [then] = await c.decide_batch([create("c")])
    assert then.change is not None and then.change.resource_version == 4


async def test_what_was_never_confirmed_may_be_decided_again() -> None:
    c = committer(Materialized([]))
    await c.decide_batch([create("a")])  # its commit failed: not confirmed
    c.invalidate()
    await c.recover()
    assert c.next_resource_version == 2


class Counting(Materialized):
    """Counts the keys whose state ClickHouse is asked for."""

    def __init__(self, log: list[Change], materialized: int):
        super().__init__(log, materialized)
        self.asked: list[Any] = []

    async def current(self, keys: Any) -> dict[Any, Any]:
        self.asked.extend(keys)
        return {}


async def test_only_a_live_key_is_asked_of_clickhouse_after_a_recovery() -> None:
    log = await changes("a", "b")
    store = Counting(log, materialized=len(log))
    c = committer(store)
    await c.recover()
    await c.decide_batch([create("c"), create("ab")])
    assert store.asked == []
    await c.decide_batch([create("b", request="b again")])
    assert store.asked == [(POLR.id, "ns", "b")]


def test_a_key_id_tells_apart_keys_whose_parts_split_differently() -> None:
    ids = {key_id(k) for k in [("r", "ns", "ab"), ("r", "nsa", "b"), ("rn", "s", "ab"),
                               ("r", "ns", "ab ")]}
    assert len(ids) == 4
    assert key_id(("r", "ns", "ab")) == key_id(("r", "ns", "a" + "b"))


def walked(root: object, *, apart: object) -> int:
    """How many references the garbage collector follows from ``root`` in a
    full collection (not through ``apart``)."""
    seen, todo, count = {id(apart)}, [root], 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or not gc.is_tracked(obj):
            continue
        seen.add(id(obj))
        referents = gc.get_referents(obj)
        count += len(referents)
        todo.extend(referents)
    return count


async def test_the_live_keys_add_nothing_to_what_the_collector_walks() -> None:
    # a million live keys held in a set made every full collection of the
    # process (which stops it) walk a million numbers
    walks = []
    for live in (10, 2000):
        store = Materialized(await changes(*(f"r{i}" for i in range(live))),
                             materialized=live)
        c = committer(store)
        await c.recover()
        await c.decide_batch([create("new")])
        gc.collect()
        walks.append(walked(c, apart=store))
    assert walks[1] - walks[0] < 100, walks
