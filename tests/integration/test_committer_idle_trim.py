"""The committer keeps what ClickHouse does not hold yet: every change past
the materializer's watermark. A burst of writes far ahead of the materializer
leaves all of it in memory when the burst ends; once the materializer has
caught up, an idle committer lets it go without waiting for another write."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.recovery import CommitterQueries
from pipeline.commit.service import CommitService
from pipeline.kafka import topicadmin
from pipeline.materialize.consumer import Materializer
from pipeline.model.messages import WriteRequest
from pipeline.model.resources import RESOURCES
from pipeline.model.storage import Refused
from pipeline.serving.writes import Writer
from pipeline.settings import Settings
from pipeline.worker import build_committer
from tests.helpers import report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
KEPT = 3


async def until(done: Callable[[], bool], timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not done():
            await asyncio.sleep(0.1)


async def test_an_idle_committer_lets_go_of_what_clickhouse_holds(
        make_settings: Callable[..., Settings], data_dir: Path) -> None:
    settings = make_settings(committer_cache_keys=KEPT)
    clickhouse = Connection(settings, data_dir=data_dir)
    await clickhouse.start()
    await topicadmin.ensure_topics(settings, settings.kafka_bootstrap)
    committer = build_committer(settings, CommitterQueries(clickhouse),
                                bootstrap=settings.kafka_bootstrap)
    service = CommitService(settings, committer, bootstrap=settings.kafka_bootstrap)
    writer = Writer(settings, bootstrap=settings.kafka_bootstrap)
    materializer = Materializer(settings, ChangeWrites(clickhouse),
                                bootstrap=settings.kafka_bootstrap)
    await service.start()
    await writer.start()
    try:
        # no materializer yet: ClickHouse holds none of these
        names = [f"r{i}" for i in range(12)]
        for name in names:
            reply = await writer.submit(WriteRequest(
                id=str(uuid.uuid4()), op="create", resource=POLR.id, namespace="ns",
                name=name, reply_to=settings.replies_topic, now="2026-12-06T00:00:00Z",
                obj=report(POLR, name, "ns")))
            assert reply.status is None
        assert len(committer._state) == len(names), "nothing may go before ClickHouse has it"

        await materializer.start()
        await until(lambda: len(committer._state) <= KEPT)
        kept = {key[2] for key in committer._state}
        assert kept == set(names[-KEPT:]), "the ones written last stay"

        # and what went is read back from ClickHouse when it is written again
        with pytest.raises(Refused, match="already exists"):
            await writer.submit(WriteRequest(
                id=str(uuid.uuid4()), op="create", resource=POLR.id, namespace="ns",
                name=names[0], reply_to=settings.replies_topic, now="2026-12-06T00:00:00Z",
                obj=report(POLR, names[0], "ns")))
    finally:
        await materializer.stop()
        await writer.stop()
        await service.stop()
        await clickhouse.close()
