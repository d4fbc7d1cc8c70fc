"""The channel between `up` and its aggregation agent's process: the agent's
store calls reach the parent's store and come back, errors included, and a
parent that goes away fails the calls waiting on it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from launcher.agentprocess import CALLS, RemoteStore, StoreServer
from pipeline.clickhouse.connection import StoreError
from pipeline.clickhouse.reads import StoredObject


class Rows:
    """A store of the agent's five calls, in memory."""

    def __init__(self) -> None:
        self.written: dict[str, list[Sequence[Any]]] = {}
        self.failure: Exception | None = None
        self.hold = asyncio.Event()
        self.hold.set()

    async def watermark(self) -> int:
        await self.hold.wait()
        if self.failure is not None:
            raise self.failure
        return 42

    async def versions_before(self, resource: str, before: int, *,
                              after: tuple[str, str] | None = None, limit: int = 1000
                              ) -> list[tuple[StoredObject, bool]]:
        row = StoredObject(namespace=after[0] if after else "", name=f"{resource}-{limit}",
                           resource_version=before - 1, raw="{}")
        return [(row, False)]

    async def write_policy_counts(self, rows: Sequence[Sequence[Any]]) -> None:
        self.written.setdefault("counts", []).extend(rows)

    async def write_policy_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        self.written.setdefault("windows", []).extend(rows)

    async def write_policy_totals_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        self.written.setdefault("totals", []).extend(rows)

    async def close(self) -> None:
        raise AssertionError("not a call the agent may make")


@pytest.fixture
async def channel() -> AsyncIterator[tuple[Rows, StoreServer, RemoteStore]]:
    parent, child = socket.socketpair()
    store = Rows()
    server = StoreServer(store, *await asyncio.open_connection(sock=parent))
    serving = asyncio.create_task(server.serve())
    remote = RemoteStore(*await asyncio.open_connection(sock=child))
    yield store, server, remote
    await remote.close()
    async with asyncio.timeout(5):
        await serving


async def test_calls_and_their_rows_arrive_intact(channel) -> None:  # type: ignore[no-untyped-def]
    store, server, remote = channel
    assert await remote.watermark() == 42
    page = await remote.versions_before("polr", 10, after=("ns", "x"), limit=7)
    assert page == [(StoredObject(namespace="ns", name="polr-7", resource_version=9,
                                  raw="{}"), False)]
    at = datetime(2026, 11, 27, 1, 2, 3, 456789, tzinfo=UTC)
    await remote.write_policy_counts([["c", "ns", "p", 1, 2, 3, 4, 5, 9, at]])
    await remote.write_policy_windows([["w"]])
    await remote.write_policy_totals_windows([["t"]])
    assert store.written == {"counts": [["c", "ns", "p", 1, 2, 3, 4, 5, 9, at]],
                             "windows": [["w"]], "totals": [["t"]]}


async def test_started_comes_before_ready(channel) -> None:  # type: ignore[no-untyped-def]
    """The parent goes on once the agent has started; its tables' recovery,
    long with a million reports, ends in ``ready`` later."""
    _, server, remote = channel
    await remote.started()
    async with asyncio.timeout(5):
        await server.started.wait()
    assert not server.ready.is_set()
    await remote.ready()
    async with asyncio.timeout(5):
        await server.ready.wait()


async def test_calls_made_together_are_answered_apart(channel) -> None:  # type: ignore[no-untyped-def]
    store, _, remote = channel
    store.hold.clear()
    waiting = asyncio.create_task(remote.watermark())
    await remote.write_policy_counts([["while the watermark waits"]])
    assert not waiting.done()
    store.hold.set()
    assert await waiting == 42


async def test_a_store_error_reaches_the_agent_as_one(channel) -> None:  # type: ignore[no-untyped-def]
    store, _, remote = channel
    store.failure = StoreError("ClickHouse is unreachable")
    with pytest.raises(StoreError, match="ClickHouse is unreachable"):
        await remote.watermark()
    store.failure = ValueError("odd")
    with pytest.raises(RuntimeError, match="ValueError: odd"):
        await remote.watermark()


async def test_only_the_agents_calls_are_answered(channel) -> None:  # type: ignore[no-untyped-def]
    _, _, remote = channel
    assert CALLS == {"watermark", "versions_before", "write_policy_counts",
                     "write_policy_windows", "write_policy_totals_windows"}
    with pytest.raises(RuntimeError, match="no store call 'close'"):
        await remote._call("close")


async def test_a_parent_gone_fails_the_waiting_calls() -> None:
    parent, child = socket.socketpair()
    remote = RemoteStore(*await asyncio.open_connection(sock=child))
    waiting = asyncio.create_task(remote.watermark())
    await asyncio.sleep(0)
    parent.close()
    with pytest.raises(StoreError, match="parent process has gone"):
        await waiting
    assert remote.closed.is_set()
    with pytest.raises(StoreError, match="parent process has gone"):
        await remote.write_policy_counts([])
    await remote.close()
