"""The embedded single-node broker takes the committer's back-to-back
transactions without a retry. With Kafka's server-side verification of
transactional produce (KIP-890 part 1) a produce that reaches the partition
while the coordinator is still completing the previous transaction is
answered NOT_ENOUGH_REPLICAS (the error older clients retry), so aiokafka
logged ``NotEnoughReplicasError, retrying`` dozens of times a minute under
load and each such write waited its retry backoff."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from pipeline.kafka import client as kafka
from pipeline.settings import Settings

pytestmark = pytest.mark.integration


async def test_back_to_back_transactions_are_never_retried(
        make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings()
    bootstrap = settings.kafka_bootstrap
    await kafka.ensure_topics(settings, bootstrap)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                transactional_id=f"txn-{uuid.uuid4().hex[:8]}")
    await producer.start()
    caplog.set_level(logging.WARNING, logger="aiokafka")
    try:
        requests = TopicPartition(settings.requests_topic, 0)
        # the topics were just made: a first produce may meet a partition
        # whose leader the broker is still electing (NotLeaderForPartition)
        async with producer.transaction():
            await producer.send(settings.changes_topic, b"warm", partition=0)
            await producer.send(settings.replies_topic, b"warm", partition=0)
        caplog.clear()
        for i in range(600):
            # as the committer: changes, their replies, the requests' offset
            async with producer.transaction():
                for _ in range(i % 3):
                    await producer.send(settings.changes_topic, b"%d" % i, partition=0)
                await producer.send(settings.replies_topic, b"%d" % i, partition=0)
                await producer.send_offsets_to_transaction(
                    {requests: OffsetAndMetadata(i + 1, "")}, settings.committer_group)
    finally:
        await producer.stop()
    retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retried == []
