"""Handing write requests to the committer and awaiting its replies: through
the requests and replies topics, or directly to a committer in this process
that owns the requests partition (``up``)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from pipeline.commit.service import NotDecided, OutcomeUnknown, Stalled
from pipeline.kafka import clientconfig
from pipeline.kafka.tail import Tail
from pipeline.model.messages import DecodeError, Reply, WriteRequest
from pipeline.model.objects import object_key
from pipeline.model.storage import Refused, Unavailable
from pipeline.model.topics import PARTITION
from pipeline.observe import metrics
from pipeline.runtime.tasks import cancel
from pipeline.settings import Settings

log = logging.getLogger(__name__)
#: A committer in this process: takes a request, or None when it cannot
#: decide it (it does not own the requests partition).
HandOver = Callable[[WriteRequest], "asyncio.Future[Reply] | None"]


class Writer:
    def __init__(self, settings: Settings, *, bootstrap: str, local: HandOver | None = None):
        self._settings = settings
        self._bootstrap = bootstrap
        self._local = local
        self._producer: AIOKafkaProducer | None = None
        self._tail: Tail | None = None
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._task: asyncio.Task[None] | None = None
        self._tp = TopicPartition(settings.replies_topic, 0)

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap, acks="all",
                                          enable_idempotence=True, linger_ms=0,
                                          max_batch_size=clientconfig.MAX_BATCH_BYTES,
                                          max_request_size=clientconfig.MAX_REQUEST_BYTES,
                                          compression_type=clientconfig.COMPRESSION,
                                          request_timeout_ms=clientconfig.REQUEST_TIMEOUT_MS)
        await self._producer.start()
        self._tail = Tail(clientconfig.follower(self._bootstrap), self._tp)
        await self._tail.start()
        self._tail.assign()
        await self._tail.seek_to_end()
        self._task = asyncio.create_task(self._run(), name="replies")

    async def stop(self) -> None:
        await cancel(self._task)
        for fut in self._pending.values():
            fut.cancel()
        if self._producer is not None:
            await self._producer.stop()
        if self._tail is not None:
            await self._tail.stop()

    async def _run(self) -> None:
        assert self._tail is not None
        async for records in self._tail.follow(what="replies", log=log):
            for record in records:
                rid = (record.key or b"").decode()
                fut = self._pending.get(rid)
                if fut is None or fut.done():
                    continue
                try:
                    fut.set_result(Reply.decode(record.value))
                except DecodeError as err:
                    fut.set_exception(err)

    async def submit(self, request: WriteRequest) -> Reply:
        """Ask the committer for a write; returns its successful reply or raises
        the error it decided (Refused), or Unavailable. The request is sent
        under an id of its own, its answer to this frontend's replies topic."""
        req = replace(request, id=str(uuid.uuid4()), reply_to=self._settings.replies_topic)
        reply = await self._hand_over(req)
        if reply is None:
            reply = await self._publish(req)
        if reply.status is not None:
            raise Refused(reply.status)
        return reply

    async def _hand_over(self, req: WriteRequest) -> Reply | None:
        """The reply of the committer in this process; None when it gave the
        request back undecided."""
        answer = self._local(req) if self._local is not None else None
        if answer is None:
            return None
        started = time.perf_counter()
        try:
            reply = await asyncio.wait_for(answer, self._settings.write_timeout)
        except NotDecided:
            return None
        except Stalled as err:
            raise Unavailable(f"cannot commit writes now: {err}", retry_after=1) from err
        except (TimeoutError, OutcomeUnknown) as err:
            raise _unconfirmed() from err
        metrics.stage("produce").observe(0.0)  # nothing to publish
        metrics.stage("commit").observe(time.perf_counter() - started)
        return reply

    async def _publish(self, req: WriteRequest) -> Reply:
        """The reply to ``req`` sent through the requests topic."""
        assert self._producer is not None
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[req.id] = fut
        try:
            started = time.perf_counter()
            try:
                async with asyncio.timeout(self._settings.write_timeout):
                    await self._producer.send_and_wait(
                        self._settings.requests_topic, req.encode(),
                        key=object_key(req.resource, req.namespace, req.name).encode(),
                        partition=PARTITION)
            except KafkaError as err:
                raise Unavailable(f"cannot publish the write: {err}", retry_after=1) from err
            except TimeoutError as err:
                raise _unconfirmed() from err  # the request may still arrive
            produced = time.perf_counter()
            try:
                reply = await asyncio.wait_for(fut, self._settings.write_timeout)
            except TimeoutError as err:
                raise _unconfirmed() from err
            metrics.stage("produce").observe(produced - started)
            metrics.stage("commit").observe(time.perf_counter() - produced)
        finally:
            self._pending.pop(req.id, None)
        return reply


def _unconfirmed() -> Unavailable:
    """A write Kafka has not confirmed in time: 503 with Retry-After, as
    every refusal while Kafka is unavailable. It may still be committed: a
    client trying again meets its result (409 AlreadyExists or Conflict, for
    a create or a write with its resourceVersion)."""
    return Unavailable("the write was not confirmed in time: Kafka is unavailable, and"
                       " the write may still be committed; read the object before"
                       " writing it again", retry_after=1)
