"""One committer at a time, on a real Kafka: a committer that another has taken
over from (after a rebalance or a long pause) is fenced by the shared
transactional.id, its publishes fail, and nothing it tried reaches the change
log or a writer; the new committer continues the resourceVersion sequence."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import ProducerFenced

from apiserver.writes import Writer
from pipeline.clickhouse.store import ReportStore
from pipeline.commit.service import CommitService, Fenced
from pipeline.kafka import client as kafka
from pipeline.model.messages import Change, Reply, WriteRequest
from pipeline.model.resources import RESOURCES
from pipeline.model.versions import EMPTY_RESOURCE_VERSION
from pipeline.settings import Settings
from pipeline.worker import build_committer
from tests.helpers import report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


@pytest.fixture
async def pipeline_parts(make_settings: Callable[..., Settings], data_dir: Path
                         ) -> AsyncIterator[tuple[Settings, ReportStore]]:
    settings = make_settings()
    store = ReportStore(settings, data_dir=data_dir)
    await store.start()
    await kafka.ensure_topics(settings, settings.kafka_bootstrap)
    yield settings, store
    await store.close()


def service(settings: Settings, store: ReportStore) -> CommitService:
    return CommitService(settings, build_committer(settings, store,
                                                   bootstrap=settings.kafka_bootstrap),
                         bootstrap=settings.kafka_bootstrap)


def create(settings: Settings, name: str) -> WriteRequest:
    return WriteRequest(id=str(uuid.uuid4()), op="create", resource=POLR.id, namespace="ns",
                        name=name, reply_to=settings.replies_topic, now="2026-11-22T00:00:00Z",
                        obj=report(POLR, name, "ns"))


async def committed(settings: Settings, topic: str) -> list[Any]:
    """Every committed record of ``topic``."""
    tp = TopicPartition(topic, 0)
    reader = kafka.consumer(settings.kafka_bootstrap)
    await reader.start()
    try:
        reader.assign([tp])
        end = (await reader.end_offsets([tp]))[tp]
        reader.seek(tp, (await reader.beginning_offsets([tp]))[tp])
        out: list[Any] = []
        while await reader.position(tp) < end:
            out.extend((await reader.getmany(tp, timeout_ms=1000)).get(tp, []))
        return out
    finally:
        await reader.stop()


async def decide_and_publish(svc: CommitService, requests: list[WriteRequest],
                             offset: int) -> None:
    decisions = await svc._committer.decide_batch(requests)
    await svc.publish(requests, decisions, next_offset=offset)


async def test_a_deposed_committer_cannot_publish(pipeline_parts: tuple[Settings, ReportStore]
                                                  ) -> None:
    settings, store = pipeline_parts
    first, second, third = (service(settings, store) for _ in range(3))
    await first.take_over()
    r1 = create(settings, "r1")
    await decide_and_publish(first, [r1], 1)

    # Taken over while unaware of it (a long pause): its next publish fails.
    await second.take_over()
    r2 = create(settings, "r2")
    with pytest.raises(Fenced):
        await decide_and_publish(first, [r2], 2)
    assert first.fenced == 1

    # Taken over in the middle of a transaction: its change is in the log,
    # uncommitted, and the commit fails; the broker aborts the transaction.
    r3 = create(settings, "r3")
    decisions = await second._committer.decide_batch([r3])
    producer = second._producer
    assert producer is not None and decisions[0].change is not None
    await producer.begin_transaction()
    await producer.send_and_wait(settings.changes_topic, decisions[0].change.encode(),
                                 key=b"r3")
    await third.take_over()
    with pytest.raises(ProducerFenced):
        await producer.commit_transaction()
    await second.release()

    r4 = create(settings, "r4")
    await decide_and_publish(third, [r4], 4)
    await third.release()

    changes = [Change.decode(r.value) for r in await committed(settings, settings.changes_topic)]
    assert [c.obj["metadata"]["name"] for c in changes] == ["r1", "r4"]
    first_rv = EMPTY_RESOURCE_VERSION + 1
    assert [c.resource_version for c in changes] == [first_rv, first_rv + 1], \
        "the last committer continues the sequence; the fenced ones spent nothing"
    replies = {Reply.decode(r.value).request_id
               for r in await committed(settings, settings.replies_topic)}
    assert replies == {r1.id, r4.id}


async def test_the_group_hands_the_partition_to_the_next_committer(
        pipeline_parts: tuple[Settings, ReportStore]) -> None:
    settings, store = pipeline_parts
    services = [service(settings, store), service(settings, store)]
    writer = Writer(settings, bootstrap=settings.kafka_bootstrap)
    await writer.start()
    try:
        for s in services:
            await s.start()

        async def write(name: str) -> Reply:
            return await writer.submit(op="create", resource=POLR.id, namespace="ns",
                                       name=name, now="2026-11-22T00:00:00Z",
                                       obj=report(POLR, name, "ns"))
        first = await write("before")
        owners = [s for s in services if s.committed]
        assert len(owners) == 1, "exactly one committer decided the write"
        await owners[0].stop()
        services.remove(owners[0])
        second = await write("after")
        assert services[0].committed == 1
        assert second.resource_version == first.resource_version + 1
    finally:
        await writer.stop()
        for s in services:
            await s.stop()
