"""One committer at a time, on a real Kafka: a committer that another has taken
over from (after a rebalance or a long pause) is fenced by the shared
transactional.id, its publishes fail, and nothing it tried reaches the change
log or a writer; the new committer continues the resourceVersion sequence."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import ProducerFenced

from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.recovery import CommitterQueries
from pipeline.commit.service import CommitService, Fenced, NotDecided, _Local
from pipeline.kafka import topicadmin
from pipeline.model.messages import Change, Reply, WriteRequest
from pipeline.model.resources import RESOURCES
from pipeline.model.storage import Refused
from pipeline.model.versions import EMPTY_RESOURCE_VERSION
from pipeline.serving.writes import Writer
from pipeline.settings import Settings
from pipeline.worker import build_committer
from tests.helpers import report
from tests.kafka import committed

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


@pytest.fixture
async def pipeline_parts(make_settings: Callable[..., Settings], data_dir: Path
                         ) -> AsyncIterator[tuple[Settings, CommitterQueries]]:
    settings = make_settings()
    clickhouse = Connection(settings, data_dir=data_dir)
    await clickhouse.start()
    await topicadmin.ensure_topics(settings, settings.kafka_bootstrap)
    yield settings, CommitterQueries(clickhouse)
    await clickhouse.close()


def service(settings: Settings, store: CommitterQueries) -> CommitService:
    return CommitService(settings, build_committer(settings, store,
                                                   bootstrap=settings.kafka_bootstrap),
                         bootstrap=settings.kafka_bootstrap)


def create(settings: Settings, name: str) -> WriteRequest:
    return WriteRequest(id=str(uuid.uuid4()), op="create", resource=POLR.id, namespace="ns",
                        name=name, reply_to=settings.replies_topic, now="2026-11-22T00:00:00Z",
                        obj=report(POLR, name, "ns"))


async def decide_and_publish(svc: CommitService, requests: list[WriteRequest],
                             offset: int) -> None:
    decisions = await svc._committer.decide_batch(requests)
    await svc.publish(requests, decisions, next_offset=offset)


async def test_a_deposed_committer_cannot_publish(pipeline_parts: tuple[Settings, CommitterQueries]
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

    changes = [Change.decode(r.value)
               for r in await committed(settings.kafka_bootstrap, settings.changes_topic)]
    assert [c.obj["metadata"]["name"] for c in changes] == ["r1", "r4"]
    first_rv = EMPTY_RESOURCE_VERSION + 1
    assert [c.resource_version for c in changes] == [first_rv, first_rv + 1], \
        "the last committer continues the sequence; the fenced ones spent nothing"
    replies = {Reply.decode(r.value).request_id
               for r in await committed(settings.kafka_bootstrap, settings.replies_topic)}
    assert replies == {r1.id, r4.id}


async def test_the_group_hands_the_partition_to_the_next_committer(
        pipeline_parts: tuple[Settings, CommitterQueries]) -> None:
    settings, store = pipeline_parts
    services = [service(settings, store), service(settings, store)]
    writer = Writer(settings, bootstrap=settings.kafka_bootstrap)
    await writer.start()
    try:
        for s in services:
            await s.start()

        async def write(name: str) -> Reply:
            return await writer.submit(WriteRequest(
                op="create", resource=POLR.id, namespace="ns", name=name,
                now="2026-11-22T00:00:00Z", obj=report(POLR, name, "ns")))
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


async def owning(svc: CommitService) -> None:
    """Until the group has given ``svc`` the requests partition."""
    async with asyncio.timeout(30):
        while not svc.owning:
            await asyncio.sleep(0.05)


def local(request: WriteRequest) -> _Local:
    return _Local(request, asyncio.get_running_loop().create_future(), time.time())


async def test_a_committer_in_process_takes_writes_without_the_topics(
        pipeline_parts: tuple[Settings, CommitterQueries]) -> None:
    """``up``'s frontend hands writes to the committer beside it: successes,
    refusals and dry runs are answered as through the topics, and no request
    or reply record is written; a writer beside a committer that does not own
    the partition goes through the topics to the one that does."""
    settings, store = pipeline_parts
    svc, other = service(settings, store), service(settings, store)
    await svc.start()
    await owning(svc)
    await other.start()
    writer = Writer(settings, bootstrap=settings.kafka_bootstrap, local=svc.submit)
    remote = Writer(settings, bootstrap=settings.kafka_bootstrap, local=other.submit)
    await writer.start()
    await remote.start()
    try:
        async def write(w: Writer, name: str, **kwargs: Any) -> Reply:
            return await w.submit(WriteRequest(**{
                "op": "create", "resource": POLR.id, "namespace": "ns", "name": name,
                "now": "2026-11-22T00:00:00Z", "obj": report(POLR, name, "ns"), **kwargs}))
        made = await write(writer, "a")
        assert made.status is None and made.resource_version > EMPTY_RESOURCE_VERSION
        with pytest.raises(Refused) as refused:
            await write(writer, "a")
        assert refused.value.status["reason"] == "AlreadyExists"
        stale = report(POLR, "a", "ns")
        stale["metadata"]["resourceVersion"] = str(made.resource_version - 1)
        with pytest.raises(Refused) as refused:
            await write(writer, "a", op="update", obj=stale)
        assert refused.value.status["reason"] == "Conflict"
        dry = await write(writer, "b", dry_run=True)
        assert dry.obj is not None and dry.obj["metadata"]["name"] == "b"
        assert svc.committed == 4, "one transaction each: the change; the offset alone for the rest"
        assert not await committed(settings.kafka_bootstrap, settings.requests_topic)
        assert not await committed(settings.kafka_bootstrap, settings.replies_topic)

        # not the owner: through the topics, decided by the owner
        assert other.submit(create(settings, "x")) is None
        through = await write(remote, "c")
        assert through.resource_version == made.resource_version + 1
        assert len(await committed(settings.kafka_bootstrap, settings.requests_topic)) == 1
        assert [Reply.decode(r.value).request_id
                for r in await committed(settings.kafka_bootstrap, settings.replies_topic)
                ] == [through.request_id]
    finally:
        await writer.stop()
        await remote.stop()
        await svc.stop()
        await other.stop()
    names = [Change.decode(r.value).obj["metadata"]["name"]
             for r in await committed(settings.kafka_bootstrap, settings.changes_topic)]
    assert names == ["a", "c"]


async def test_a_deposed_committer_cannot_answer_in_process(
        pipeline_parts: tuple[Settings, CommitterQueries]) -> None:
    """A refusal needs no change, yet a committer that another has taken over
    from does not answer it: its transaction (the offset alone) is fenced and
    the request is given back for the topics, as is a write's."""
    settings, store = pipeline_parts
    first, second = service(settings, store), service(settings, store)
    await first.take_over()
    first.owning = True
    wrote = local(create(settings, "a"))
    await first._process([], [wrote])
    assert (await wrote.answer).status is None

    await second.take_over()
    refusal = local(create(settings, "a"))  # AlreadyExists: a batch with no change
    with pytest.raises(Fenced):
        await first._process([], [refusal])
    with pytest.raises(NotDecided):
        await refusal.answer
    await second.release()
    names = [Change.decode(r.value).obj["metadata"]["name"]
             for r in await committed(settings.kafka_bootstrap, settings.changes_topic)]
    assert names == ["a"]
