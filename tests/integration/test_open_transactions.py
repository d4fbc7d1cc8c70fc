"""A transaction left open in the change log holds every reader of committed
records back; a committer taking over waits for it, and when it waits in vain
says whose it is and how an operator aborts it (DescribeProducers and
DescribeTransactions, against the real broker)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from pipeline import kafka
from pipeline.settings import Settings
from pipeline.transactions import PartitionTransactions

pytestmark = pytest.mark.integration


async def test_an_open_transaction_is_named_with_its_remedy(
        make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    bootstrap = settings.kafka_bootstrap
    await kafka.ensure_topics(settings, bootstrap)
    stray_id = f"stray-{uuid.uuid4().hex[:8]}"
    stray = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=stray_id,
                             transaction_timeout_ms=120_000)
    await stray.start()
    try:
        await stray.begin_transaction()
        await stray.send_and_wait(settings.changes_topic, b"{}", partition=0)
        tp = TopicPartition(settings.changes_topic, 0)
        async with PartitionTransactions(bootstrap, tp) as partition:
            view = await partition.coordinator_view(stray_id)
            assert view is not None and view.state == "Ongoing"
            assert (settings.changes_topic, 0) in view.partitions
            [producer] = await partition.producers()
            assert producer.producer_id == view.producer_id and producer.txn_start_offset == 0
            assert await partition.coordinator_view(settings.committer_transactional_id) is None

        with pytest.raises(kafka.OpenTransaction) as waited:
            await kafka.wait_no_open_transactions(settings, bootstrap, timeout=1)
        message = str(waited.value)
        assert f"producer {view.producer_id} epoch {view.producer_epoch}, open since offset 0" \
            in message
        assert f"its coordinator knows no {settings.committer_transactional_id}" in message
        assert (f"kafka-transactions.sh --bootstrap-server {bootstrap} abort --topic"
                f" {settings.changes_topic} --partition 0 --start-offset 0") in message

        await stray.abort_transaction()
        await kafka.wait_no_open_transactions(settings, bootstrap, timeout=30)
    finally:
        await stray.stop()
