"""A transaction left open in the change log holds every reader of committed
records back; a committer taking over waits for it, and when it waits in vain
says whose it is and how an operator aborts it (DescribeProducers and
DescribeTransactions, against the real broker); a marker the committer writes
(WriteTxnMarkers) ends one."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from pipeline.kafka import clientconfig, topicadmin, txnchecks
from pipeline.kafka.transactions import Hanging, Transactions
from pipeline.settings import Settings

pytestmark = pytest.mark.integration


async def test_an_open_transaction_is_named_with_its_remedy(
        make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    bootstrap = settings.kafka_bootstrap
    await topicadmin.ensure_topics(settings, bootstrap)
    stray_id = f"stray-{uuid.uuid4().hex[:8]}"
    stray = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=stray_id,
                             transaction_timeout_ms=120_000)
    await stray.start()
    try:
        await stray.begin_transaction()
        await stray.send_and_wait(settings.changes_topic, b"{}", partition=0)
        tp = TopicPartition(settings.changes_topic, 0)
        async with Transactions(bootstrap) as admin:
            view = await admin.coordinator_view(stray_id)
            assert view is not None and view.state == "Ongoing"
            assert (settings.changes_topic, 0) in view.partitions
            [producer] = await admin.producers(tp)
            assert producer.producer_id == view.producer_id and producer.txn_start_offset == 0
            assert await admin.coordinator_view(settings.committer_transactional_id) is None

        with pytest.raises(txnchecks.OpenTransaction) as waited:
            await txnchecks.wait_no_open_transactions(settings, bootstrap, timeout=1)
        message = str(waited.value)
        assert f"producer {view.producer_id} epoch {view.producer_epoch}, open since offset 0" \
            in message
        assert f"its coordinator knows no {settings.committer_transactional_id}" in message
        assert (f"kafka-transactions.sh --bootstrap-server {bootstrap} abort --topic"
                f" {settings.changes_topic} --partition 0 --start-offset 0") in message

        await stray.abort_transaction()
        await txnchecks.wait_no_open_transactions(settings, bootstrap, timeout=30)
    finally:
        await stray.stop()


async def test_a_commit_marker_ends_a_transaction_as_committed(
        make_settings: Callable[..., Settings]) -> None:
    """What the committer writes for a transaction its coordinator committed
    but whose marker never came: readers of committed records see its records."""
    settings = make_settings()
    bootstrap = settings.kafka_bootstrap
    await topicadmin.ensure_topics(settings, bootstrap)
    stray = AIOKafkaProducer(bootstrap_servers=bootstrap,
                             transactional_id=f"stray-{uuid.uuid4().hex[:8]}",
                             transaction_timeout_ms=120_000)
    await stray.start()
    tp = TopicPartition(settings.changes_topic, 0)
    try:
        await stray.begin_transaction()
        await stray.send_and_wait(settings.changes_topic, b"kept", partition=0)
        async with Transactions(bootstrap) as admin:
            [producer] = await admin.producers(tp)
            await admin.end(Hanging(tp, producer, commit=True))
            assert [p.txn_start_offset for p in await admin.producers(tp)] == [-1]
        await txnchecks.wait_no_open_transactions(settings, bootstrap, timeout=10)
        reader = clientconfig.consumer(bootstrap, auto_offset_reset="earliest")
        await reader.start()
        try:
            reader.assign([tp])
            records = (await reader.getmany(tp, timeout_ms=5000)).get(tp, [])
        finally:
            await reader.stop()
        assert [r.value for r in records] == [b"kept"]
    finally:
        await stray.stop()
