"""The embedded single-node broker runs Kafka's server-side verification of
transactional produce (KIP-890 part 1), as Kafka does by default. A produce
that reaches the partition while the coordinator is still completing the
previous transaction (one that carried consumer offsets, as the committer's
topic path does) is answered NOT_ENOUGH_REPLICAS, which aiokafka retries
after the producer's backoff: the committer's pattern on it commits every
transaction, and each retry is counted in /metrics, never logged."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from pipeline.commit.service import COMMITTER_RETRY_BACKOFF_MS
from pipeline.kafka import retries, topicadmin
from pipeline.observe import metrics
from pipeline.settings import Settings
from tests.kafka import committed

pytestmark = pytest.mark.integration


def _retried() -> float:
    return metrics.KAFKA_RETRIES.labels("NotEnoughReplicas")._value.get()  # type: ignore[no-any-return]


async def test_back_to_back_transactions_commit_and_their_retries_are_counted(
        make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings()
    bootstrap = settings.kafka_bootstrap
    await topicadmin.ensure_topics(settings, bootstrap)
    retries.count_retries()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                retry_backoff_ms=COMMITTER_RETRY_BACKOFF_MS,
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
        before = _retried()
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
    logged = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert logged == []
    print(f"NOT_ENOUGH_REPLICAS retried {_retried() - before:g} times in 600 transactions")
    # every transaction committed: its reply is there to a committed reader
    values = [r.value for r in await committed(bootstrap, settings.replies_topic)]
    assert values == [b"warm", *(b"%d" % i for i in range(600))], len(values)
