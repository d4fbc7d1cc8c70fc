"""The fenced-broker watch (pipeline.kafka.fencing) against a real broker:
it learns which brokers serve from the cluster's own answer, and leaves the
clients of a cluster whose brokers all serve alone. What it drops when a
broker stops answering is the three-broker tier's
(tests/replicated/test_kafka_faults.py, the SIGSTOP fault)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from pipeline.kafka import internals
from pipeline.kafka.fencing import FencedBrokers

pytestmark = pytest.mark.integration


async def test_the_watch_asks_the_cluster_and_drops_no_broker_that_serves(kafka: str) -> None:
    watch = FencedBrokers(kafka, every=0.05)
    await watch.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)  # made after: tracked
    await admin.start()
    try:
        async with asyncio.timeout(30):
            while not watch.serving:
                await asyncio.sleep(0.05)
        assert watch.serving == {int(b["node_id"]) for b in
                                 (await admin.describe_cluster())["brokers"]}
        client = next(c for c in internals.clients()
                      if internals.known_brokers(c) and c is not watch._client)
        before = internals.known_brokers(client)
        await asyncio.sleep(0.3)  # several rounds
        assert internals.known_brokers(client) == before
        assert watch.fenced == set()
    finally:
        await admin.close()
        await watch.stop()
