"""Writers waiting for the frontend's cache to read their change are woken
together the moment the tail reads it, not one turn of the event loop after
another; a wait that times out is Unavailable and leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.model.cache import Cached, Event
from pipeline.model.messages import Change
from pipeline.model.storage import Unavailable
from pipeline.serving.changelog import ChangeLog
from pipeline.settings import Settings
from tests.helpers import NothingMaterialized


def _cache() -> ChangeLog:
    return ChangeLog(Settings(watch_cache_size=100), store=NothingMaterialized(),
                     bootstrap="")


def _read(log: ChangeLog, *versions: int) -> None:
    """The tail reads changes at ``versions``."""
    for rv in versions:
        obj = {"apiVersion": "v1", "kind": "X",
               "metadata": {"name": f"r{rv}", "namespace": "ns", "resourceVersion": str(rv)}}
        log._append(Event(("polr", "ns", f"r{rv}"), Cached.of(Change("ADDED", obj, rv))))
    log._position += len(versions)
    log._advance()


async def test_every_writer_whose_change_is_read_is_woken_in_the_same_turn() -> None:
    log = _cache()
    writers = [asyncio.ensure_future(log.wait_for(rv, timeout=5)) for rv in range(1, 17)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in writers)
    _read(log, *range(1, 13))
    await asyncio.sleep(0)  # one turn
    assert [w.done() for w in writers] == [True] * 12 + [False] * 4
    _read(log, *range(13, 17))
    await asyncio.gather(*writers)
    assert log._waiting == []


async def test_a_wait_that_times_out_is_unavailable_and_dropped() -> None:
    log = _cache()
    with pytest.raises(Unavailable, match="behind"):
        await log.wait_for(5, timeout=0.01)
    _read(log, 1)
    assert log._waiting == []


async def test_a_cancelled_reader_is_dropped() -> None:
    log = _cache()
    reader = asyncio.ensure_future(log.wait_for(5, timeout=5))
    await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    _read(log, 1)
    assert log._waiting == []


async def test_a_read_already_satisfied_does_not_wait() -> None:
    log = _cache()
    _read(log, 1, 2)
    await log.wait_for(2, timeout=0)
    assert log._waiting == []
