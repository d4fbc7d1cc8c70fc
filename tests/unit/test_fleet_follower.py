"""A follower ends only when stopped or told to resync its cluster: any
other end (its task cancelled from within, as a consumer's stop once did,
or an error it did not expect) is told and it starts again."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from pipeline.clickhouse.fleet import FleetStore
from pipeline.fleet import follower as following
from pipeline.fleet.follower import RESYNC, Follower
from pipeline.fleet.sources import Source
from pipeline.fleet.writer import Writer


def scripted(ends: list[BaseException | None]) -> tuple[Follower, list[int]]:
    """A follower whose runs end as ``ends`` says, one by one (None: it
    returns), then run until cancelled; ``runs`` counts its runs."""
    f = Follower(Source("a", "127.0.0.1:1"), cast(FleetStore, None), cast(Writer, None))
    runs: list[int] = []

    async def run() -> None:
        runs.append(len(runs))
        if ends:
            end = ends.pop(0)
            if end is not None:
                raise end
            return
        await asyncio.Event().wait()
    f._run = run  # type: ignore[method-assign]
    f._backoff = 0.01
    return f, runs


async def until(check: Any) -> None:
    async with asyncio.timeout(5):
        while not check():
            await asyncio.sleep(0.01)


def test_a_follower_cancelled_from_within_or_failing_starts_again(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        f, runs = scripted([asyncio.CancelledError(), RuntimeError("unexpected"), None])
        f.start()
        await until(lambda: len(runs) == 4)
        assert not f.done
        await f.stop()
        assert f.done

    with caplog.at_level(logging.ERROR, logger=following.__name__):
        asyncio.run(scenario())
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 3
    assert "cancelled from within" in told[0] and "unexpected" in told[1]
    assert "returned" in told[2]


def test_a_stopped_follower_or_one_told_to_resync_stays_ended() -> None:
    async def scenario() -> None:
        f, runs = scripted([])
        f.start()
        await until(lambda: runs == [0])
        await f.stop()
        await asyncio.sleep(0.05)
        assert runs == [0] and f.done

        f, runs = scripted([None])
        f.state = RESYNC
        f.start()
        await until(lambda: f.done)
        await asyncio.sleep(0.05)
        assert runs == [0]

    asyncio.run(scenario())
