"""One source followed into the fleet store.

A consumer of the source's Kafka (``read_committed``, no group: the fleet's
positions are kept in ClickHouse with the rows, not in the source's Kafka,
which the fleet may only read) takes its change log and summaries from the
positions the store holds and hands each batch it fetches to the fleet's
writer, which stores it with the positions it ends at (``writer``), while
the follower fetches the next. After a crash or a SIGKILL, or a batch not
stored, it starts again from the stored positions: what it takes twice
collapses into the same rows.

Its state, recorded in the store (``fleet_sources``) whenever it changes and
while it follows: ``following``; ``unreachable`` (the source's Kafka has not
answered for ``STALE_SECONDS``; the others go on); ``resync`` (the source's
retention has passed the fleet's position: records were deleted before the
fleet took them, so its counts would be wrong; the fleet stops following it
and says so in one line, until ``reports-pipeline fleet --resync`` lists
the cluster's reports from its API).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from pipeline.clickhouse import fleetrows
from pipeline.clickhouse.connection import StoreError
from pipeline.clickhouse.fleet import FleetStore, SourceState
from pipeline.fleet.sources import Source
from pipeline.fleet.writer import Lane, Writer
from pipeline.kafka import clientconfig
from pipeline.observe import metrics
from pipeline.runtime.logs import quiet

log = logging.getLogger(__name__)

FOLLOWING, UNREACHABLE, RESYNC = "following", "unreachable", "resync"
#: how long a source's Kafka may not answer before it is shown as unreachable
STALE_SECONDS = 15.0
#: how often a following source's contact is recorded
CONTACT_SECONDS = 10.0
#: the longest a fetch waits for records; the batch then handed to the writer
FETCH_WAIT_MS = 500
#: the most records a fetch takes; a follower holding as many not yet
#: stored waits for a write before it fetches again
MOST_RECORDS = 1000


class RetentionPassed(Exception):
    """The source no longer holds the records after the fleet's position."""


