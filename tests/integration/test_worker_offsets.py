"""The aggregate agent's consumer group follows the change log: its committed
offset reaches the log's end, transaction markers and all, so a restarted
worker resumes where it stopped instead of reading the whole log again."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from pipeline.kafka import clientconfig
from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


async def test_aggregate_agent_commits_up_to_the_end_of_the_log(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings()
    running = await start(settings)
    path = collection_path(POLR, "ns")
    # one request at a time: every change is a transaction of its own, so the
    # log alternates changes and commit markers (a gap after every record)
    for i in range(40):
        r = await running.client.post(path, json=report(POLR, f"r{i}", "ns", fail=i % 3))
        assert r.status_code == 201, r.text
    tp = TopicPartition(settings.changes_topic, 0)
    consumer = clientconfig.consumer(settings.kafka_bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await consumer.start()
    await admin.start()
    try:
        end = (await consumer.end_offsets([tp]))[tp]
        assert end >= 80

        async def committed() -> int:
            offsets = await admin.list_consumer_group_offsets(settings.app_id, partitions=[tp])
            return offsets[tp].offset if tp in offsets else -1
        # Faust commits every 2 s; caught up, only the last marker is after it
        async with asyncio.timeout(20):
            while (offset := await committed()) < end - 1:
                await asyncio.sleep(0.2)
        assert offset <= end
    finally:
        await consumer.stop()
        await admin.close()
