"""The committer's Kafka side: it consumes write requests as a member of the
committer group and, while it owns the requests partition, decides each batch
(``Committer``) and publishes its changes, its replies and the consumed offsets
in one Kafka transaction.

One committer at a time: every worker runs this service with the same
transactional.id. The group gives the partition to one member; that member's
producer, when it starts, fences every earlier producer of the id, and the
broker aborts whatever transaction such a producer left open. A deposed
committer (after a rebalance or a long pause) therefore cannot publish a
change, spend a resourceVersion or answer a writer: its commit fails, it drops
its state and goes back to waiting for the partition. Requests it had consumed
are decided again by the new owner, from the offsets the last committed
transaction recorded (exactly once).

A frontend in the committer's own process (``up``) hands it requests directly
(``submit``) rather than through the requests topic: a write then takes no
produce, no fetch and no reply record, and its batch's transaction holds only
its changes (or, for a batch of refusals, nothing but the requests offset
that proves this committer still owns the partition). Such a request is
answered when its transaction has committed; one this committer cannot decide
(it does not own the partition) is given back (``NotDecided``) for the
requests topic, and one whose transaction's outcome it does not know fails
``OutcomeUnknown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from pipeline.commit.decision import Decision
from pipeline.commit.state import Committer, IncompleteLog
from pipeline.kafka import clientconfig, internals, txnchecks
from pipeline.kafka.published import Entry, Published
from pipeline.kafka.transactions import CoordinatorView
from pipeline.model.messages import Change, DecodeError, Reply, WriteRequest, change_headers
from pipeline.model.objects import identity, object_key
from pipeline.model.topics import PARTITION
from pipeline.observe import metrics
from pipeline.runtime.tasks import cancel, cancelling
from pipeline.settings import Settings

log = logging.getLogger(__name__)
#: Most requests decided in one transaction.
MAX_BATCH = 512
#: How soon the committer's producer asks again when a step is refused.
COMMITTER_RETRY_BACKOFF_MS = 5


class Fenced(RuntimeError):
    """Another committer took over: this one may publish nothing more."""


class NotDecided(RuntimeError):
    """A request handed over in process was not decided (this worker does not
    own the requests partition, or the batch failed before its commit): send
    it through the requests topic."""


class OutcomeUnknown(RuntimeError):
    """A request handed over in process was in a transaction whose commit
    failed: it may or may not have been committed."""


class Stalled(RuntimeError):
    """The committer's batch has waited on Kafka for longer than
    :data:`STALL_SECONDS`: a request handed over now is refused undecided
    (writers are told at once to try again, rather than wait out their
    timeout behind it)."""


#: How long a failed producer may take to stop before it is left behind.
DROP_SECONDS = 2.0
#: The pause after a failed batch before the next try, the first and the longest.
RETRY_SECONDS = (0.05, 1.0)
#: How long a batch may wait on Kafka before new requests are refused. A
#: transaction takes milliseconds; a leader election a few seconds.
STALL_SECONDS = 3.0
#: How long a transaction's step may wait for Kafka before the committer
#: gives up its producer (a new one takes over). A broker lost is fenced
#: after its session (9 s by default) and its partitions led elsewhere;
#: until then the transaction log's writes, and a coordinator's on that
#: broker, wait for it. A new producer would wait for the same, after a take
#: over of seconds: with the write timeout (10 s) the committer gave up just
#: as Kafka recovered from the loss of its controller or coordinator. Its
#: writers are told 503 at the write timeout meanwhile; a step Kafka can
#: never complete ends the producer's sender, which fails it at once.
FAILOVER_SECONDS = 30.0


@dataclass(frozen=True)
class _Local:
    """A request handed over in process, its answer, and when (Unix seconds)."""

    request: WriteRequest
    answer: asyncio.Future[Reply]
    at: float


async def _pause_after(failed: int) -> None:
    """Before the batch after ``failed`` failed ones in a row: at once the
    first time (a failed batch usually waited out a leader election, which is
    over), then less and less often."""
    await asyncio.sleep(min(RETRY_SECONDS[-1], RETRY_SECONDS[0] * 2 ** failed))


class _Ownership(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, service: CommitService):
        self._service = service

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._service.release()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self._service.owning = bool(assigned)


class CommitService:
    def __init__(self, settings: Settings, committer: Committer, *, bootstrap: str,
                 published: Published | None = None):
        self._settings = settings
        self._committer = committer
        self._bootstrap = bootstrap
        #: where the changes this committer publishes go for readers in this process
        self._published = published
        self._tp = TopicPartition(settings.requests_topic, 0)
        self._changes = TopicPartition(settings.changes_topic, PARTITION)
        #: set when the producer's transaction has the change log's partition
        self._added = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()  # one batch at a time; a rebalance waits for it
        self._task: asyncio.Task[None] | None = None
        self._fetch: asyncio.Future[Any] | None = None
        #: The coordinator's view of the transactional.id before this worker's
        #: take-over changed it (a 1-tuple: the view may be None).
        self._before: tuple[CoordinatorView | None] | None = None
        self._local: list[_Local] = []
        self._arrived = asyncio.Event()
        #: since when (monotonic) the batch in hand has waited on Kafka (None:
        #: no batch is in hand; after a failed one, the next tries again and
        #: takes what is handed over meanwhile)
        self._waiting_since: float | None = None
        #: the requests partition's next offset as this committer last
        #: committed it (None: not known since it took over)
        self._next_offset: int | None = None
        self.owning = False
        #: Transactions committed and lost to fencing (for tests and metrics).
        self.committed = 0
        self.fenced = 0

    async def start(self) -> None:
        self._consumer = clientconfig.consumer(
            self._bootstrap, group_id=self._settings.committer_group,
            auto_offset_reset="earliest", max_poll_records=MAX_BATCH,
            session_timeout_ms=clientconfig.GROUP_SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=clientconfig.GROUP_REBALANCE_TIMEOUT_MS,
            heartbeat_interval_ms=3000,
            group_instance_id=self._settings.instance_id or None,
            max_partition_fetch_bytes=clientconfig.MAX_REQUEST_BYTES)
        await self._consumer.start()
        self._consumer.subscribe([self._tp.topic], listener=_Ownership(self))
        self._task = asyncio.create_task(self._run(), name="committer")

    async def stop(self) -> None:
        await cancel(self._task)
        if self._fetch is not None:
            self._fetch.cancel()
        await self.release()
        self._give_back(self._take_local(len(self._local)))
        if self._consumer is not None:
            await self._consumer.stop()

    async def release(self) -> None:
        """Give up ownership: after the batch in hand, drop the producer and
        everything decided from the state it saw."""
        async with self._lock:
            self.owning = False
            await self._drop_producer()

    def submit(self, request: WriteRequest) -> asyncio.Future[Reply] | None:
        """Hand ``request`` over in process; None when this worker does not
        own the requests partition (send it through the topic instead)."""
        if not self.owning or self._task is None or self._task.done():
            return None
        answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        stalled = self.stalled_for()
        if stalled > STALL_SECONDS:
            answer.set_exception(Stalled(f"Kafka has not completed the committer's last"
                                         f" transaction for {stalled:.0f} s"))
            return answer
        self._local.append(_Local(request, answer, time.time()))
        self._arrived.set()
        # its key's state, if ClickHouse has to be asked, read while the batch
        # in hand is in its transaction
        self._committer.prefetch((request,))
        return answer

    def stalled_for(self) -> float:
        """Seconds the committer has waited on Kafka without committing."""
        since = self._waiting_since
        return 0.0 if since is None else time.monotonic() - since

    def _take_local(self, most: int) -> list[_Local]:
        most = max(0, most)  # a batch already full takes none
        taken, self._local = self._local[:most], self._local[most:]
        if not self._local:
            self._arrived.clear()
        # a writer that stopped waiting (its timeout) gets no decision: its
        # write was not published, as its timeout told it might be
        return [x for x in taken if not x.answer.done()]

    @staticmethod
    def _give_back(local: list[_Local], error: type[Exception] = NotDecided) -> None:
        for x in local:
            if not x.answer.done():
                x.answer.set_exception(error())

    async def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        self._next_offset = None
        self._committer.invalidate()
        if producer is not None:
            # Bounded: stopping waits for the requests in flight, which wait
            # on brokers that may be gone; the next producer's InitProducerId
            # ends whatever transaction this one leaves open.
            with contextlib.suppress(KafkaError, TimeoutError):
                async with asyncio.timeout(DROP_SECONDS):
                    await producer.stop()

    async def take_over(self) -> None:
        """Start a producer with the committer's transactional.id (fencing any
        earlier one), end what an earlier one left hanging, wait until no
        transaction of an earlier one is pending in the change log, and
        recover the committer's state from it."""
        steps: list[tuple[str, float]] = []
        started = time.monotonic()

        def step(name: str) -> None:
            # each step's seconds, said in one line: where a slow take-over waited
            nonlocal started
            steps.append((name, time.monotonic() - started))
            started = time.monotonic()

        if self._before is None:
            # How the coordinator ended the earlier producer's last transaction
            # is known only until this one's InitProducerId; kept until a
            # take-over gets through.
            self._before = (await txnchecks.committer_view(self._settings, self._bootstrap),)
            step("coordinator's view")
        producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap, acks="all", enable_idempotence=True,
            transactional_id=self._settings.committer_transactional_id,
            transaction_timeout_ms=int(self._settings.write_timeout * 1000),
            # a transaction's steps refused while Kafka still writes the last
            # one's markers (CONCURRENT_TRANSACTIONS) are retried after this,
            # 100 ms by default, which the slowest writes waited for
            retry_backoff_ms=COMMITTER_RETRY_BACKOFF_MS, linger_ms=0,
            max_batch_size=clientconfig.MAX_BATCH_BYTES,
            max_request_size=clientconfig.MAX_REQUEST_BYTES,
            compression_type=clientconfig.COMPRESSION,
            request_timeout_ms=clientconfig.QUICK_REQUEST_TIMEOUT_MS)
        await producer.start()
        self._hook(producer)
        try:
            # The producer id and epoch (InitProducerId): this is the fencing step.
            await _alive(producer, internals.wait_for_producer_id(producer),
                         self._settings.write_timeout, "InitProducerId")
            step("InitProducerId")
            producer_id, epoch = internals.producer_identity(producer)
            for ended in await txnchecks.end_hanging(
                    self._settings, self._bootstrap, self._before[0],
                    producer_id=producer_id, epoch=epoch):
                log.warning("%s: its coordinator had finished it, but its marker never"
                            " reached the partition", ended)
            step("hanging transactions")
            await txnchecks.wait_no_open_transactions(self._settings, self._bootstrap)
            step("open transactions")
            await self._committer.recover()
            step("recovery")
            metrics.COMMITTER_RECOVERY_SECONDS.set(steps[-1][1])
        except BaseException:
            await producer.stop()
            raise
        self._before = None
        self._producer = producer
        log.info("this worker is the committer (transactional.id %s; %s)",
                 self._settings.committer_transactional_id,
                 ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps))

    async def _run(self) -> None:
        assert self._consumer is not None
        failed = 0  # batches failed in a row
        while True:
            try:
                records = await self._next()
                local = self._take_local(MAX_BATCH)
                if records or local:
                    # No fetch while this batch is decided and published: one
                    # would return with only the requests that had arrived by
                    # then, the first of the batch's time, and the rest would
                    # wait behind one more transaction. Resumed, the consumer
                    # fetches every request waiting by then.
                    self._consumer.pause(self._tp)
                    self._waiting_since = time.monotonic()
                    try:
                        async with self._lock:
                            await self._process(records, local)
                    finally:
                        self._waiting_since = None
                        with contextlib.suppress(IllegalStateError):
                            self._consumer.resume(self._tp)
                else:
                    # Idle: the state kept past ClickHouse's copy when the
                    # last batch went (a fill far ahead of the materializer:
                    # 40,000 reports and 630 MB of `up` at rest after 200,000)
                    # is let go once the materializer has caught up.
                    if self.owning and self._fetch is None:
                        # its fetch found nothing past what it has taken: no
                        # request waits (writes handed over in process leave
                        # the topic empty, and the lag would never be said)
                        metrics.CONSUMER_LAG.labels("committer").set(0)
                    try:
                        async with self._lock:
                            await self._committer.trim()
                    except Exception as err:  # asked again a second later
                        log.debug("trimming the committer's state failed: %s", err)
                failed = 0
            except asyncio.CancelledError:
                if cancelling():
                    raise
                log.error("committing a batch was cancelled from within, not by a stop;"
                          " retrying from the last commit")
                await _pause_after(failed)
                failed += 1
            except Fenced:
                log.warning("another committer took over; this one stands down")
            except txnchecks.OpenTransaction as err:
                log.error("cannot take over as the committer: %s", err)
            except Exception as err:
                if isinstance(err, KafkaError | IncompleteLog):  # said in full: no traceback
                    log.warning("committing a batch failed (%s); retrying from the last commit",
                                err)
                else:
                    log.exception("committing a batch failed; retrying from the last commit")
                await _pause_after(failed)
                failed += 1

    async def _next(self) -> list[Any]:
        """The requests the topic has for this committer, as soon as it has
        some or one is handed over in process (then perhaps none); within a
        second. One fetch is outstanding at a time, kept across calls: a
        cancelled one would leave its waiter with the consumer."""
        assert self._consumer is not None
        if self._fetch is None:
            self._fetch = asyncio.ensure_future(
                self._consumer.getmany(self._tp, timeout_ms=1000))
        if not self._local:
            arrived = asyncio.ensure_future(self._arrived.wait())
            try:
                await asyncio.wait((self._fetch, arrived), return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrived.cancel()
        if not self._fetch.done():
            return []
        fetch, self._fetch = self._fetch, None
        return list(fetch.result().get(self._tp, []))

    async def _process(self, records: list[Any], local: list[_Local]) -> None:
        if not self.owning:
            # revoked between fetch and now: the new owner decides these
            self._give_back(local)
            return
        if self._producer is None:
            assert self._consumer is not None
            try:
                await self.take_over()
                # the last transaction's offset, final now that the earlier
                # committer is fenced and its transactions ended (none: nothing
                # was ever decided)
                committed = await self._consumer.committed(self._tp)
            except BaseException:
                await self._drop_producer()
                if records:
                    self._consumer.seek(self._tp, records[0].offset)  # decided after a take-over
                self._give_back(local)
                raise
            if records and committed is not None and committed != records[0].offset:
                # decided by the earlier committer, or not yet
                records = [r for r in records if r.offset >= committed]
                if not records or records[0].offset != committed:
                    self._consumer.seek(self._tp, committed)
                    records = []
            self._next_offset = committed
        requests = []
        for record in records:
            try:
                requests.append(WriteRequest.decode(record.value))
            except DecodeError:
                log.warning("skipping undecodable request at offset %s", record.offset)
        replied = len(requests)  # these are answered on their reply topics
        requests.extend(x.request for x in local)
        if not requests and not records:
            return
        highwater = self._consumer.highwater(self._tp) if self._consumer else None
        if highwater is not None and records:
            metrics.CONSUMER_LAG.labels("committer").set(
                max(0, highwater - records[-1].offset - 1))
        committing = False
        try:
            # with the partitions of the replies to requests from the topic
            await self._begin({TopicPartition(r.reply_to, PARTITION) for r in requests[:replied]})
            # handed over while the partitions were added: they join this batch
            joined = self._take_local(MAX_BATCH - len(requests))
            local.extend(joined)
            requests.extend(x.request for x in joined)
            taken = time.time()
            decided = time.perf_counter()
            decisions = await self._committer.decide_batch(requests)
            published = time.perf_counter()
            metrics.COMMITTER_BATCH.observe(len(requests))
            committing = True
            await self.publish(requests, decisions, replied=replied,
                               next_offset=records[-1].offset + 1 if records else None)
            self._committer.confirm(decisions)
            _observe([r.timestamp / 1000 for r in records] + [x.at for x in local],
                     taken, published - decided, time.perf_counter() - published)
        except BaseException as err:
            # Nothing of this batch is visible (unless its commit failed
            # unseen): decide it again, from state recovered from the log.
            self._committer.invalidate()
            if records:
                await self._rewind(records[0].offset)
            unknown = committing and not isinstance(err, Fenced | asyncio.CancelledError)
            self._give_back(local, OutcomeUnknown if unknown else NotDecided)
            if not committing:
                await self._drop_producer()  # its transaction is aborted by the next producer
            raise
        for x, d in zip(local, decisions[replied:], strict=True):
            if not x.answer.done():
                x.answer.set_result(d.reply)
        await self._committer.trim()

    def _hook(self, producer: AIOKafkaProducer) -> None:
        """Learn when ``producer``'s transaction has the change log's partition
        (aiokafka tells no one: its transaction manager is told, here)."""
        def partition_added(tp: TopicPartition) -> None:
            if tp == self._changes:
                self._added.set()
        internals.on_partition_added(producer, partition_added)

    async def _begin(self, replies: set[TopicPartition]) -> None:
        """Begin the batch's transaction and wait until the change log's
        partition is in it, with the ``replies`` partitions (in the same
        request: added later, they would take a round trip of their own).
        That step (AddPartitionsToTxn) is the first of a transaction's three
        round trips, and the longest: the coordinator refuses it until the
        transaction before has its markers written. The batch is taken,
        decided and sent after it, so a request handed over meanwhile joins
        this transaction instead of waiting for the next. Raises Fenced if
        the producer failed (another committer took over)."""
        producer = self._producer
        assert producer is not None
        await producer.begin_transaction()
        self._added.clear()
        for tp in (self._changes, *replies):
            internals.add_partition(producer, tp)
        added = asyncio.ensure_future(self._added.wait())
        sender = internals.sender_task(producer)
        try:
            await asyncio.wait((added, sender), timeout=FAILOVER_SECONDS,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            added.cancel()
        if not self._added.is_set():
            if not sender.done():
                raise KafkaError(f"the committer's transaction could not begin: Kafka did not"
                                 f" add its partitions in {FAILOVER_SECONDS:g} s")
            failed = sender.exception() if not sender.cancelled() else None
            if isinstance(failed, ProducerFenced):
                self.fenced += 1
                raise Fenced(str(failed)) from failed
            raise KafkaError(f"the committer's transaction could not begin: {failed!r}")

    async def publish(self, requests: list[WriteRequest], decisions: list[Decision], *,
                      next_offset: int | None, replied: int | None = None) -> None:
        """One transaction: the batch's changes, the replies of its first
        ``replied`` requests (all by default; the rest were handed over in
        process), and the requests partition's next offset (None: the last
        committed one, recorded again only when nothing else is: a transaction
        of this producer is what proves it may answer). Raises Fenced if
        another committer took over."""
        producer = self._producer
        assert producer is not None
        replied = len(requests) if replied is None else replied
        sent: list[asyncio.Future[Any]] = []
        changes: list[tuple[bytes, Change]] = []
        try:
            if not internals.in_transaction(producer):
                await producer.begin_transaction()
            for d in decisions:
                if d.change is not None:
                    raw = d.change.encode()
                    changes.append((raw, d.change))
                    sent.append(await producer.send(
                        self._settings.changes_topic, raw,
                        key=object_key(*identity(d.change.obj)).encode(), partition=PARTITION,
                        headers=change_headers(d.change)))
            for req, d in zip(requests[:replied], decisions[:replied], strict=True):
                sent.append(await producer.send(req.reply_to, d.reply.encode(),
                                                key=req.id.encode(), partition=PARTITION))
            if next_offset is None and not sent:
                # none committed yet: nothing was ever decided from the topic
                next_offset = self._next_offset or 0
            if next_offset is not None:
                await _alive(producer, producer.send_offsets_to_transaction(
                    {self._tp: OffsetAndMetadata(next_offset, "")},
                    self._settings.committer_group), FAILOVER_SECONDS, "the requests' offset")
            await _alive(producer, producer.commit_transaction(), FAILOVER_SECONDS, "the commit")
            self.committed += 1
            if next_offset is not None:
                self._next_offset = next_offset
        except ProducerFenced as err:
            self.fenced += 1
            await self._drop_producer()
            raise Fenced(str(err)) from err
        except BaseException:
            await self._drop_producer()  # its transaction is aborted by the next producer
            raise
        finally:
            for fut in sent:  # a failed transaction fails every send: seen here
                fut.add_done_callback(_retrieve)
        if self._published is not None and changes:
            # the changes come first among the records sent
            self._published.add([Entry(fut.result().offset, raw, change)
                                 for fut, (raw, change) in zip(sent, changes, strict=False)])

    async def _rewind(self, first: int) -> None:
        """Back to the last committed offset of the requests partition (to
        ``first``, the failed batch's, when Kafka cannot say): the batch is
        decided again, never skipped."""
        assert self._consumer is not None
        try:
            committed = await self._consumer.committed(self._tp)
        except KafkaError:
            committed = None
        # not assigned any more: its next owner starts from the committed offset
        with contextlib.suppress(KafkaError, AssertionError, ValueError):
            self._consumer.seek(self._tp, first if committed is None else committed)


def _observe(arrived: list[float], taken: float, decide: float, publish: float) -> None:
    """A committed batch's times: per batch, and per write (each request waited
    from its publication or hand-over, ``arrived``, until ``taken``)."""
    metrics.labelled(metrics.COMMITTER_TRANSACTION_SECONDS, "decide").observe(decide)
    metrics.labelled(metrics.COMMITTER_TRANSACTION_SECONDS, "publish").observe(publish)
    queue, deciding, transaction = map(metrics.stage, ("queue", "decide", "transaction"))
    for at in arrived:
        queue.observe(max(0.0, taken - at))
        deciding.observe(decide)
        transaction.observe(publish)


async def _alive(producer: AIOKafkaProducer, step: Awaitable[Any], timeout: float,
                 what: str) -> Any:
    """``step`` of a transactional producer, failed with KafkaError when its
    sender stops or ``timeout`` passes first. aiokafka's sender task ends on
    an error it does not retry (a connection to the transaction coordinator
    closed while it looks it up: the coordinator's broker killed), and a step
    waiting on it would wait for ever; so would a commit whose records find
    too few replicas in sync. A new producer starts over (its
    InitProducerId ends what this one left open)."""
    sender = internals.sender_task(producer)
    task = asyncio.ensure_future(step)
    try:
        done, _ = await asyncio.wait((task, sender), timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.cancel()
    task.add_done_callback(_retrieve)
    if sender in done:
        failed = sender.exception() if not sender.cancelled() else None
        if isinstance(failed, ProducerFenced):
            raise failed
        raise KafkaError(f"{what}: the producer's sender stopped ({failed!r})")
    raise KafkaError(f"{what}: Kafka did not complete it in {timeout:g} s")


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
