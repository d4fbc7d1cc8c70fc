"""The Faust application: the agents that commit writes and materialize them.

- ``commit`` consumes write requests, decides each against the current state
  (``pipeline.commit``), publishes the changes to the public change log, then
  answers on the requester's reply topic;
- ``materialize`` consumes the change log and writes it to ClickHouse.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

import faust

from pipeline import kafka
from pipeline.aggregator import Aggregator, Topics
from pipeline.commit import Decision
from pipeline.committer import Committer
from pipeline.messages import REQUEST_ID_HEADER, Change, DecodeError, WriteRequest
from pipeline.objects import identity, object_key
from pipeline.settings import Settings
from pipeline.store import ReportStore

log = logging.getLogger(__name__)
#: Batches of decided writes whose acknowledgements may be outstanding at once.
MAX_UNANSWERED = 16


class PipelineApp(faust.App):
    fetch_max_wait_ms: int = 500


def build_app(settings: Settings, store: ReportStore, *, bootstrap: str,
              data_dir: Path) -> PipelineApp:
    app = PipelineApp(
        settings.app_id,
        broker=f"{kafka.TRANSPORT_SCHEME}://{bootstrap}",
        store="memory://",
        web_enabled=False,
        datadir=str(data_dir / "faust"),
        topic_partitions=1,
        producer_acks=-1,
        producer_linger=0.0,
        producer_max_batch_size=kafka.MAX_BATCH_BYTES,
        producer_max_request_size=kafka.MAX_REQUEST_BYTES,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_commit_interval=0.5,
        consumer_auto_offset_reset="earliest",
    )
    app.fetch_max_wait_ms = settings.fetch_max_wait_ms
    # Table updates queue their changelog records in the producer buffer, and
    # Faust pauses every stream (the committer's too) while it holds more than
    # this; a batch of changes updates many keys at once.
    app.producer.buffer.max_messages = 20_000
    requests = app.topic(settings.requests_topic, key_serializer="raw", value_serializer="raw",
                         partitions=1, internal=False)
    changes = app.topic(settings.changes_topic, key_serializer="raw", value_serializer="raw",
                        partitions=1, internal=False)

    async def tail() -> list[Change]:
        return await kafka.read_tail(settings, bootstrap, await store.progress(
            settings.changes_topic))

    committer = Committer(store, tail)
    app.committer = committer  # type: ignore[attr-defined]

    def _revoked(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        committer.invalidate()

    app.on_partitions_revoked.connect(_revoked)

    async def answer(batch: list[WriteRequest], decisions: list[Decision],
                     acks: list[Any]) -> None:
        """Reply once the batch's changes are durable in the change log."""
        try:
            for ack in acks:
                await ack
            replies = []
            for req, d in zip(batch, decisions, strict=True):
                replies.append(await app.producer.send(
                    req.reply_to, req.id.encode(), d.reply.encode(), None, None, None))
            for r in replies:
                await r
        except Exception:
            # The committer's state may now be ahead of the log: rebuild it.
            # Unanswered writers time out with "outcome unknown".
            log.exception("publishing a batch of changes failed")
            committer.invalidate()

    @app.agent(requests, name="commit")
    async def commit(stream: Any) -> None:
        # Batches are decided one after another (the committer's state and the
        # resourceVersion counter move in log order) while earlier batches'
        # acknowledgements are still awaited: the agent never idles on the
        # broker's round trip.
        answering: deque[asyncio.Task[None]] = deque()
        async for events in stream.take_events(512, within=0.001):
            batch: list[WriteRequest] = []
            for event in events:
                try:
                    batch.append(WriteRequest.decode(event.value))
                except DecodeError:
                    log.warning("skipping undecodable request at offset %s",
                                event.message.offset)
            decisions = await committer.decide_batch(batch)
            acks = []
            for d in decisions:
                if d.change is not None:
                    acks.append(await changes.send(
                        key=object_key(*identity(d.change.obj)).encode(), value=d.change.encode(),
                        headers=[(REQUEST_ID_HEADER, d.change.request_id.encode())]))
            answering.append(asyncio.create_task(answer(batch, decisions, acks)))
            while answering and (answering[0].done() or len(answering) > MAX_UNANSWERED):
                await answering.popleft()
            await committer.trim()

    contributions = app.Table(f"{settings.topic_prefix}-contributions", default=None,
                              partitions=1, key_type=str, use_partitioner=True)
    activity = app.Table(f"{settings.topic_prefix}-activity", default=int, partitions=1,
                         key_type=str, use_partitioner=True).tumbling(
        settings.window_seconds, expires=timedelta(seconds=settings.window_seconds * 3))

    async def publish(topic: str, key: bytes, value: bytes) -> Any:
        return await app.producer.send(topic, key, value, None, None, None)

    aggregator = Aggregator(store=store, contributions=contributions, activity=activity,
                            publish=publish, topics=Topics(settings.result_events_topic,
                                                           settings.summaries_topic),
                            cluster=settings.cluster, window_seconds=settings.window_seconds)
    app.aggregator = aggregator  # type: ignore[attr-defined]

    @app.agent(changes, name="aggregate")
    async def aggregate_changes(stream: Any) -> None:
        async for events in stream.take_events(settings.materialize_batch,
                                               within=settings.materialize_interval):
            batch = []
            for e in events:
                change = kafka.change_from_record(e.message)
                if change is not None:
                    batch.append((change, float(e.message.timestamp)))
            await aggregator.process(batch)

    @app.agent(changes, name="materialize")
    async def materialize(stream: Any) -> None:
        async for events in stream.take_events(settings.materialize_batch,
                                               within=settings.materialize_interval):
            decoded = [kafka.change_from_record(e.message) for e in events]
            batch = [c for c in decoded if c is not None]
            if batch:
                last = events[-1].message
                await store.write_changes(batch, topic=last.topic, partition=last.partition,
                                          offset=last.offset)
    return app

