"""Kafka adapter: reading one partition in order (its *tail*) with a consumer
of its own, from an offset either to the end the partition had when reading
began, or following it for as long as the reader runs.

Every reader of a single partition it assigns itself reads this way: the
frontend's change-log cache and its replies, a take-over's read of the change
log's tail, and whole-topic reads of benches and tests. Whether it sees only
committed records is its consumer's setting (``read_committed``, as every
consumer of ``pipeline.kafka.clientconfig``). A follower stops when its task is
cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

#: How long one read waits for records before it returns none.
FETCH_TIMEOUT_MS = 1000
#: How long a follower waits after a failed read before it reads again.
RETRY_SECONDS = 1.0

#: A record as aiokafka gives it (``aiokafka.structs.ConsumerRecord``).
Record = Any


class PartitionConsumer(Protocol):
    """What a tail asks of its consumer: ``aiokafka.AIOKafkaConsumer``'s
    calls for one partition it assigns itself (a test's scripted consumer
    gives the same)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def beginning_offsets(self, tps: list[TopicPartition]
                                ) -> dict[TopicPartition, int]: ...

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]: ...

    def assign(self, tps: list[TopicPartition]) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    async def seek_to_end(self, tp: TopicPartition) -> None: ...

    async def position(self, tp: TopicPartition) -> int: ...

    async def getmany(self, tp: TopicPartition, *, timeout_ms: int,
                      max_records: int | None) -> dict[TopicPartition, list[Record]]: ...


class Tail:
    """One partition, read in order by ``consumer`` (started and stopped by
    the tail), a fetch of at most ``max_records`` at a time."""

    def __init__(self, consumer: PartitionConsumer, tp: TopicPartition, *,
                 timeout_ms: int = FETCH_TIMEOUT_MS, max_records: int | None = None):
        self.consumer = consumer
        self.tp = tp
        self._timeout_ms = timeout_ms
        self._max_records = max_records

    async def start(self) -> None:
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.stop()

    async def __aenter__(self) -> Tail:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, err: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def bounds(self) -> tuple[int, int]:
        """The partition's first offset and its end (for a ``read_committed``
        consumer, its last stable offset). Best asked before :meth:`assign`:
        an assigned consumer has a fetch pending, and the broker answers a
        connection's requests in order."""
        begin = (await self.consumer.beginning_offsets([self.tp]))[self.tp]
        end = (await self.consumer.end_offsets([self.tp]))[self.tp]
        return int(begin), int(end)

    def assign(self) -> None:
        """The partition becomes the consumer's only one."""
        self.consumer.assign([self.tp])

    def seek(self, offset: int) -> None:
        """Read from ``offset`` next."""
        self.consumer.seek(self.tp, offset)

    async def seek_to_end(self) -> int:
        """Read only records that come after now; returns the position."""
        await self.consumer.seek_to_end(self.tp)
        return await self.position()

    async def position(self) -> int:
        """The next offset to read: past the records read and any transaction
        markers after them."""
        return int(await self.consumer.position(self.tp))

    async def read(self, *, timeout_ms: int | None = None,
                   max_records: int | None = None) -> list[Record]:
        """One fetch's records (none when none came within the timeout)."""
        batch = await self.consumer.getmany(
            self.tp, timeout_ms=self._timeout_ms if timeout_ms is None else timeout_ms,
            max_records=self._max_records if max_records is None else max_records)
        records: list[Record] = batch.get(self.tp, [])
        return records

    async def to_end(self, end: int) -> AsyncIterator[list[Record]]:
        """Each fetch's records (possibly none) until the position reaches
        ``end``; a failed read ends it with its error."""
        while await self.position() < end:
            yield await self.read()

    async def everything(self) -> AsyncIterator[list[Record]]:
        """Each fetch's records from the partition's first offset to the end
        it had when reading began; assigns the partition."""
        begin, end = await self.bounds()
        self.assign()
        self.seek(begin)
        async for records in self.to_end(end):
            yield records

    async def follow(self, *, what: str, log: logging.Logger) -> AsyncIterator[list[Record]]:
        """Each fetch's records (possibly none: the position may still have
        moved past transaction markers), for ever. A read that fails is
        logged on ``log`` ("reading ``what`` failed; retrying") and made again
        after RETRY_SECONDS."""
        while True:
            try:
                records = await self.read()
            except KafkaError:
                log.exception("reading %s failed; retrying", what)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            yield records
