"""The fleet's one writer: every follower's batches into the store together.

ClickHouse makes a part of every insert and merges them again later; a
hundred clusters each inserting what arrived every half second would make
a thousand parts a second. Followers hand their batches here; at most every
``FLUSH_SECONDS`` (at once after a quiet spell) the writer inserts all of
them in one insert per table, then the positions they end at, and tells
each follower its batch is stored. A follower fetches again only then, so
a slow store slows the fetching, not the memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from pipeline.clickhouse.fleet import FleetStore
from pipeline.clickhouse.fleetrows import Batch
from pipeline.observe import metrics

#: the longest a batch waits for others to be written with
FLUSH_SECONDS = 0.5


class Writer:
    def __init__(self, store: FleetStore, *, interval: float = FLUSH_SECONDS):
        self._store = store
        self._interval = interval
        self._pending: list[tuple[Batch, asyncio.Future[None]]] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="fleet writer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _, done in self._pending:
            if not done.done():
                done.cancel()

    async def write(self, batch: Batch) -> None:
        """Once ``batch`` and its positions are stored (raises what storing
        raised)."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((batch, done))
        self._arrived.set()
        await done

    async def _run(self) -> None:
        last = 0.0
        while True:
            await self._arrived.wait()
            wait = last + self._interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            taken, self._pending = self._pending, []
            self._arrived.clear()
            together = Batch()
            for batch, _ in taken:
                together.add(batch)
            last = time.monotonic()
            try:
                with metrics.FLEET_WRITE_SECONDS.time():
                    await self._store.write(together)
            except Exception as err:  # noqa: BLE001 - each follower decides what to do
                for _, done in taken:
                    if not done.done():
                        done.set_exception(err)
            else:
                for _, done in taken:
                    if not done.done():
                        done.set_result(None)
