"""The fleet's one writer: every follower's batches into the store together.

ClickHouse makes a part of every insert and merges them again later; a
hundred clusters each inserting what arrived every half second would make
a thousand parts a second. Followers hand their batches here as they fetch
them, each into its own ``Lane``, and go on fetching; at most every
``FLUSH_SECONDS`` (at once after a quiet spell) the writer takes what every
lane holds and inserts it in one insert per table, then the positions it
ends at. A change fetched while a write is in progress goes in the next
one: it waits for that write and its own, never for a fetch that could not
start until a write was over.

A lane's batches are stored in the order they were handed in, and none
after one that failed: a follower whose batch was not stored starts again
from the positions the store holds, in a new lane, so nothing it took is
skipped. A follower that holds ``most`` records not yet stored waits for a
write (``Lane.room``), so a slow store slows the fetching, not the memory.
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


class Lane:
    """One follower's batches since it read its positions."""

    def __init__(self, name: str):
        self.name = name
        #: records handed in and not stored yet
        self.unwritten = 0
        #: why a batch of the lane was not stored (then none after it is)
        self.failed: BaseException | None = None
        self._written = asyncio.Event()

    def check(self) -> None:
        """Raises what storing one of the lane's batches raised."""
        if self.failed is not None:
            raise self.failed

    async def room(self, most: int) -> None:
        """Once fewer than ``most`` of the lane's records wait to be stored
        (raises what storing them raised)."""
        while True:
            self.check()
            if self.unwritten < most:
                return
            self._written.clear()
            await self._written.wait()

    def _stored(self, records: int) -> None:
        self.unwritten -= records
        self._written.set()

    def _fail(self, err: BaseException) -> None:
        if self.failed is None:
            self.failed = err
        self._written.set()


class Writer:
    def __init__(self, store: FleetStore, *, interval: float = FLUSH_SECONDS):
        self._store = store
        self._interval = interval
        #: each lane's batches not taken yet (merged), and their records
        self._pending: dict[Lane, tuple[Batch, int]] = {}
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="fleet writer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for lane in self._pending:
            lane._fail(RuntimeError("the fleet's writer stopped"))
        self._pending.clear()

    @staticmethod
    def lane(name: str) -> Lane:
        """A new lane for ``name``'s batches."""
        return Lane(name)

    def hand(self, lane: Lane, batch: Batch, records: int) -> None:
        """Store ``batch`` (``records`` taken from Kafka) after the lane's
        batches before it; raises what storing one of those raised."""
        lane.check()
        held = self._pending.get(lane)
        if held is None:
            self._pending[lane] = (batch, records)
        else:
            held[0].add(batch)
            self._pending[lane] = (held[0], held[1] + records)
        lane.unwritten += records
        self._arrived.set()

    def drop(self, lane: Lane) -> None:
        """Forget what the lane holds that is not being written yet (its
        follower starts again from the stored positions)."""
        self._pending.pop(lane, None)
        lane._fail(RuntimeError(f"the lane of {lane.name} was dropped"))

    async def _run(self) -> None:
        last = 0.0
        while True:
            await self._arrived.wait()
            wait = last + self._interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            taken, self._pending = self._pending, {}
            self._arrived.clear()
            together = Batch()
            for batch, _ in taken.values():
                together.add(batch)
            last = time.monotonic()
            try:
                with metrics.FLEET_WRITE_SECONDS.time():
                    await self._store.write(together)
            except Exception as err:  # noqa: BLE001 - each follower decides what to do
                for lane in taken:
                    self._pending.pop(lane, None)  # what came after it must not be stored
                    lane._fail(err)
            else:
                now = time.time()
                for lane, (batch, records) in taken.items():
                    lane._stored(records)
                    if batch.last_change is not None:
                        metrics.FLEET_LAG_SECONDS.labels(lane.name).observe(
                            max(0.0, now - batch.last_change.timestamp()))
