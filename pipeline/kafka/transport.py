"""Kafka adapter: the Faust transport the agents run on (``reports-kafka://``):
a consumer that reads committed records only and commits past what its agents
have processed, a producer whose flush sends what was queued when it began,
and topics whose records go to the started producer directly."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from faust.types import TP, FutureMessage, ProducerT

from pipeline.kafka import internals
from pipeline.kafka.clientconfig import (
    BULK_FETCH_MIN_BYTES,
    BULK_FETCH_WAIT_MS,
    ISOLATION,
)
from pipeline.kafka.offsets import Handed
from pipeline.runtime.tasks import Turns

log = logging.getLogger(__name__)

#: The scheme of the app's broker URL that picks this transport.
TRANSPORT_SCHEME = "reports-kafka"
#: Records the Faust consumer hands to its streams before it lets the event
#: loop run something else (Faust's own figure).
DRAIN_YIELD_EVERY = 100


class ReadCommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust reads committed records only in its own exactly-once mode; the
    change log is written by the transactional committer, so the agents read
    it that way always."""

    def _create_worker_consumer(self, transport: Any) -> AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        internals.set_fetching(consumer, isolation_level=ISOLATION,
                               fetch_min_bytes=BULK_FETCH_MIN_BYTES,
                               fetch_max_wait_ms=BULK_FETCH_WAIT_MS)
        return consumer


class ReadCommittedConsumer(faust_aiokafka.Consumer):
    """Faust's consumer, committing an acknowledged topic's offset only past
    records its agent has processed (``pipeline.kafka.offsets``).

    Faust clears its streams' queues whenever it resumes the flow of records
    (during recovery, after a rebalance), dropping records read but not yet
    taken by the agent, and it does not always read them again: a restarted
    worker lost changes that way. So every resumption reads the acknowledged
    topics again from the committed offset, which never passes a record still
    out (the agent applies a change it has seen before only once)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handed: defaultdict[TP, Handed] = defaultdict(Handed)

    def _new_consumer_thread(self) -> ReadCommittedConsumerThread:
        return ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _new_offset(self, tp: TP) -> int | None:
        """Faust's own counts the acknowledged offsets from the committed one up
        to the first missing, filling in the offsets no message takes
        (transaction markers, aborted records) from the gaps it notes while
        reading. Each gap it notes ends with the offset of the message after
        it, already acknowledged; counted twice, it ends the count. On the
        change log, where every transaction ends with a marker, the committed
        offset so moved two offsets a commit: the group's lag grew with the
        log, a restart re-read all of it, and the acknowledged offsets piled up
        in memory, sorted again at every commit (faust-streaming/faust#606)."""
        acked = self._acked[tp]
        if not acked:
            return None
        offset = self._handed[tp].commit_point(acked, self._committed_offset.get(tp))
        acked.clear()
        self._acked_index[tp].clear()
        return offset

    def resume_flow(self) -> None:
        super().resume_flow()
        self._rewinding = asyncio.ensure_future(self._read_again())

    async def _read_again(self) -> None:
        assigned = self.assignment()
        for tp in [tp for tp in self._handed if tp not in assigned]:
            del self._handed[tp]  # its next owner reads it
        offsets = {tp: self._committed_offset.get(tp) or 0 for tp in assigned
                   if self.app.topics.acks_enabled_for(tp.topic)}
        if not offsets:
            return
        try:
            # on the consumer's own thread: Faust's ``seek`` changes the
            # consumer from the caller's, racing its fetcher (a KeyError
            # there stopped the agent's reading for good)
            await self.seek_wait(offsets)
        except (KafkaError, TimeoutError) as err:  # no longer assigned: its next owner reads it
            log.warning("reading %s again from the committed offsets failed: %r", offsets, err)

    async def _drain_messages(self, fetcher: Any) -> None:
        """Faust's loop from fetched records to the agents' streams, handing a
        record straight to its streams' queues while they have room.

        Faust's own hands each record over inside ``wait_first``, racing three
        events (stop, crash, flow suspended): four tasks and an ``asyncio.wait``
        a record, two or three turns of the event loop. Under the frontend's
        load a turn takes milliseconds, and the aggregate agent received ~260
        changes a second while the log grew by ~550. A record whose hand-over
        can wait (a queue full, flow suspended for a rebalance) still goes
        Faust's way, so stopping never waits on it. Gaps between offsets are
        not noted: ``_new_offset`` does not need them."""
        callback = self.callback
        getmany = self.getmany
        consumer_stopped = internals.stopped(self)
        fetcher_stopped = internals.stopped(fetcher)
        flow_suspended = self.suspend_flow.is_set
        flow_active = self.app.flow_control.is_active
        channels = internals.channels_by_topic(self.app)
        read_offset = self._read_offset
        commit_every = self._commit_every
        acked = self.app.topics.acks_enabled_for
        committed = self._committed_offset
        out = self._handed
        handed = 0
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                self.diag.set_flag(CONSUMER_FETCHING)
                records = getmany(timeout=1.0)
                # getmany may not give the loop a turn between fetches
                await asyncio.sleep(0)
                if self.should_stop:
                    break
                async for tp, message in records:
                    acknowledged = acked(tp.topic)
                    r_offset = read_offset[tp]
                    if r_offset is not None and message.offset < r_offset and not acknowledged:
                        continue  # read before a seek back (see resume_flow)
                    if commit_every is not None and self._n_acked >= commit_every:
                        self._n_acked = 0
                        await self.commit()
                    if acknowledged:
                        out[tp].hand(message.offset, committed.get(tp))
                    if flow_active() and not flow_suspended() and not any(
                            c.queue.full() for c in channels.get(message.topic, ())):
                        await callback(message)
                    else:
                        await self.wait_first(callback(message), self.suspend_flow.wait())
                    read_offset[tp] = message.offset
                    handed += 1
                    if handed >= DRAIN_YIELD_EVERY:
                        handed = 0
                        await asyncio.sleep(0)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)


