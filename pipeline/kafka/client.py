"""Kafka adapter: topic set-up, the Faust transport, consumers that read
committed records only, and reading the change log from where ClickHouse
stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAlreadyExistsError
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from faust.types import TP, FutureMessage, ProducerT

from pipeline.kafka import internals, transactions
from pipeline.kafka.offsets import Handed
from pipeline.kafka.tail import Tail
from pipeline.model import topics
from pipeline.model.messages import (
    PREVIOUS_HEADER,
    REQUEST_ID_HEADER,
    Change,
    DecodeError,
    change_headers,
)
from pipeline.model.objects import identity, object_key
from pipeline.model.topics import MAX_MESSAGE_BYTES
from pipeline.model.versions import Progress
from pipeline.runtime.logs import quiet
from pipeline.runtime.tasks import Turns
from pipeline.settings import Settings

log = logging.getLogger(__name__)

TRANSPORT_SCHEME = "reports-kafka"
#: Producer batches: records sent together share one batch up to this size
#: (aiokafka's default of 16 KiB holds two reports).
MAX_BATCH_BYTES = 1024 * 1024
#: The largest produce request: a report body may be several MiB.
MAX_REQUEST_BYTES = MAX_MESSAGE_BYTES
#: Every producer compresses its batches: report JSON shrinks several times
#: (more in a batch of similar reports), on disk and on the wire; the broker
#: keeps batches as they come (the topics' compression.type is "producer").
COMPRESSION = "zstd"
#: Consumers see only committed transactions: the committer publishes every
#: change in a transaction, and a fenced committer's are aborted.
ISOLATION = "read_committed"
#: How soon a transaction's first AddPartitionsToTxn is asked again when the
#: coordinator answers CONCURRENT_TRANSACTIONS: it is still writing the last
#: transaction's markers, which takes a millisecond or two here. aiokafka
#: waits a fixed 20 ms (its BACKOFF_OVERRIDE, no setting; Kafka's Java client
#: does the same), which every transaction begun right after another, that is
#: every transaction of a busy committer, would wait.
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.002
internals.set_concurrent_transactions_backoff(CONCURRENT_TRANSACTIONS_BACKOFF_S)
# (uvloop) a write on a connection already closed fails as a broken connection
internals.fail_closed_writes_as_broken_connections()

#: Where Kafka keeps consumer groups' offsets.
OFFSETS_TOPIC = "__consumer_offsets"
#: Where Kafka keeps transactions' state.
TRANSACTIONS_TOPIC = "__transaction_state"
#: How long the broker holds a fetch that finds no records.
IDLE_FETCH_WAIT_MS = 5000
#: How long a request to a broker may go unanswered before a client gives it
#: up and asks the cluster where to go: longer than a fetch is held
#: (IDLE_FETCH_WAIT_MS). aiokafka's default, 40 s, kept every write waiting
#: on a leader that had stopped (SIGSTOP) for as long as it stayed stopped,
#: although the cluster had moved its partitions after its session timeout
#: (9 s).
REQUEST_TIMEOUT_MS = 8000
#: ... for a client that sends no fetch: the committer's producer and the
#: clients of its take-over. A stopped broker keeps its connections open and
#: answers nothing; each request that went to it (a bootstrap picks a broker
#: at random) held a take-over for REQUEST_TIMEOUT_MS, three of them in a row.
QUICK_REQUEST_TIMEOUT_MS = 3000
#: How long a broker holds a fetch of a reader that writers wait on (a
#: take-over's read of the log's tail, the frontend's change-log cache, its
#: replies): shorter than QUICK_REQUEST_TIMEOUT_MS, which such a reader gives
#: up on a broker after.
TAIL_FETCH_WAIT_MS = 500
#: The committer's and the materializer's groups: a member is expelled after
#: this long without a heartbeat its coordinator saw (Kafka's default since
#: 3.0). With 10 s, a broker failover that took the group's coordinator
#: (9-16 s) expelled the committer just as it had taken over again, and the
#: rebalance and a second take-over cost 5 s more. A worker that is gone for
#: good loses its partitions after this; one started again under the same
#: REPORTS_INSTANCE_ID (static membership, as `up`) takes them back at once.
GROUP_SESSION_TIMEOUT_MS = 45000
#: How long a rebalance waits for members to join again: longer than a
#: batch in hand may take (the write timeout), shorter than a group
#: request may wait (aiokafka's 40 s: JoinGroup is answered once it is over).
GROUP_REBALANCE_TIMEOUT_MS = 20000
#: A consumer that works in batches anyway (the materializer, the agents)
#: fetches this much at a time, or what has arrived within BULK_FETCH_WAIT_MS.
BULK_FETCH_MIN_BYTES = 512 * 1024
BULK_FETCH_WAIT_MS = 400
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


def consumer(bootstrap: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer of the pipeline's topics (committed records only). A fetch
    is answered as soon as records arrive; the long wait only spares an idle
    system's broker."""
    options = {"fetch_max_wait_ms": IDLE_FETCH_WAIT_MS, **options}
    if "group_id" not in options:
        # a group's JoinGroup waits for every member to join again, on the
        # same timeout (aiokafka has no separate one): groups keep the default
        options.setdefault("request_timeout_ms", REQUEST_TIMEOUT_MS)
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                            isolation_level=ISOLATION, **options)


