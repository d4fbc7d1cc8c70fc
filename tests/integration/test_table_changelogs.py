"""The aggregation agent's tables' changelogs are made, and an older one
(Faust's own, in Kafka's default segments) is brought up to date, with
segments that close: Kafka compacts and deletes nothing else, and the agent
reads a changelog back whole whenever it starts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from pipeline.kafka import topicadmin
from pipeline.model import topics
from pipeline.settings import Settings

pytestmark = pytest.mark.integration


async def test_table_changelogs_roll_their_segments(
        make_settings: Callable[..., Settings], kafka: str) -> None:
    settings = make_settings(window_seconds=30)
    contributions = topics.changelog_topic(settings, topics.contributions_table(settings))
    activity = topics.changelog_topic(settings, topics.activity_table(settings))
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        # as Faust made it before: compacted, in Kafka's default segments
        await admin.create_topics([NewTopic(contributions, 1, 1,
                                            topic_configs={"cleanup.policy": "compact"})])
        async with asyncio.timeout(10):
            while contributions not in await admin.list_topics():
                await asyncio.sleep(0.1)
        await topicadmin.ensure_topics(settings, kafka)
        # a broker takes a policy from the controller's log a moment later
        async with asyncio.timeout(10):
            while (config := await topicadmin.topic_configs(
                    admin, (contributions, activity)))[contributions].get(
                    "segment.bytes") != str(topics.TABLE_SEGMENT_BYTES):
                await asyncio.sleep(0.1)
    finally:
        await admin.close()
    assert config[contributions]["cleanup.policy"] == "compact"
    assert config[contributions]["segment.ms"] == str(topics.HOUR_MS)
    assert config[contributions]["segment.bytes"] == str(topics.TABLE_SEGMENT_BYTES)
    assert config[activity]["cleanup.policy"] == "compact,delete"
    assert config[activity]["retention.ms"] == str(topics.activity_retention_ms(settings))
    assert config[activity]["segment.ms"] == "30000"
    assert config[activity]["segment.bytes"] == str(topics.TABLE_SEGMENT_BYTES)
