"""The aggregation agent gets ready when Kafka deletes the records its table
recovery had left to read (the activity changelog's retention does, after
the agent has been down a few windows): Faust, waiting for a record at the
last offset the changelog had, would wait for ever."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from pipeline.clickhouse.aggregates import AggregateWrites
from pipeline.clickhouse.connection import Connection
from pipeline.kafka import internals, tablerecovery, topicadmin
from pipeline.model import topics
from pipeline.settings import Settings
from pipeline.worker import build_app

pytestmark = pytest.mark.integration
#: enough for the recovery to take several fetches
RECORDS = 20_000


async def _fill(kafka: str, topic: str) -> int:
    """A changelog of activity counts as the agent writes them (a count by
    key and window; Kafka deletes records of a compacted changelog only where
    it also deletes by time, as it does this one); its last offset."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka, linger_ms=20, max_batch_size=2**20)
    await producer.start()
    try:
        sent = [await producer.send(
            topic, b"1", key=json.dumps([f"ns-{i % 100}/policy-{i}", [i * 60.0, i * 60.0 + 59.9]])
            .encode(), partition=0) for i in range(RECORDS)]
        offsets: list[int] = [(await fut).offset for fut in sent]
        return max(offsets)
    finally:
        await producer.stop()


async def test_the_recovery_ends_when_kafka_deleted_what_it_had_left_to_read(
        make_settings: Callable[..., Settings], kafka: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings()
    await topicadmin.ensure_topics(settings, kafka)
    changelog = topics.changelog_topic(settings, topics.activity_table(settings))
    tp = TopicPartition(changelog, 0)
    last = await _fill(kafka, changelog)
    clickhouse = Connection(settings, data_dir=tmp_path)
    await clickhouse.start()
    app = build_app(settings, AggregateWrites(clickhouse), bootstrap=kafka, data_dir=tmp_path)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    starting = asyncio.create_task(app.start())
    try:
        # the recovery under way, some records read and more left: Kafka
        # deletes them all
        async with asyncio.timeout(60):
            while not ((behind := internals.recovery_behind(app)).get(tp)
                       and (read := internals.recovery_offset(app, tp)) is not None
                       and read >= 0):
                assert not starting.done(), "the recovery ended before the records were deleted"
                await asyncio.sleep(0.005)
        await admin.delete_records({tp: RecordsToDelete(last + 1)}, timeout_ms=10_000)
        read_then = internals.recovery_offset(app, tp)
        assert behind[tp] == last and read_then is not None and 0 <= read_then < last
        async with asyncio.timeout(4 * tablerecovery.CHECK_SECONDS + 10):
            await starting
        assert not internals.recovery_behind(app)
        said = [r.getMessage() for r in caplog.records if r.name == tablerecovery.__name__]
        ended = [re.fullmatch(
            rf"Kafka deleted the records of {re.escape(str(tp))} up to {last} \(the log starts"
            rf" at {last + 1}\) before the table's recovery read them, from (-?\d+): they are"
            " taken as read", line) for line in said]
        assert len(ended) == 1 and ended[0] is not None, said
        assert read_then <= int(ended[0].group(1)) < last
    finally:
        if not starting.done():
            starting.cancel()
        await app.stop()
        await admin.close()
        await clickhouse.close()
