"""The materializer: every committed change, in log order, into ClickHouse.

It reads the change log with a consumer of its own, a batch at a time (what
has arrived, up to ``REPORTS_MATERIALIZE_BATCH``, at most every
``REPORTS_MATERIALIZE_INTERVAL``), and writes each batch with
the position of its last change (``changes_progress``). That position, kept in
ClickHouse beside the rows, is where it starts again: after a restart, a crash
or a take-over, ClickHouse is brought up to date from the log, and a batch
written twice is harmless (rows carry their version). Workers share the work
through a consumer group: one of them materializes at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import StoreError
from pipeline.kafka import clientconfig
from pipeline.kafka.published import Published, Reader, reader_of
from pipeline.model.messages import Change
from pipeline.observe import metrics
from pipeline.runtime.tasks import cancel
from pipeline.settings import Settings

log = logging.getLogger(__name__)


class _Position(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, materializer: Materializer):
        self._materializer = materializer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self._materializer.owning = False

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if assigned:
            await self._materializer.resume()


class Materializer:
    def __init__(self, settings: Settings, store: ChangeWrites, *, bootstrap: str,
                 published: Published | None = None):
        self._settings = settings
        self._store = store
        self._bootstrap = bootstrap
        #: the changes this process's committer published: not parsed again
        self._changes = reader_of(published)
        self._tp = TopicPartition(settings.changes_topic, 0)
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self.owning = False

    async def start(self) -> None:
        self._consumer = clientconfig.consumer(
            self._bootstrap, group_id=self._settings.materializer_group,
            auto_offset_reset="earliest", max_poll_records=self._settings.materialize_batch,
            max_partition_fetch_bytes=clientconfig.MAX_REQUEST_BYTES,
            fetch_min_bytes=clientconfig.BULK_FETCH_MIN_BYTES,
            fetch_max_wait_ms=clientconfig.BULK_FETCH_WAIT_MS,
            session_timeout_ms=clientconfig.GROUP_SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=clientconfig.GROUP_REBALANCE_TIMEOUT_MS,
            heartbeat_interval_ms=3000,
            group_instance_id=self._settings.instance_id or None)
        await self._consumer.start()
        self._consumer.subscribe([self._tp.topic], listener=_Position(self))
        self._task = asyncio.create_task(self._run(), name="materializer")

    async def stop(self) -> None:
        await cancel(self._task)
        if self._consumer is not None:
            await self._consumer.stop()

    async def resume(self) -> None:
        """Continue after the last change ClickHouse holds (from the log's
        beginning when it holds none, or when retention removed what follows
        it: Kafka resets the position to the earliest record)."""
        assert self._consumer is not None
        progress = await self._store.progress(self._settings.changes_topic)
        if progress is None:
            await self._consumer.seek_to_beginning(self._tp)
        else:
            self._consumer.seek(self._tp, progress.offset + 1)
        self.owning = True

    async def _run(self) -> None:
        """Whatever has arrived (up to REPORTS_MATERIALIZE_BATCH) is written
        together, at most every REPORTS_MATERIALIZE_INTERVAL: every insert is
        a part ClickHouse merges again later, so fewer, larger inserts cost
        less. The last change of a burst waits that long, never for the next
        one."""
        assert self._consumer is not None
        interval, most = self._settings.materialize_interval, self._settings.materialize_batch
        pending: list[Any] = []
        last = time.monotonic()
        while True:
            try:
                wait = last + interval - time.monotonic() if pending else 1.0
                batch = await self._consumer.getmany(
                    self._tp, timeout_ms=max(0, int(wait * 1000)),
                    max_records=most - len(pending) if pending else None)
                if not self.owning:
                    pending = []  # the partition's next owner writes these
                    continue
                pending.extend(batch.get(self._tp, []))
                if pending and (len(pending) >= most
                                or time.monotonic() >= last + interval):
                    written, pending = pending, []
                    await self._write(written)
                    last = time.monotonic()
                elif not pending:
                    last = time.monotonic() - interval  # after a quiet spell, write at once
            except asyncio.CancelledError:
                raise
            except (KafkaError, StoreError):
                pending = []
                log.exception("materializing a batch failed; retrying from ClickHouse's"
                              " position")
                await asyncio.sleep(1)
                await self._retry()

    async def _retry(self) -> None:
        try:
            if self.owning:
                await self.resume()
        except (KafkaError, StoreError, AssertionError) as err:
            log.warning("cannot find ClickHouse's position yet: %s", err)

    async def _write(self, records: list[Any]) -> None:
        # decoded beside the event loop: a second's changes take it tens of ms
        changes, objects, stamps = await asyncio.to_thread(_decode, records, self._changes)
        if not changes:
            return
        last = records[-1]
        # each change's commit time is its record's (the committer's
        # transaction), not this write's: a backlog keeps its history
        await self._store.write_changes(
            changes, topic=last.topic, partition=last.partition, offset=last.offset,
            committed=[datetime.fromtimestamp(s, UTC) for s in stamps], object_json=objects)
        now = time.time()
        for stamp in stamps:
            metrics.COMMIT_TO_CLICKHOUSE_SECONDS.observe(max(0.0, now - stamp))


def _decode(records: list[Any], reader: Reader
            ) -> tuple[list[Change], list[bytes | None], list[float]]:
    """The changes of ``records``, each change's object as the log holds it,
    and its commit time."""
    changes: list[Change] = []
    objects: list[bytes | None] = []
    stamps: list[float] = []
    for record in records:
        change = reader.change(record)
        if change is not None:
            changes.append(change)
            objects.append(Change.object_json(record.value))
            stamps.append(record.timestamp / 1000)
    return changes, objects, stamps
