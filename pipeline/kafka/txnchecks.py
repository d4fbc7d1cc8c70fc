"""Kafka adapter: the transactions a committer's take-over checks: none left
open in the change log, and the committer's own hanging ones ended
(``pipeline.kafka.transactions``)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from pipeline.kafka import transactions
from pipeline.kafka.clientconfig import (
    OFFSETS_TOPIC,
    QUICK_REQUEST_TIMEOUT_MS,
    REQUEST_TIMEOUT_MS,
    consumer,
)
from pipeline.settings import Settings


async def wait_no_open_transactions(settings: Settings, bootstrap: str,
                                    timeout: float = 30.0) -> None:
    """Until no transaction is pending in the change log (its last stable
    offset reaches its end), so what a reader sees is all that will ever be
    committed before the next transaction."""
    tp = TopicPartition(settings.changes_topic, 0)
    committed = consumer(bootstrap, request_timeout_ms=QUICK_REQUEST_TIMEOUT_MS)
    everything = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                  request_timeout_ms=QUICK_REQUEST_TIMEOUT_MS)
    await committed.start()
    await everything.start()
    try:
        async with asyncio.timeout(timeout):
            while True:
                stable = (await committed.end_offsets([tp]))[tp]
                end = (await everything.end_offsets([tp]))[tp]
                if stable >= end:
                    return
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise OpenTransaction(await _open_transactions(settings, bootstrap, tp)) from None
    finally:
        await committed.stop()
        await everything.stop()


class OpenTransaction(TimeoutError):
    """A transaction stays open in the change log (its message says whose)."""


async def _open_transactions(settings: Settings, bootstrap: str, tp: TopicPartition) -> str:
    txn_id = settings.committer_transactional_id
    try:
        async with transactions.Transactions(
            bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS) as admin:
            producers = await admin.producers(tp)
            coordinator = await admin.coordinator_view(txn_id)
    except (KafkaError, transactions.TransactionAdminError) as err:
        return f"a transaction stays open on {tp.topic}-{tp.partition} ({err})"
    return transactions.explain(tp, bootstrap, producers, coordinator,
                                transactional_id=txn_id)


async def committer_view(settings: Settings, bootstrap: str
                         ) -> transactions.CoordinatorView | None:
    """The coordinator's view of the committer's transactional.id."""
    async with transactions.Transactions(
            bootstrap, request_timeout_ms=QUICK_REQUEST_TIMEOUT_MS) as admin:
        return await admin.coordinator_view(settings.committer_transactional_id)


async def end_hanging(settings: Settings, bootstrap: str,
                      before: transactions.CoordinatorView | None, *, producer_id: int,
                      epoch: int) -> list[transactions.Hanging]:
    """End the committer's hanging transactions (``transactions.hanging``) on
    every partition its transactions write: the change log, the replies and
    its group's offsets."""
    async with transactions.Transactions(
            bootstrap, request_timeout_ms=QUICK_REQUEST_TIMEOUT_MS) as admin:
        offsets = transactions.coordinator_partition(
            settings.committer_group, await admin.partitions(OFFSETS_TOPIC))
        found = {tp: await admin.producers(tp) for tp in (
            TopicPartition(settings.changes_topic, 0),
            TopicPartition(settings.replies_topic, 0),
            TopicPartition(OFFSETS_TOPIC, offsets))}
        ended = transactions.hanging(found, before, producer_id=producer_id, epoch=epoch)
        for h in ended:
            await admin.end(h)
        return ended
