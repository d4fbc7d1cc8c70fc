"""The fleet's writer: batches of several followers stored together as they
are handed in, each follower's in order, none after one that failed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import cast

import pytest

from pipeline.clickhouse.fleet import FleetStore
from pipeline.clickhouse.fleetrows import Batch
from pipeline.fleet.writer import Lane, Writer

AT = datetime(2026, 11, 30, tzinfo=UTC)


class Store:
    def __init__(self) -> None:
        self.written: list[Batch] = []
        self.fail: Exception | None = None
        self.started = asyncio.Event()
        self.go_on = asyncio.Event()
        self.go_on.set()

    async def write(self, batch: Batch) -> None:
        self.started.set()
        await self.go_on.wait()
        if self.fail is not None:
            raise self.fail
        self.written.append(batch)


def batch(cluster: str, offset: int) -> Batch:
    b = Batch(reports=[[cluster, "r", offset]])
    b.positions[(cluster, f"{cluster}.changes", 0)] = (offset, AT)
    return b


def writer_on(store: Store) -> Writer:
    return Writer(cast(FleetStore, store), interval=0.05)


@contextlib.asynccontextmanager
async def running(writer: Writer) -> AsyncIterator[None]:
    writer.start()
    try:
        yield
    finally:
        await writer.stop()


async def first_write_held(store: Store, writer: Writer, lane: Lane) -> None:
    """The lane's first batch handed in (a quiet spell: written at once), and
    its write begun but held until ``store.go_on`` is set."""
    store.go_on.clear()
    writer.hand(lane, batch(lane.name, 1), 1)
    await store.started.wait()


async def test_batches_handed_in_during_a_write_are_the_next_write() -> None:
    store = Store()
    writer = writer_on(store)
    a, b = writer.lane("a"), writer.lane("b")
    async with running(writer):
        await first_write_held(store, writer, a)
        writer.hand(a, batch("a", 2), 1)  # fetched while the write goes on
        writer.hand(b, batch("b", 7), 1)
        writer.hand(a, batch("a", 3), 1)
        assert a.unwritten == 3
        store.go_on.set()
        await a.room(1)
        await b.room(1)
    assert [len(w.reports) for w in store.written] == [1, 3]
    assert store.written[1].positions == {("a", "a.changes", 0): (3, AT),
                                          ("b", "b.changes", 0): (7, AT)}
    assert a.unwritten == b.unwritten == 0


async def test_a_lane_holding_its_most_waits_for_a_write() -> None:
    store = Store()
    writer = writer_on(store)
    a = writer.lane("a")
    async with running(writer):
        store.go_on.clear()
        writer.hand(a, batch("a", 1), 600)
        waiting = asyncio.ensure_future(a.room(500))
        await store.started.wait()
        await asyncio.sleep(0)
        assert not waiting.done()
        store.go_on.set()
        await asyncio.wait_for(waiting, 5)


async def test_nothing_of_a_lane_is_stored_after_its_failed_batch() -> None:
    """A batch handed in while the lane's write in progress fails must not be
    stored by a later write: its positions would skip the failed batch's
    records."""
    store = Store()
    writer = writer_on(store)
    a, b = writer.lane("a"), writer.lane("b")
    async with running(writer):
        await first_write_held(store, writer, a)
        writer.hand(a, batch("a", 2), 1)  # after the failing one
        store.fail = OSError("disk full")
        store.go_on.set()
        with pytest.raises(OSError, match="disk full"):
            await asyncio.wait_for(a.room(1), 5)
        with pytest.raises(OSError, match="disk full"):
            writer.hand(a, batch("a", 3), 1)
        store.fail = None
        writer.hand(b, batch("b", 1), 1)  # the writer goes on for the others
        await asyncio.wait_for(b.room(1), 5)
        again = writer.lane("a")  # the follower again, from the stored positions
        writer.hand(again, batch("a", 1), 1)
        await asyncio.wait_for(again.room(1), 5)
    assert [w.positions for w in store.written] == [{("b", "b.changes", 0): (1, AT)},
                                                    {("a", "a.changes", 0): (1, AT)}]


async def test_a_dropped_lane_is_not_stored() -> None:
    store = Store()
    writer = writer_on(store)
    a = writer.lane("a")
    store.go_on.clear()
    writer.hand(a, batch("a", 1), 1)
    writer.drop(a)  # its follower stopped before the writer took it
    async with running(writer):
        b = writer.lane("b")
        writer.hand(b, batch("b", 1), 1)
        store.go_on.set()
        await asyncio.wait_for(b.room(1), 5)
    assert [list(w.positions) for w in store.written] == [[("b", "b.changes", 0)]]