def follower(bootstrap: str, **options: Any) -> AIOKafkaConsumer:
    """A :func:`consumer` that writers wait on: a fetch pending on a leader
    that stopped answering (SIGSTOP) is given up after
    QUICK_REQUEST_TIMEOUT_MS, not REQUEST_TIMEOUT_MS, and asked of the
    partition's next leader (with 8 s, a write waited for two such fetches
    after Kafka had moved the partition)."""
    return consumer(bootstrap, request_timeout_ms=QUICK_REQUEST_TIMEOUT_MS,
                    fetch_max_wait_ms=TAIL_FETCH_WAIT_MS, **options)


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


class Unreachable(ConnectionError):
    """No Kafka broker answers at the bootstrap address."""


async def ensure_topics(settings: Settings, bootstrap: str) -> topics.Replication:
    """Create the pipeline's topics with their policies (``pipeline.model.topics``)
    and the replication the cluster allows (``topics.replication``), and bring
    the policies of existing ones up to date. Each has one partition: the
    change log's order is the resourceVersion order. Returns the replication,
    which Faust's own topics take too."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        with quiet("aiokafka"):
            await admin.start()
    except KafkaConnectionError as err:
        await admin.close()
        raise Unreachable(f"no Kafka broker answers at {bootstrap}") from err
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
        replicated = topics.replication(settings, brokers)
        wanted = topics.specs(settings, replicated)
        existing = set(await admin.list_topics())
        missing = [NewTopic(t.name, 1, replicated.factor, topic_configs=t.config)
                   for t in wanted if t.name not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
        present = [t for t in wanted if t.name in existing]
        if present:
            await _align_configs(admin, present)
            await _report_replicas(admin, [t.name for t in present], replicated.factor)
    finally:
        await admin.close()
    return replicated


async def _report_replicas(admin: AIOKafkaAdminClient, names: list[str], wanted: int) -> None:
    """Say which existing topics have fewer replicas than wanted: adding
    replicas moves data, an operator's decision (kafka-reassign-partitions.sh)."""
    fewer = []
    for topic in await admin.describe_topics(names):
        counts = {len(p["replicas"]) for p in topic["partitions"]}
        if counts and min(counts) < wanted:
            fewer.append(f"{topic['topic']} ({min(counts)})")
    if fewer:
        log.warning("topics with fewer than %d replicas: %s; add replicas with"
                    " kafka-reassign-partitions.sh", wanted, ", ".join(fewer))


async def _align_configs(admin: AIOKafkaAdminClient, specs: list[topics.TopicSpec]) -> None:
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, t.name) for t in specs])
    current: dict[str, dict[str, str]] = {}
    for response in responses:
        for _err, _msg, _rtype, name, entries in response.resources:
            current[name] = {e[0]: e[1] for e in entries}
    stale = [t for t in specs
             if any(current.get(t.name, {}).get(k) != v for k, v in t.config.items())]
    if stale:
        log.info("updating the policies of topics %s", ", ".join(t.name for t in stale))
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t.name, t.config)
                                   for t in stale])


