"""Reading one partition (``pipeline.kafka.tail``), against a scripted
consumer: what it asks of the consumer, in which order, and when it stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError

from pipeline.kafka import tail as tailing
from pipeline.kafka.tail import Tail

TP = TopicPartition("changes", 0)


def record(offset: int) -> Any:
    return SimpleNamespace(offset=offset, value=b"", key=None)


class Scripted:
    """A consumer of one partition whose fetches are given in advance: each
    is records, or an offset the position moves to with none (past
    transaction markers), or an error to raise."""

    def __init__(self, fetches: Iterable[Any], *, begin: int = 0, end: int = 0):
        self.fetches = list(fetches)
        self.begin, self.end = begin, end
        self.calls: list[Any] = []
        self.at: int | None = None

    async def start(self) -> None:
        self.calls.append("start")

    async def stop(self) -> None:
        self.calls.append("stop")

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls.append("beginning_offsets")
        return {tp: self.begin for tp in tps}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls.append("end_offsets")
        return {tp: self.end for tp in tps}

    def assign(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("assign", tps))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", offset))
        self.at = offset

    async def seek_to_end(self, tp: TopicPartition) -> None:
        self.calls.append("seek_to_end")
        self.at = self.end

    async def position(self, tp: TopicPartition) -> int:
        assert self.at is not None, "no position before a seek"
        return self.at

    async def getmany(self, tp: TopicPartition, *, timeout_ms: int,
                      max_records: int | None) -> dict[TopicPartition, list[Any]]:
        self.calls.append(("getmany", timeout_ms, max_records))
        if not self.fetches:
            await asyncio.Event().wait()  # nothing more comes
        fetch = self.fetches.pop(0)
        if isinstance(fetch, Exception):
            raise fetch
        if isinstance(fetch, int):
            self.at = fetch
            return {}
        self.at = fetch[-1].offset + 1
        return {tp: fetch}


def reads(consumer: Scripted) -> list[Any]:
    return [c for c in consumer.calls if isinstance(c, tuple) and c[0] == "getmany"]


async def test_everything_is_read_from_the_first_offset_to_the_end_it_had() -> None:
    consumer = Scripted([[record(3), record(4)], 6, [record(7)], [record(9)]], begin=3, end=8)
    async with Tail(consumer, TP) as tail:
        batches = [[r.offset for r in records] async for records in tail.everything()]
    # a fetch that found only a marker moved the position all the same
    assert batches == [[3, 4], [], [7]]
    assert consumer.calls[:5] == ["start", "beginning_offsets", "end_offsets",
                                  ("assign", [TP]), ("seek", 3)]
    assert consumer.calls[-1] == "stop"
    assert reads(consumer) == [("getmany", tailing.FETCH_TIMEOUT_MS, None)] * 3


async def test_an_empty_partition_is_not_fetched_at_all() -> None:
    consumer = Scripted([], begin=5, end=5)
    async with Tail(consumer, TP) as tail:
        assert [records async for records in tail.everything()] == []
    assert reads(consumer) == []


async def test_reading_to_the_end_stops_with_a_failed_read() -> None:
    consumer = Scripted([[record(0)], KafkaConnectionError("gone")], end=5)
    tail = Tail(consumer, TP)
    tail.assign()
    tail.seek(0)
    got = []
    with pytest.raises(KafkaConnectionError):
        async for records in tail.to_end(5):
            got.append(records)
    assert [[r.offset for r in b] for b in got] == [[0]]


async def test_a_read_takes_the_tails_timeout_and_batch_size_unless_told_otherwise() -> None:
    consumer = Scripted([[record(0)], [record(1)]])
    tail = Tail(consumer, TP, timeout_ms=250, max_records=10)
    tail.seek(0)
    await tail.read()
    await tail.read(timeout_ms=5000, max_records=1)
    assert reads(consumer) == [("getmany", 250, 10), ("getmany", 5000, 1)]


async def test_reading_from_the_end_starts_at_its_position() -> None:
    consumer = Scripted([], end=42)
    tail = Tail(consumer, TP)
    tail.assign()
    assert await tail.seek_to_end() == 42
    assert await tail.position() == 42


async def test_a_follower_logs_a_failed_read_and_reads_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(tailing, "RETRY_SECONDS", 0.0)
    consumer = Scripted([[record(0)], KafkaConnectionError("gone"), 2, [record(2)]])
    tail = Tail(consumer, TP)
    tail.seek(0)
    logger = logging.getLogger("tests.follower")
    got: list[list[int]] = []
    with caplog.at_level(logging.ERROR, logger="tests.follower"):
        async for records in tail.follow(what="the replies", log=logger):
            got.append([r.offset for r in records])
            if len(got) == 3:
                break
    # every fetch is handed on, one that found no record too
    assert got == [[0], [], [2]]
    [failed] = caplog.records
    assert failed.name == "tests.follower"
    assert failed.getMessage() == "reading the replies failed; retrying"
    assert failed.exc_info is not None


async def test_a_follower_stops_when_its_task_is_cancelled() -> None:
    consumer = Scripted([[record(0)]])
    tail = Tail(consumer, TP)
    tail.seek(0)
    got: list[Any] = []
    seen = asyncio.Event()

    async def follow() -> None:
        async for records in tail.follow(what="x", log=logging.getLogger(__name__)):
            got.append(records)
            seen.set()

    task = asyncio.create_task(follow())
    await seen.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(got) == 1
