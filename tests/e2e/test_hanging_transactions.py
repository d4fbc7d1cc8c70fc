"""A single Kafka broker killed while a committer's transaction is open comes
back with that transaction hanging: its coordinator times the transaction out
before the restarted broker listens, and drops the abort markers when the old
registration is fenced (every partition briefly leaderless). A committer
taking over ends it, as its coordinator decided, and writes go on."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from launcher.broker.singlenode import KafkaBroker
from pipeline.kafka import topicadmin, txnchecks
from pipeline.kafka.transactions import Transactions
from pipeline.model.resources import RESOURCES
from pipeline.settings import Settings
from tests.e2e.conftest import Up, client_for
from tests.helpers import collection_path, report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]


@pytest.mark.timeout(300)
async def test_a_committer_ends_what_a_broker_crash_left_hanging(tmp_path: Path) -> None:
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    broker = KafkaBroker(tmp_path / "kafka")
    await broker.start()
    up = None
    try:
        settings = Settings.from_env({}, kafka_bootstrap=broker.bootstrap, topic_prefix=prefix)
        await topicadmin.ensure_topics(settings, broker.bootstrap)
        # an earlier committer, mid-transaction on all three of its partitions
        earlier = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                   transactional_id=settings.committer_transactional_id,
                                   transaction_timeout_ms=1000)
        await earlier.start()
        await earlier.begin_transaction()
        await earlier.send_and_wait(settings.changes_topic, b"{}", partition=0)
        await earlier.send_and_wait(settings.replies_topic, b"{}", partition=0)
        await earlier.send_offsets_to_transaction(
            {TopicPartition(settings.requests_topic, 0): OffsetAndMetadata(1, "")},
            settings.committer_group)
        await earlier.stop()
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)
        await broker.stop()

        broker = KafkaBroker(tmp_path / "kafka")
        await broker.start()  # ready once it is unfenced
        changes = TopicPartition(settings.changes_topic, 0)
        async with Transactions(broker.bootstrap) as admin:
            view = await admin.coordinator_view(settings.committer_transactional_id)
            assert view is not None and view.state == "CompleteAbort", view
            [left] = [p for p in await admin.producers(changes) if p.txn_start_offset >= 0]
            assert left.producer_epoch < view.producer_epoch
        with pytest.raises(txnchecks.OpenTransaction):
            await txnchecks.wait_no_open_transactions(settings, broker.bootstrap, timeout=1)

        up = Up(tmp_path / "data", {"KAFKA_BOOTSTRAP": broker.bootstrap,
                                    "REPORTS_TOPIC_PREFIX": prefix})
        await asyncio.to_thread(up.wait_ready)
        async with client_for(up, timeout=60) as api:
            r = await api.post(collection_path(POLR, "after"), json=report(POLR, "a", "after"))
            assert r.status_code == 201, r.text + "".join(up.output[-50:])
        output = "".join(up.output)
        assert (f"aborted the hanging transaction of producer {left.producer_id} epoch"
                f" {left.producer_epoch} on {settings.changes_topic}-0") in output, output
        async with Transactions(broker.bootstrap) as admin:
            for tp in (changes, TopicPartition(settings.replies_topic, 0)):
                assert not [p for p in await admin.producers(tp) if p.txn_start_offset >= 0]
    finally:
        if up is not None:
            up.kill()
        await broker.stop()
