"""A frontend whose process runs the committer takes each committed
transaction into its change-log cache before it answers the writers, and
its tail passes over those records when it reads them: every change is
cached, and seen by watchers, once and in log order."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
WRITES = 40


async def test_in_process_writes_are_cached_and_watched_once_in_order(
        start, make_settings) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings()
    running = await start(settings)
    log = running.system.changelog
    assert log is not None
    backlog, sub = log.subscribe(log.resource_version)
    assert backlog == []
    path = collection_path(POLR, "ns")

    async def create(i: int) -> None:
        r = await running.client.post(path, json=report(POLR, f"r{i}", "ns"))
        assert r.status_code == 201, r.text

    await asyncio.gather(*(create(i) for i in range(10)))  # batches of several
    for i in range(10, WRITES):
        current = (await running.client.get(f"{path}/r{i % 10}")).json()
        r = await running.client.put(f"{path}/r{i % 10}",
                                     json={**report(POLR, f"r{i % 10}", "ns", fail=i % 3),
                                           "metadata": current["metadata"]})
        assert r.status_code == 200, r.text
    # the writes were answered from the committer's hand-over ...
    assert log._taken_below > 0
    # ... and once the tail has read to the log's end, nothing came twice
    await log.sync(settle=False)
    seen = []
    while not sub.queue.empty():
        event = sub.queue.get_nowait()
        assert event is not None
        seen.append(event.change.resource_version)
    assert len(seen) == WRITES
    assert seen == sorted(set(seen))
    cached = [e.change.resource_version for e in log._events]
    assert cached == sorted(set(cached)) and cached[-WRITES:] == seen
