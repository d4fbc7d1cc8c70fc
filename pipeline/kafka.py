"""Kafka adapter: topic set-up, the low-latency Faust transport, and reading the
change log from where ClickHouse stopped.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.messages import REQUEST_ID_HEADER, Change, DecodeError
from pipeline.settings import Settings
from pipeline.store import Progress

log = logging.getLogger(__name__)

TRANSPORT_SCHEME = "reports-kafka"
#: Producer batches: records sent together share one batch up to this size
#: (aiokafka's default is 16 KiB, two reports). Each batch is one object in the
#: embedded broker, whose fetches slow down with the number of objects in a
#: partition, so fewer, fuller batches keep it fast for longer.
MAX_BATCH_BYTES = 1024 * 1024
#: The largest produce request: a report body may be several MiB.
MAX_REQUEST_BYTES = 16 * 1024 * 1024


class LowLatencyConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust fixes the consumer's fetch wait at 1.5 s; brokers that answer a
    fetch only when the wait expires then add that much latency to every hop.
    Take it from the app instead."""

    def _create_worker_consumer(self, transport: Any) -> AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = getattr(self.app, "fetch_max_wait_ms", 500)
        return consumer


class LowLatencyConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> LowLatencyConsumerThread:
        return LowLatencyConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = LowLatencyConsumer


TRANSPORTS.aliases[TRANSPORT_SCHEME] = f"{__name__}:Transport"


async def ensure_topics(settings: Settings, bootstrap: str) -> None:
    """Create the pipeline's topics if they do not exist. The change log has one
    partition: its order is the resourceVersion order."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [NewTopic(t, 1, 1) for t in (settings.changes_topic, settings.requests_topic,
                                               settings.replies_topic,
                                               settings.result_events_topic,
                                               settings.summaries_topic) if t not in existing]
        if wanted:
            try:
                await admin.create_topics(wanted)
            except TopicAlreadyExistsError:
                pass
    finally:
        await admin.close()


def change_from_record(record: Any) -> Change | None:
    headers = dict(record.headers or ())
    request_id = headers.get(REQUEST_ID_HEADER, b"").decode()
    try:
        return Change.decode(record.value, request_id)
    except DecodeError:
        log.warning("skipping undecodable change at offset %s", record.offset)
        return None


async def start_offset(consumer: AIOKafkaConsumer, tp: TopicPartition,
                       progress: Progress | None) -> int:
    """First offset of ``tp`` not yet materialized in ClickHouse.

    ``progress`` names the last materialized record. If the log no longer holds
    that record (an embedded broker restarts empty), everything in the log is
    newer than ClickHouse and reading starts at its beginning.
    """
    begin = (await consumer.beginning_offsets([tp]))[tp]
    end = (await consumer.end_offsets([tp]))[tp]
    if progress is None or not begin <= progress.offset < end:
        return begin
    consumer.seek(tp, progress.offset)
    batch = await consumer.getmany(tp, timeout_ms=5000, max_records=1)
    records = batch.get(tp) or []
    if records:
        change = change_from_record(records[0])
        if change is not None and change.resource_version == progress.resource_version:
            return progress.offset + 1
    return begin


async def read_tail(settings: Settings, bootstrap: str, progress: Progress | None) -> list[Change]:
    """Every change in the log that ClickHouse may not have yet."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                fetch_max_wait_ms=settings.fetch_max_wait_ms)
    await consumer.start()
    try:
        tp = TopicPartition(settings.changes_topic, 0)
        consumer.assign([tp])
        offset = await start_offset(consumer, tp, progress)
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.seek(tp, offset)
        out: list[Change] = []
        while offset < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                offset = record.offset + 1
                change = change_from_record(record)
                if change is not None:
                    out.append(change)
        return out
    except KafkaError:
        raise
    finally:
        await consumer.stop()
