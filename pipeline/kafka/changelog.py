"""Kafka adapter: the change log's records: decoding one, the log's length,
appending a history to it, and reading it from where ClickHouse stopped."""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from pipeline.kafka.clientconfig import (
    COMPRESSION,
    MAX_REQUEST_BYTES,
    consumer,
    follower,
)
from pipeline.kafka.tail import Tail
from pipeline.model.messages import (
    PREVIOUS_HEADER,
    REQUEST_ID_HEADER,
    Change,
    DecodeError,
    change_headers,
)
from pipeline.model.objects import identity, object_key
from pipeline.model.versions import Progress
from pipeline.settings import Settings

log = logging.getLogger(__name__)


async def log_length(settings: Settings, bootstrap: str) -> int:
    """How many records the change log has ever had (its end offset)."""
    reader = consumer(bootstrap)
    await reader.start()
    try:
        tp = TopicPartition(settings.changes_topic, 0)
        return int((await reader.end_offsets([tp]))[tp])
    finally:
        await reader.stop()


async def append_history(settings: Settings, bootstrap: str,
                         changes: list[tuple[Change, float]]) -> None:
    """Append committed changes to an empty change log as the committer
    would have, each stamped with its own commit time (seconds): the history
    a demonstration starts from. Only while no committer runs: the
    committer takes its next resourceVersion from the log when it starts."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                max_request_size=MAX_REQUEST_BYTES, linger_ms=20,
                                compression_type=COMPRESSION)
    await producer.start()
    try:
        sent = []
        for change, ts in changes:
            sent.append(await producer.send(
                settings.changes_topic, change.encode(), partition=0,
                key=object_key(*identity(change.obj)).encode(), timestamp_ms=int(ts * 1000),
                headers=change_headers(change)))
        for ack in sent:
            await ack
    finally:
        await producer.stop()


def change_from_record(record: Any) -> Change | None:
    headers = dict(record.headers or ())
    request_id = headers.get(REQUEST_ID_HEADER, b"").decode()
    try:
        previous = int(headers.get(PREVIOUS_HEADER, b"0") or 0)
    except ValueError:
        previous = 0
    try:
        return Change.decode(record.value, request_id, previous)
    except DecodeError:
        log.warning("skipping undecodable change at offset %s", record.offset)
        return None


async def start_offset(tail: Tail, progress: Progress | None) -> tuple[int, int]:
    """First offset of the change log ``tail`` reads not yet materialized in
    ClickHouse, and the log's end; ``tail``'s partition is assigned to its
    consumer.

    ``progress`` names the last materialized record. When the log no longer
    holds it, either retention removed it (everything left is newer, and any
    change removed before it was materialized is lost: the log must outlast
    materializer outages) or the topic was recreated; reading starts at the
    log's beginning. Offsets are asked for before the partition is assigned:
    an assigned consumer has a fetch pending, and the broker answers a
    connection's requests in order.
    """
    begin, end = await tail.bounds()
    tail.assign()
    if progress is None:
        return begin, end
    if progress.offset < begin:
        log.error("the change log starts at offset %d, after the last materialized change"
                  " (%d): changes in between were removed before ClickHouse held them",
                  begin, progress.offset)
        return begin, end
    if progress.offset >= end:
        log.error("the change log ends at offset %d, before the last materialized change"
                  " (%d): was the topic recreated?", end, progress.offset)
        return begin, end
    tail.seek(progress.offset)
    records = await tail.read(timeout_ms=5000, max_records=1)
    if records and records[0].offset == progress.offset:
        change = change_from_record(records[0])
        if change is not None and change.resource_version == progress.resource_version:
            return progress.offset + 1, end
    log.error("the change log's record at offset %d is not the last materialized change"
              " (resourceVersion %d): was the topic recreated?", progress.offset,
              progress.resource_version)
    return begin, end


async def read_tail(settings: Settings, bootstrap: str, progress: Progress | None) -> list[Change]:
    """Every committed change in the log that ClickHouse may not have yet
    (read in a take-over: a broker that stopped answering holds it
    QUICK_REQUEST_TIMEOUT_MS, not REQUEST_TIMEOUT_MS)."""
    async with Tail(follower(bootstrap), TopicPartition(settings.changes_topic, 0)) as tail:
        offset, end = await start_offset(tail, progress)
        tail.seek(offset)
        out: list[Change] = []
        async for records in tail.to_end(end):
            for record in records:
                change = change_from_record(record)
                if change is not None:
                    out.append(change)
        return out
