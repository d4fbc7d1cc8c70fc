"""The embedded single-node broker keeps Kafka's server-side verification of
transactional produce (KIP-890 part 1) on, as the clusters users run do. A
produce that reaches a partition while the coordinator is still completing
the previous transaction is answered NOT_ENOUGH_REPLICAS, which aiokafka
retries after the producer's backoff: with the committer's (5 ms) the
committer's pattern of back-to-back transactions completes, and a retry is
counted in ``reports_kafka_retries_total``, never logged."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from launcher.broker import server_properties
from pipeline.commit.service import COMMITTER_RETRY_BACKOFF_MS
from pipeline.kafka import client as kafka
from pipeline.kafka import retries
from pipeline.observe import metrics
from pipeline.settings import Settings

pytestmark = pytest.mark.integration


def test_the_embedded_broker_keeps_transaction_verification_on() -> None:
    props = server_properties(port=9092, controller_port=9093, logs=Path("/tmp/logs"))
    assert "transaction.partition.verification.enable" not in props


async def test_back_to_back_transactions_retry_unlogged(
        make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings()
    bootstrap = settings.kafka_bootstrap
    await kafka.ensure_topics(settings, bootstrap)
    retries.count_retries()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                transactional_id=f"txn-{uuid.uuid4().hex[:8]}",
                                retry_backoff_ms=COMMITTER_RETRY_BACKOFF_MS)
    await producer.start()
    counted = metrics.KAFKA_RETRIES.labels("NotEnoughReplicas")
    caplog.set_level(logging.WARNING, logger="aiokafka")
    seconds = []
    try:
        requests = TopicPartition(settings.requests_topic, 0)
        # the topics were just made: a first produce may meet a partition
        # whose leader the broker is still electing (NotLeaderForPartition)
        async with producer.transaction():
            await producer.send(settings.changes_topic, b"warm", partition=0)
            await producer.send(settings.replies_topic, b"warm", partition=0)
        caplog.clear()
        before = counted._value.get()
        for i in range(600):
            started = time.perf_counter()
            # as the committer: changes, their replies, the requests' offset
            async with producer.transaction():
                for _ in range(i % 3):
                    await producer.send(settings.changes_topic, b"%d" % i, partition=0)
                await producer.send(settings.replies_topic, b"%d" % i, partition=0)
                await producer.send_offsets_to_transaction(
                    {requests: OffsetAndMetadata(i + 1, "")}, settings.committer_group)
            seconds.append(time.perf_counter() - started)
        retried = counted._value.get() - before
    finally:
        await producer.stop()
    assert not [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    print(f"NOT_ENOUGH_REPLICAS retries: {retried:.0f} in 600 transactions;"
          f" slowest {max(seconds) * 1000:.0f} ms")
