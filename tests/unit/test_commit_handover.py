"""Requests handed over to the committer in process: taken in order, a
batch at a time, and none into a batch that is already full."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pipeline.commit.service import CommitService
from pipeline.commit.state import Committer
from pipeline.model.messages import WriteRequest
from pipeline.model.resources import RESOURCES
from pipeline.settings import Settings
from tests.helpers import report

POLR = RESOURCES[0]


def request(rid: str) -> WriteRequest:
    return WriteRequest(id=rid, op="create", resource=POLR.id, namespace="ns",
                        name=rid, reply_to="replies", now="2026-01-01T00:00:00Z",
                        obj=report(POLR, rid, "ns"))


@pytest.fixture
async def service() -> AsyncIterator[CommitService]:
    # a committer not yet recovered: it reads nothing ahead
    committer = Committer(None, None, topic="changes")  # type: ignore[arg-type]
    svc = CommitService(Settings(), committer, bootstrap="127.0.0.1:9")
    svc.owning = True
    svc._task = asyncio.ensure_future(asyncio.sleep(3600))  # as if running
    try:
        yield svc
    finally:
        svc._task.cancel()


async def test_a_full_batch_takes_none_and_the_rest_wait_in_order(service: CommitService) -> None:
    handed = [service.submit(request(f"r{i}")) for i in range(5)]
    assert all(h is not None for h in handed)
    assert service._take_local(-3) == []  # a batch past its bound: none joins
    assert [x.request.id for x in service._take_local(2)] == ["r0", "r1"]
    assert service._arrived.is_set()  # three still wait
    assert [x.request.id for x in service._take_local(10)] == ["r2", "r3", "r4"]
    assert not service._arrived.is_set()


async def test_a_writer_that_stopped_waiting_is_not_taken(service: CommitService) -> None:
    first, second = service.submit(request("r0")), service.submit(request("r1"))
    assert first is not None and second is not None
    first.cancel()  # its writer's timeout
    assert [x.request.id for x in service._take_local(10)] == ["r1"]


async def test_a_cancellation_a_call_raised_is_a_failed_batch_not_the_committers_end(
        ) -> None:
    """The committer goes on after a CancelledError that nobody's cancel
    raised (aiokafka's consumer stop raised its own fetches', in a
    take-over's read of the log: the committer ended, and every write with
    it); a stop still ends it."""
    svc = CommitService(Settings(), committer=None, bootstrap="127.0.0.1:9")  # type: ignore[arg-type]
    svc._consumer = object()  # type: ignore[assignment]
    calls = 0
    again = asyncio.Event()

    async def next_batch() -> list[object]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.CancelledError
        again.set()
        await asyncio.Event().wait()
        return []
    svc._next = next_batch  # type: ignore[method-assign]
    task = asyncio.create_task(svc._run())
    async with asyncio.timeout(5):
        await again.wait()
    assert not task.done() and calls == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
