"""The Faust application: the agents that follow the change log.

- ``aggregate`` keeps exact counts per namespace and policy and windows of
  activity, published to the public topics and ClickHouse's trend tables.

The committer (``pipeline.commit.service``) and the materializer
(``pipeline.materialize.consumer``) run beside them in the same worker process, each
on a consumer of its own: the committer needs a Kafka transaction per batch,
and the materializer keeps its position in ClickHouse, beside what it wrote,
which Faust's agents do not give.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import faust

from pipeline.aggregate import counts as aggregate
from pipeline.aggregate.agent import AggregateStore, Aggregator, Topics
from pipeline.clickhouse.recovery import CommitterQueries
from pipeline.commit.state import Committer
from pipeline.kafka import changelog, clientconfig, tablerecovery, transport
from pipeline.model import topics
from pipeline.model.messages import Change
from pipeline.model.topics import PARTITION
from pipeline.model.versions import Progress
from pipeline.runtime.tasks import Turns
from pipeline.settings import Settings

log = logging.getLogger(__name__)
#: Every current count is published again this often (the summaries topic
#: deletes records older than its retention, days at least).
SUMMARIES_REFRESH_SECONDS = 24 * 3600.0


def build_committer(settings: Settings, store: CommitterQueries, *, bootstrap: str) -> Committer:
    async def tail(after: Progress | None) -> list[Change]:
        return await changelog.read_tail(settings, bootstrap, after)
    return Committer(store, tail, topic=settings.changes_topic,
                     max_keys=settings.committer_cache_keys)


class Table(faust.Table):  # type: ignore[misc]
    """A Faust table whose changelog records can be waited for: the aggregate
    agent acknowledges a batch of changes, letting Faust commit the offsets
    past them, only once Kafka holds what the batch did to its tables (Faust
    itself commits offsets without waiting for them, so a crash in between
    would lose those updates for good)."""

    def send_changelog(self, *args: Any, **kwargs: Any) -> Any:
        sent = super().send_changelog(*args, **kwargs)
        self.__dict__.setdefault("_unconfirmed", []).append(sent)
        return sent

    def partition_for_key(self, key: Any) -> int:
        # Every table has the one partition: asked, Faust's producer would hash
        # each key (murmur2, in Python) to find it, for every record of a batch.
        return PARTITION

    def unconfirmed(self) -> list[Awaitable[Any]]:
        """The changelog records sent since the last call, each done once
        Kafka has acknowledged it."""
        return cast(list[Awaitable[Any]], self.__dict__.pop("_unconfirmed", []))


def build_app(settings: Settings, store: AggregateStore, *, bootstrap: str,
              data_dir: Path) -> faust.App:
    app = faust.App(
        settings.app_id,
        broker=f"{transport.TRANSPORT_SCHEME}://{bootstrap}",
        store="memory://",
        web_enabled=False,
        datadir=str(data_dir / "faust"),
        topic_partitions=1,
        topic_replication_factor=max(settings.replication_factor, 1),
        producer_acks=-1,
        producer_linger=0.0,
        producer_max_batch_size=clientconfig.MAX_BATCH_BYTES,
        producer_max_request_size=clientconfig.MAX_REQUEST_BYTES,
        producer_compression_type=clientconfig.COMPRESSION,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=2.0,
        broker_commit_interval=2.0,
        consumer_auto_offset_reset="earliest",
        consumer_group_instance_id=settings.instance_id or None,
        Table=Table,
        Topic=transport.Topic,
    )
    # Table updates queue their changelog records in the producer buffer, and
    # Faust pauses every stream while it holds more than this; a batch of
    # changes updates many keys at once.
    app.producer.buffer.max_messages = 20_000
    replicated = ({"min.insync.replicas": str(settings.min_insync_replicas)}
                  if settings.min_insync_replicas else {})
    changes = app.topic(settings.changes_topic, key_serializer="raw", value_serializer="raw",
                        partitions=1, internal=False)

    # their changelog topics are made with the system's (topicadmin); where
    # Faust makes one, it takes the same segments
    contributions_name = topics.contributions_table(settings)
    contributions = cast(Table, app.Table(
        contributions_name, default=None, partitions=1, key_type=str, use_partitioner=True,
        extra_topic_configs={**replicated, **topics.table_segments(settings,
                                                                   contributions_name)}))
    activity_name = topics.activity_table(settings)
    activity_table = cast(Table, app.Table(
        activity_name, default=int, partitions=1, key_type=str, use_partitioner=True,
        extra_topic_configs={**replicated, **topics.table_segments(settings, activity_name)}))
    # its memory is full once WINDOWS_KEPT windows have passed
    activity = activity_table.tumbling(
        settings.window_seconds,
        expires=timedelta(seconds=settings.window_seconds * topics.WINDOWS_KEPT))

    async def publish(topic: str, key: bytes, value: bytes) -> Any:
        return await app.producer.send(topic, key, value, PARTITION, None, None)

    aggregator = Aggregator(store=store, contributions=contributions, activity=activity,
                            publish=publish, topics=Topics(settings.result_events_topic,
                                                           settings.summaries_topic),
                            cluster=settings.cluster, window_seconds=settings.window_seconds)
    app.aggregator = aggregator  # type: ignore[attr-defined]
    # a recovery whose records Kafka deleted before it read them still ends
    app.add_dependency(tablerecovery.RecoveryPastDeletedRecords(app))

    @app.timer(interval=SUMMARIES_REFRESH_SECONDS)
    async def refresh_summaries() -> None:
        await aggregator.refresh()

    @app.agent(changes, name="aggregate")
    async def aggregate_changes(stream: Any) -> None:
        """Whatever changes have arrived (up to REPORTS_MATERIALIZE_BATCH) are
        aggregated together, at most every REPORTS_MATERIALIZE_INTERVAL; the
        last change of a burst waits that long, never for the next one."""
        manual = stream.noack()
        arrived = manual.channel.queue
        pending: list[Any] = []
        last = time.monotonic()

        async def acknowledge(sent: list[Awaitable[Any]], events: list[Any]) -> None:
            for record in sent:
                await record
            for e in events:
                await manual.ack(e)
        # A batch's table records are delivered while the next batch arrives and
        # is applied; one batch waits for them at a time.
        confirming: asyncio.Task[None] | None = None
        try:
            async for event in manual.events():
                pending.append(event)
                if len(pending) < settings.materialize_batch:
                    if not arrived.empty():
                        continue
                    wait = last + settings.materialize_interval - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                        if not arrived.empty():
                            continue
                batch = []
                turns = Turns()  # decoding a second's changes holds the event loop
                for e in pending:
                    if not aggregate.counted_key(e.message.key):
                        continue
                    await turns.take()
                    change = changelog.change_from_record(e.message)
                    if change is not None:
                        # Faust's message timestamps are in seconds
                        batch.append((change, float(e.message.timestamp)))
                await aggregator.process(batch)
                sent = contributions.unconfirmed() + activity_table.unconfirmed()
                if confirming is not None:
                    await confirming
                confirming = asyncio.create_task(acknowledge(sent, pending))
                pending = []
                last = time.monotonic()
        finally:
            if confirming is not None:
                confirming.cancel()
    return app