async def log_length(settings: Settings, bootstrap: str) -> int:
    """How many records the change log has ever had (its end offset)."""
    reader = consumer(bootstrap)
    await reader.start()
    try:
        tp = TopicPartition(settings.changes_topic, 0)
        return int((await reader.end_offsets([tp]))[tp])
    finally:
        await reader.stop()


async def append_history(settings: Settings, bootstrap: str,
                         changes: list[tuple[Change, float]]) -> None:
    """Append committed changes to an empty change log as the committer
    would have, each stamped with its own commit time (seconds): the history
    a demonstration starts from. Only while no committer runs: the
    committer takes its next resourceVersion from the log when it starts."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                max_request_size=MAX_REQUEST_BYTES, linger_ms=20,
                                compression_type=COMPRESSION)
    await producer.start()
    try:
        sent = []
        for change, ts in changes:
            sent.append(await producer.send(
                settings.changes_topic, change.encode(), partition=0,
                key=object_key(*identity(change.obj)).encode(), timestamp_ms=int(ts * 1000),
                headers=change_headers(change)))
        for ack in sent:
            await ack
    finally:
        await producer.stop()


def change_from_record(record: Any) -> Change | None:
    headers = dict(record.headers or ())
    request_id = headers.get(REQUEST_ID_HEADER, b"").decode()
    try:
        previous = int(headers.get(PREVIOUS_HEADER, b"0") or 0)
    except ValueError:
        previous = 0
    try:
        return Change.decode(record.value, request_id, previous)
    except DecodeError:
        log.warning("skipping undecodable change at offset %s", record.offset)
        return None


async def start_offset(tail: Tail, progress: Progress | None) -> tuple[int, int]:
    """First offset of the change log ``tail`` reads not yet materialized in
    ClickHouse, and the log's end; ``tail``'s partition is assigned to its
    consumer.

    ``progress`` names the last materialized record. When the log no longer
    holds it, either retention removed it (everything left is newer, and any
    change removed before it was materialized is lost: the log must outlast
    materializer outages) or the topic was recreated; reading starts at the
    log's beginning. Offsets are asked for before the partition is assigned:
    an assigned consumer has a fetch pending, and the broker answers a
    connection's requests in order.
    """
    begin, end = await tail.bounds()
    tail.assign()
    if progress is None:
        return begin, end
    if progress.offset < begin:
        log.error("the change log starts at offset %d, after the last materialized change"
                  " (%d): changes in between were removed before ClickHouse held them",
                  begin, progress.offset)
        return begin, end
    if progress.offset >= end:
        log.error("the change log ends at offset %d, before the last materialized change"
                  " (%d): was the topic recreated?", end, progress.offset)
        return begin, end
    tail.seek(progress.offset)
    records = await tail.read(timeout_ms=5000, max_records=1)
    if records and records[0].offset == progress.offset:
        change = change_from_record(records[0])
        if change is not None and change.resource_version == progress.resource_version:
            return progress.offset + 1, end
    log.error("the change log's record at offset %d is not the last materialized change"
              " (resourceVersion %d): was the topic recreated?", progress.offset,
              progress.resource_version)
    return begin, end


async def read_tail(settings: Settings, bootstrap: str, progress: Progress | None) -> list[Change]:
    """Every committed change in the log that ClickHouse may not have yet
    (read in a take-over: a broker that stopped answering holds it
    QUICK_REQUEST_TIMEOUT_MS, not REQUEST_TIMEOUT_MS)."""
    async with Tail(follower(bootstrap), TopicPartition(settings.changes_topic, 0)) as tail:
        offset, end = await start_offset(tail, progress)
        tail.seek(offset)
        out: list[Change] = []
        async for records in tail.to_end(end):
            for record in records:
                change = change_from_record(record)
                if change is not None:
                    out.append(change)
        return out
