"""The counts a restarted aggregate agent writes first carry the version of the
last change it applied: they replace the rows of an earlier batch lost in the
crash, and the rows of a later change replace them, wherever the materializer
(a reader of its own) happens to be."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from pipeline.aggregate import counts as aggregate
from pipeline.aggregate.agent import Aggregator, Topics
from pipeline.clickhouse.aggregates import AggregateWrites
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import Connection
from pipeline.kafka import topicadmin
from pipeline.model import objects
from pipeline.model.messages import Change
from pipeline.model.resources import RESOURCES
from tests.helpers import report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


async def counts(analytics: AnalyticsQueries) -> list[tuple[Any, ...]]:
    _, rows = await analytics.analytics("SELECT namespace, policy, pass, fail, resource_version"
                                    " FROM policy_counts FINAL ORDER BY policy")
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("materialized", [0, 20])
async def test_counts_after_a_restart_carry_the_last_applied_version(
        make_settings, data_dir: Path, kafka: str, materialized: int) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings()
    await topicadmin.ensure_topics(settings, kafka)
    clickhouse = Connection(settings, data_dir=data_dir)
    await clickhouse.start()
    store, analytics = AggregateWrites(clickhouse), AnalyticsQueries(clickhouse)
    producer = AIOKafkaProducer(bootstrap_servers=kafka)
    await producer.start()
    try:
        if materialized:  # the materializer is ahead of the agent
            obj = report(POLR, "other", "ns")
            await ChangeWrites(clickhouse).write_changes(
                [Change("ADDED", obj, materialized)], topic=settings.changes_topic, partition=0,
                offset=40)
        # before the crash: rows of the batch that ended at 7 (one failure) ...
        await store.write_policy_counts([[settings.cluster, "ns", "p", 0, 1, 0, 0, 0, 7,
                                          datetime.now(UTC)]])
        # ... and the table records of the next batch, which made it pass at 9
        applied = aggregate.Applied(9, "ns", {("p", "r", "Pod/ns/a"): "pass"})
        contributions = {objects.object_key(POLR, "ns", "a"): applied.to_json()}

        async def publish(topic: str, key: bytes, value: bytes) -> Any:
            return await producer.send(topic, value, key=key)
        aggregator = Aggregator(store=store, contributions=contributions, activity=None,
                                publish=publish, topics=Topics(settings.result_events_topic,
                                                               settings.summaries_topic),
                                cluster=settings.cluster, window_seconds=60)
        await aggregator.process([])  # nothing to apply: the agent is not ready yet
        assert await counts(analytics) == [("ns", "p", 0, 1, 7)]
        await aggregator._ready(10)  # the first change after the restart is at 10
        assert await counts(analytics) == [("ns", "p", 1, 0, 9)]
        # a later change's rows replace them
        await store.write_policy_counts([[settings.cluster, "ns", "p", 0, 0, 0, 0, 0, 12,
                                          datetime.now(UTC)]])
        assert await counts(analytics) == [("ns", "p", 0, 0, 12)]
    finally:
        await producer.stop()
        await analytics.close()
        await clickhouse.close()
