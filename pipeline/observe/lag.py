"""How far the worker's readers of the change log are behind it, measured on
their own every few seconds: the log's end (one ListOffsets on a consumer of
its own) against the position ClickHouse records after each materialized
batch (``reports_consumer_lag_records{agent="materializer"}``) and against the
offset the aggregating Faust agent committed (``agent="aggregate"``), with
ClickHouse's tracked memory beside them (``reports_clickhouse_memory_bytes``)."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from pipeline.clickhouse.connection import Connection, StoreError
from pipeline.clickhouse.progress import ProgressReads
from pipeline.kafka import clientconfig
from pipeline.observe import metrics
from pipeline.runtime.tasks import cancel
from pipeline.settings import Settings

log = logging.getLogger(__name__)
INTERVAL = 5.0


class LagMonitor:
    def __init__(self, settings: Settings, progress: ProgressReads, *, clickhouse: Connection,
                 bootstrap: str, interval: float = INTERVAL):
        self._settings = settings
        self._progress = progress
        self._clickhouse = clickhouse
        self._bootstrap = bootstrap
        self._interval = interval
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._consumer = clientconfig.consumer(self._bootstrap)
        await self._consumer.start()
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap)
        await self._admin.start()
        self._task = asyncio.create_task(self._run(), name="lag-monitor")

    async def stop(self) -> None:
        await cancel(self._task)
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()

    async def measure(self) -> int:
        """Sets both lags; returns the materializer's."""
        assert self._consumer is not None and self._admin is not None
        tp = TopicPartition(self._settings.changes_topic, 0)
        end = (await self._consumer.end_offsets([tp]))[tp]
        progress = await self._progress.progress(self._settings.changes_topic)
        # every change is written in a transaction, whose commit marker takes
        # the offset after it: caught up, the end is the last change's + 2
        lag = max(0, end - (progress.offset + 2 if progress is not None else 0))
        metrics.CONSUMER_LAG.labels("materializer").set(lag)
        committed = await self._admin.list_consumer_group_offsets(self._settings.app_id,
                                                                  partitions=[tp])
        # the next offset to read: caught up, only the last marker is after it
        position = committed[tp].offset if tp in committed else 0
        metrics.CONSUMER_LAG.labels("aggregate").set(max(0, end - max(position, 0) - 1))
        return lag

    async def _run(self) -> None:
        while True:
            try:
                await self.measure()
                metrics.CLICKHOUSE_MEMORY.set(await self._clickhouse.memory_tracked())
            except (KafkaError, StoreError) as err:
                log.debug("measuring the materializer's lag failed: %s", err)
            await asyncio.sleep(self._interval)