class Follower:
    def __init__(self, source: Source, store: FleetStore, writer: Writer):
        self.source = source
        self._store = store
        self._writer = writer
        self._task: asyncio.Task[None] | None = None
        self.state = ""
        self.detail = ""
        self.last_contact = 0.0  # time.time() of the source's last answer
        self._backoff = 1.0
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"fleet {self.source.name}")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The follower ends only when stopped or told to resync; any other
        end is a fault of its own: told, and it starts again."""
        if self._stopping or self.state == RESYNC:
            return
        why = ("cancelled from within" if task.cancelled()
               else repr(task.exception()) if task.exception() else "returned")
        log.error("cluster %s: its follower ended (%s); starting it again in %.0f s",
                  self.source.name, why, self._backoff)
        asyncio.get_running_loop().call_later(self._backoff, self._restart)
        self._backoff = min(self._backoff * 2, 10.0)

    def _restart(self) -> None:
        if not self._stopping:
            self.start()

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    async def _run(self) -> None:
        while True:
            consumer = self._consumer()
            try:
                with quiet("aiokafka"):
                    await consumer.start()
                await self._follow(consumer)
            except RetentionPassed as err:
                await self._set(RESYNC, str(err))
                log.error("%s", err)
                return
            except (KafkaError, OSError, StoreError, TimeoutError) as err:
                if time.time() - self.last_contact > STALE_SECONDS or isinstance(err, StoreError):
                    await self._set(UNREACHABLE, f"{type(err).__name__}: {err}")
                await self._pause()
            except Exception as err:  # noqa: BLE001 - one cluster's fault stops not the fleet
                log.exception("cluster %s: following it failed; trying again", self.source.name)
                await self._set(UNREACHABLE, f"{type(err).__name__}: {err}")
                await self._pause()
            finally:
                with contextlib.suppress(KafkaError, OSError):
                    await consumer.stop()

    async def _pause(self) -> None:
        """Wait before trying again: 1 s, then twice as long each time, at
        most 10 s; from 1 s again once following."""
        await asyncio.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, 10.0)

    def _consumer(self) -> AIOKafkaConsumer:
        return clientconfig.consumer(
            self.source.bootstrap, client_id=f"reports-fleet-{self.source.name}",
            request_timeout_ms=clientconfig.QUICK_REQUEST_TIMEOUT_MS,
            fetch_max_wait_ms=FETCH_WAIT_MS, metadata_max_age_ms=5000,
            max_partition_fetch_bytes=clientconfig.MAX_REQUEST_BYTES)

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        partitions = [TopicPartition(self.source.changes_topic, 0),
                      TopicPartition(self.source.summaries_topic, 0)]
        consumer.assign(partitions)
        positions = await self._store.positions(self.source.name)
        first = await consumer.beginning_offsets(partitions)
        for tp in partitions:
            start = positions.get((tp.topic, tp.partition), -1) + 1
            if start < first[tp] and tp.topic == self.source.changes_topic:
                # The change log must be whole from the fleet's position; the
                # summaries are compacted (the last record per key is kept)
                # and their old windows deleted after a while, by design.
                raise RetentionPassed(
                    f"cluster {self.source.name}: {tp.topic} starts at offset {first[tp]},"
                    f" past the fleet's position ({start}): changes were deleted before the"
                    f" fleet took them, so it stops following this cluster. Resync it from"
                    f" its API (the fleet stopped): reports-pipeline fleet --data-dir DATA"
                    f" --resync {self.source.name} --kubeconfig FILE")
            consumer.seek(tp, max(start, first[tp]))
        self._contact()
        self._backoff = 1.0
        await self._set(FOLLOWING, "")
        checked = time.monotonic()
        # batches are handed to the writer from these positions on; one not
        # stored ends the lane, and this follower starts again from the store
        lane = self._writer.lane(self.source.name)
        try:
            while True:
                await lane.room(MOST_RECORDS)
                found = await consumer.getmany(timeout_ms=FETCH_WAIT_MS,
                                               max_records=MOST_RECORDS)
                lane.check()
                if found:
                    self._contact()
                    self._hand(lane, found)
                elif time.monotonic() - checked > CONTACT_SECONDS / 2:
                    # no records: is the source there at all? (bounded: after its
                    # broker came back, aiokafka's call could wait for good)
                    async with asyncio.timeout(STALE_SECONDS / 2):
                        await consumer.end_offsets(partitions)
                    self._contact()
                    checked = time.monotonic()
        finally:
            self._writer.drop(lane)

    def _hand(self, lane: Lane, found: dict[Any, list[Any]]) -> None:
        batch = fleetrows.Batch()
        records = 0
        for tp, taken in found.items():
            if not taken:
                continue
            if tp.topic == self.source.changes_topic:
                fleetrows.changes(self.source.name, taken, batch)
                kind = "changes"
            else:
                fleetrows.summaries(self.source.name, taken, batch)
                kind = "summaries"
            batch.positions[(self.source.name, tp.topic, tp.partition)] = (
                taken[-1].offset, datetime.fromtimestamp(taken[-1].timestamp / 1000, UTC))
            metrics.FLEET_RECORDS.labels(self.source.name, kind).inc(len(taken))
            records += len(taken)
        if batch.undecodable:
            log.warning("cluster %s: %d records skipped: not what their topic holds",
                        self.source.name, batch.undecodable)
        self._writer.hand(lane, batch, records)

    def _contact(self) -> None:
        self.last_contact = time.time()

    async def _set(self, state: str, detail: str) -> None:
        """Take ``state``; a change is logged and recorded at once (the fleet
        records every follower's contact together, ``Fleet``)."""
        if state == self.state and detail == self.detail:
            return
        changed = state != self.state
        self.state, self.detail = state, detail
        metrics.FLEET_STALE.labels(self.source.name).set(0 if state == FOLLOWING else 1)
        if changed and state != FOLLOWING:
            log.warning("cluster %s is %s: %s", self.source.name, state, detail)
        elif changed:
            log.info("cluster %s: following %s at %s", self.source.name,
                     self.source.changes_topic, self.source.bootstrap)
        with contextlib.suppress(StoreError):
            await self._store.record_states([self.snapshot()])

    def snapshot(self, *, now: float | None = None) -> SourceState:
        """The follower as it is now: following but silent for STALE_SECONDS
        is unreachable."""
        state, detail = self.state or "starting", self.detail
        now = time.time() if now is None else now
        if state == FOLLOWING and now - self.last_contact > STALE_SECONDS:
            state, detail = UNREACHABLE, "no answer from its Kafka"
        return SourceState(self.source.name, self.source.bootstrap, self.source.prefix,
                           state, detail,
                           datetime.fromtimestamp(self.last_contact or now, UTC), None)