class Topic(faust.Topic):
    """Faust's topic, whose records (the tables' changelog records among
    them) are handed to the started producer directly. Faust's asks for it
    through the app's ``maybe_start_producer``, a stampede guard that gives
    the event loop three turns a record: under the frontend's load a turn
    takes a millisecond or more, so the aggregation agent's table records
    (about 1,300 a batch) went out at a few hundred a second, the agent
    waited seconds a batch for them, and fell behind the change log."""

    async def _get_producer(self) -> ProducerT:
        producer = self.app.producer
        if producer.started and not self.app.in_transaction:
            return producer
        return await super()._get_producer()


class TurnTakingBuffer(ProducerBuffer):
    """Faust's producer buffer, sending what the tables queue in turns: with
    no turn given up a record, a batch's records would otherwise go out in one
    step of the event loop."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._turns = Turns()

    async def _send_pending(self, fut: FutureMessage) -> None:
        await super()._send_pending(fut)
        await self._turns.take()


class FlushSentProducer(faust_aiokafka.Producer):
    """Faust's producer, whose flush (before every offset commit) sends what
    its buffer held when the flush began rather than until the buffer is
    empty. The aggregation agent fills it with table changelog records all
    the time: under sustained writes Faust's flush ran 25-100 s, the
    commit's turn never came, and the consumer, awaiting that commit every
    ``broker_commit_every`` records, stopped handing the agent changes. What
    a commit needs is sent: the agent acknowledges a change only once its
    table records are delivered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        buffer = TurnTakingBuffer(loop=self.loop, beacon=self.beacon)
        buffer.app = self.app
        self.buffer = buffer

    async def flush(self) -> None:
        await self.buffer.flush_atmost(self.buffer.size)
        if self._producer is not None:
            await self._producer.flush()
        for transaction_producer in self._transaction_producers.values():
            await transaction_producer.flush()


class Transport(faust_aiokafka.Transport):
    Consumer = ReadCommittedConsumer
    Producer = FlushSentProducer


TRANSPORTS.aliases[TRANSPORT_SCHEME] = f"{__name__}:Transport"
