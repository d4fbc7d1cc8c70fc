"""The fleet's writer: batches of several followers stored together, each
follower told when its batch is stored, or why it was not."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import cast

from pipeline.clickhouse.fleet import FleetStore
from pipeline.clickhouse.fleetrows import Batch
from pipeline.fleet.writer import Writer

AT = datetime(2026, 11, 30, tzinfo=UTC)


class Store:
    def __init__(self, fail: Exception | None = None) -> None:
        self.written: list[Batch] = []
        self.fail = fail

    async def write(self, batch: Batch) -> None:
        if self.fail is not None:
            raise self.fail
        self.written.append(batch)


def batch(cluster: str, offset: int) -> Batch:
    b = Batch(reports=[[cluster, "r", offset]])
    b.positions[(cluster, f"{cluster}.changes", 0)] = (offset, AT)
    return b


async def test_batches_that_arrive_together_are_one_write() -> None:
    store = Store()
    writer = Writer(cast(FleetStore, store), interval=0.2)
    writer.start()
    try:
        await writer.write(batch("a", 1))  # a quiet spell: written at once
        await asyncio.gather(writer.write(batch("a", 2)), writer.write(batch("b", 7)),
                             writer.write(batch("a", 3)))
    finally:
        await writer.stop()
    assert [len(b.reports) for b in store.written] == [1, 3]
    assert store.written[1].positions == {("a", "a.changes", 0): (3, AT),
                                          ("b", "b.changes", 0): (7, AT)}


async def test_a_failed_write_is_each_writers_to_know() -> None:
    writer = Writer(cast(FleetStore, Store(fail=OSError("disk full"))), interval=0.05)
    writer.start()
    try:
        results = await asyncio.gather(writer.write(batch("a", 1)), writer.write(batch("b", 1)),
                                       return_exceptions=True)
    finally:
        await writer.stop()
    assert [str(r) for r in results] == ["disk full", "disk full"]
