"""A broker Kafka has fenced is dropped by every client of its cluster in the
process (pipeline.kafka.fencing): the requests waiting on a broker that
stopped answering fail at once and go to the new leaders. The cluster's own
answers are the three-broker fault tests' (tests/replicated/test_kafka_faults.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.client import AIOKafkaClient

from pipeline.kafka import internals
from pipeline.kafka.fencing import FencedBrokers, servers
from tests.unit.test_library_internals import as_started

CLUSTER = "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"


def test_a_bootstrap_list_is_its_servers_however_written() -> None:
    assert servers(CLUSTER) == servers(["127.0.0.1:9003", "127.0.0.1:9001 ", "127.0.0.1:9002"])
    assert servers("127.0.0.1:9001") != servers(CLUSTER)


@pytest.mark.asyncio
async def test_only_this_clusters_clients_drop_only_the_brokers_not_serving(
        caplog: pytest.LogCaptureFixture) -> None:
    internals.track_clients()
    watch = FencedBrokers(CLUSTER)
    ours = AIOKafkaClient(bootstrap_servers=CLUSTER)
    faust_style = AIOKafkaClient(bootstrap_servers=CLUSTER.split(","))
    another = AIOKafkaClient(bootstrap_servers="127.0.0.1:9101")  # its node 2 is not ours
    conns = [as_started(c, [1, 2, 3]) for c in (ours, faust_style, another)]
    try:
        with caplog.at_level(logging.WARNING, "pipeline.kafka.fencing"):
            watch.drop_all_but({1, 3})
            watch.drop_all_but({1, 3})
        assert internals.known_brokers(ours) == internals.known_brokers(faust_style) == {1, 3}
        assert internals.known_brokers(another) == {1, 2, 3}
        assert [len(c[2].closed) for c in conns] == [1, 1, 0]
        assert watch.fenced == {2}
        assert [r.getMessage() for r in caplog.records] == [
            "Kafka has fenced broker 2: its connections are dropped, and its partitions'"
            " requests go to their new leaders"]  # once, not every second
        watch.drop_all_but({1, 2, 3})  # it serves again
        assert watch.fenced == set()
    finally:
        for c in (ours, faust_style, another):
            c._sync_task.cancel()
    await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_a_client_whose_metadata_lacks_a_broker_back_asks_again() -> None:
    internals.track_clients()
    watch = FencedBrokers(CLUSTER)
    behind = AIOKafkaClient(bootstrap_servers=CLUSTER)
    current = AIOKafkaClient(bootstrap_servers=CLUSTER)
    conns = as_started(behind, [1, 3])  # its metadata from while 2 was fenced
    as_started(current, [1, 2, 3])
    try:
        watch.drop_all_but({1, 2, 3})
        assert behind._md_update_fut is not None  # it asks the cluster again
        assert current._md_update_fut is None
        assert conns[1].closed == conns[3].closed == []
    finally:
        for c in (behind, current):
            c._sync_task.cancel()
    await asyncio.sleep(0)
