"""Kafka adapter: what holds a partition's last stable offset back, and
ending the committer's own hanging transactions.

A transaction is *hanging* when its records are in a partition but no commit
or abort marker ever comes: the last stable offset stays at its first record,
and readers of committed records wait behind it for ever. Kafka itself leaves
one behind when a single broker restarts after a crash: while the new
incarnation waits for the old one's registration to expire, its transaction
coordinator already runs and sends markers to a listener that is not up yet;
when the old registration is fenced every partition is briefly leaderless,
and the coordinator drops the markers as if the partitions had been deleted
("Couldn't find leader endpoint ... can be skipped") and records the
transaction complete.

The committer owns its transactional.id, so after it has fenced every earlier
producer of the id (InitProducerId, which returns only once the coordinator
has finished every transaction it knows), an open transaction of that id's
producer at an older epoch on one of its partitions is hanging, and the
committer ends it as the coordinator decided, writing the markers itself
(WriteTxnMarkers, as ``kafka-transactions.sh abort`` does; KIP-664). Any
other open transaction is named with its remedy. aiokafka has none of these
requests (DescribeProducers, DescribeTransactions, WriteTxnMarkers), so they
are declared here on its protocol types.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

TRANSACTIONAL_ID_NOT_FOUND = 105
#: How long a request refused with a retriable error (a partition whose new
#: leader is still loading it, a coordinator still loading its log) is asked
#: again before the refusal stands, and how often.
RETRY_SECONDS = 15.0
RETRY_BACKOFF_SECONDS = 0.1
T = TypeVar("T")


class DescribeProducersResponse_v0(Response):
    API_KEY = 61
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("active_producers", CompactArray(
                    ("producer_id", Int64),
                    ("producer_epoch", Int32),
                    ("last_sequence", Int32),
                    ("last_timestamp", Int64),
                    ("coordinator_epoch", Int32),
                    ("current_txn_start_offset", Int64),
                    ("tags", TaggedFields))),
                ("tags", TaggedFields))),
            ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


class DescribeProducersRequest_v0(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 61
    API_VERSION = 0
    RESPONSE_TYPE = DescribeProducersResponse_v0
    SCHEMA = Schema(
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partition_indexes", CompactArray(Int32)),
            ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


DescribeProducersStruct: TypeAlias = DescribeProducersRequest_v0


class DescribeProducersRequest(Request[DescribeProducersStruct]):
    API_KEY = 61

    def __init__(self, tp: TopicPartition):
        self._tp = tp

    def build(self, request_struct_class: type[DescribeProducersStruct]
              ) -> DescribeProducersStruct:
        return request_struct_class([(self._tp.topic, [self._tp.partition], {})], {})


class DescribeTransactionsResponse_v0(Response):
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("transaction_states", CompactArray(
            ("error_code", Int16),
            ("transactional_id", CompactString("utf-8")),
            ("transaction_state", CompactString("utf-8")),
            ("transaction_timeout_ms", Int32),
            ("transaction_start_time_ms", Int64),
            ("producer_id", Int64),
            ("producer_epoch", Int16),
            ("topics", CompactArray(
                ("topic", CompactString("utf-8")),
                ("partitions", CompactArray(Int32)),
                ("tags", TaggedFields))),
            ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


DescribeTransactionsStruct: TypeAlias = DescribeTransactionsRequest_v0


class DescribeTransactionsRequest(Request[DescribeTransactionsStruct]):
    API_KEY = 65

    def __init__(self, transactional_id: str):
        self._id = transactional_id

    def build(self, request_struct_class: type[DescribeTransactionsStruct]
              ) -> DescribeTransactionsStruct:
        return request_struct_class([self._id], {})


@dataclass(frozen=True)
class CoordinatorView:
    """What a transaction coordinator knows of one transactional.id."""

    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, ...
    producer_id: int
    producer_epoch: int
    partitions: frozenset[tuple[str, int]]


@dataclass(frozen=True)
class ActiveProducer:
    """One producer the partition's leader tracks."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_timestamp: int  # ms; of its last record in the partition
    txn_start_offset: int  # the open transaction's first offset, or -1


@dataclass(frozen=True)
class Hanging:
    """A hanging transaction and how it ends (True: committed)."""

    tp: TopicPartition
    producer: ActiveProducer
    commit: bool

    def __str__(self) -> str:
        return (f"{'committed' if self.commit else 'aborted'} the hanging transaction of"
                f" producer {self.producer.producer_id} epoch {self.producer.producer_epoch}"
                f" on {self.tp.topic}-{self.tp.partition} (open since offset"
                f" {self.producer.txn_start_offset})")


def hanging(found: dict[TopicPartition, list[ActiveProducer]], before: CoordinatorView | None,
            *, producer_id: int, epoch: int) -> list[Hanging]:
    """The transactions of earlier producers of a transactional.id still open
    once ``producer_id`` at ``epoch`` holds it, and how each ends. ``before``
    is the coordinator's view of the id before that producer fenced the
    earlier ones: a transaction committed when it records this very one
    (same producer and epoch) committing or committed; any other ended
    aborted (an open transaction is aborted on fencing, and a timed-out one
    is aborted at a new epoch). Pure."""
    ours = {producer_id} | ({before.producer_id} if before else set())
    decided: list[Hanging] = []
    for tp, producers in found.items():
        for p in producers:
            if p.txn_start_offset < 0 or p.producer_id not in ours:
                continue
            if p.producer_id == producer_id and p.producer_epoch >= epoch:
                continue  # the new producer's own
            committed = (before is not None and before.producer_id == p.producer_id
                         and before.producer_epoch == p.producer_epoch
                         and before.state in ("PrepareCommit", "CompleteCommit"))
            decided.append(Hanging(tp, p, committed))
    return decided


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` holding a group's offsets, or
    of ``__transaction_state`` holding a transactional id's state, whose
    leader is its coordinator (Kafka's ``Utils.abs(key.hashCode()) %
    partitions`` for both). Pure."""
    units = key.encode("utf-16-be")
    h = 0
    for k in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[k:k + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


class WriteTxnMarkersResponse_v1(Response):
    API_KEY = 27
    API_VERSION = 1
    SCHEMA = Schema(
        ("markers", CompactArray(
            ("producer_id", Int64),
            ("topics", CompactArray(
                ("name", CompactString("utf-8")),
                ("partitions", CompactArray(
                    ("partition_index", Int32),
                    ("error_code", Int16),
                    ("tags", TaggedFields))),
                ("tags", TaggedFields))),
            ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


class WriteTxnMarkersRequest_v1(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 27
    API_VERSION = 1
    RESPONSE_TYPE = WriteTxnMarkersResponse_v1
    SCHEMA = Schema(
        ("markers", CompactArray(
            ("producer_id", Int64),
            ("producer_epoch", Int16),
            ("transaction_result", Boolean),  # True: commit
            ("topics", CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields))),
            ("coordinator_epoch", Int32),
            ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


WriteTxnMarkersStruct: TypeAlias = WriteTxnMarkersRequest_v1


class WriteTxnMarkersRequest(Request[WriteTxnMarkersStruct]):
    API_KEY = 27

    def __init__(self, hanging: Hanging):
        self._hanging = hanging

    def build(self, request_struct_class: type[WriteTxnMarkersStruct]
              ) -> WriteTxnMarkersStruct:
        h = self._hanging
        return request_struct_class(
            [(h.producer.producer_id, h.producer.producer_epoch, h.commit,
              [(h.tp.topic, [h.tp.partition], {})], h.producer.coordinator_epoch, {})], {})


class TransactionAdminError(RuntimeError):
    """The broker could not describe the producers or the transaction."""

    def __init__(self, message: str, *, retriable: bool = False):
        super().__init__(message)
        self.retriable = retriable


def _refused(error_code: int, message: str) -> TransactionAdminError:
    error = for_code(error_code)
    return TransactionAdminError(f"{message}: {error.__name__}",
                                 retriable=bool(getattr(error, "retriable", False)))


async def retrying(ask: Callable[[], Awaitable[T]], *, seconds: float = RETRY_SECONDS) -> T:
    """``ask()``, asked again while Kafka refuses it with a retriable error
    (for at most ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await ask()
        except TransactionAdminError as err:
            if not err.retriable or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(RETRY_BACKOFF_SECONDS)


def explain(tp: TopicPartition, bootstrap: str, producers: list[ActiveProducer],
            coordinator: CoordinatorView | None, *, transactional_id: str,
            now_ms: float | None = None) -> str:
    """Why readers of committed records wait on ``tp``, and what to do."""
    now = time.time() * 1000 if now_ms is None else now_ms
    open_ = [p for p in producers if p.txn_start_offset >= 0]
    if not open_:
        return f"no transaction is open on {tp.topic}-{tp.partition} any more"
    known = (f"its coordinator has {transactional_id} {coordinator.state} at producer"
             f" {coordinator.producer_id} epoch {coordinator.producer_epoch}"
             if coordinator else f"its coordinator knows no {transactional_id}")
    lines = [f"{tp.topic}-{tp.partition} has {len(open_)} open transaction(s) ({known}):"]
    for p in open_:
        lines.append(
            f"  producer {p.producer_id} epoch {p.producer_epoch}, open since offset"
            f" {p.txn_start_offset}, last record {(now - p.last_timestamp) / 1000:.0f} s ago;"
            f" if it is hanging, abort it with: kafka-transactions.sh --bootstrap-server"
            f" {bootstrap} abort --topic {tp.topic} --partition {tp.partition}"
            f" --start-offset {p.txn_start_offset}")
    return "\n".join(lines)


class Transactions:
    """The active producers of partitions (from their leaders), the
    coordinator's view of a transactional.id, and markers for hanging
    transactions."""

    def __init__(self, bootstrap: str, *, request_timeout_ms: int = 40000):
        self._client = AIOKafkaClient(bootstrap_servers=bootstrap,
                                      request_timeout_ms=request_timeout_ms)

    async def __aenter__(self) -> Transactions:
        await self._client.bootstrap()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()

    async def partitions(self, topic: str) -> int:
        self._client.add_topic(topic)
        await self._client.force_metadata_update()
        found = self._client.cluster.partitions_for_topic(topic)
        if not found:
            raise TransactionAdminError(f"no topic {topic}")
        return len(found)

    async def _leader(self, tp: TopicPartition) -> int:
        self._client.add_topic(tp.topic)
        await self._client.force_metadata_update()
        leader = self._client.cluster.leader_for_partition(tp)
        if leader is None or leader < 0:
            raise TransactionAdminError(f"{tp.topic}-{tp.partition} has no leader",
                                        retriable=True)
        return int(leader)

    async def producers(self, tp: TopicPartition) -> list[ActiveProducer]:
        return await retrying(lambda: self._producers(tp))

    async def _producers(self, tp: TopicPartition) -> list[ActiveProducer]:
        response: Any = await self._client.send(await self._leader(tp),
                                                DescribeProducersRequest(tp))
        found: list[ActiveProducer] = []
        for _topic, partitions, _ in response.topics:
            for _index, error_code, message, active, _ in partitions:
                if error_code:
                    raise _refused(error_code, f"describing the producers of {tp.topic}-"
                                   f"{tp.partition}{' (' + message + ')' if message else ''}")
                found.extend(ActiveProducer(producer_id=pid, producer_epoch=epoch,
                                            coordinator_epoch=coordinator,
                                            last_timestamp=stamp, txn_start_offset=start)
                             for pid, epoch, _seq, stamp, coordinator, start, _ in active)
        return found

    async def coordinator_view(self, transactional_id: str) -> CoordinatorView | None:
        """The coordinator's state of ``transactional_id`` (None: it knows none)."""
        return await retrying(lambda: self._coordinator_view(transactional_id))

    async def _coordinator_view(self, transactional_id: str) -> CoordinatorView | None:
        node = await self._client.coordinator_lookup(CoordinationType.TRANSACTION,
                                                     transactional_id)
        response: Any = await self._client.send(node,
                                                DescribeTransactionsRequest(transactional_id))
        for error_code, _id, state, _timeout, _start, pid, epoch, topics, _ in \
                response.transaction_states:
            if error_code == TRANSACTIONAL_ID_NOT_FOUND:
                return None
            if error_code:
                raise _refused(error_code, f"describing transaction {transactional_id}")
            return CoordinatorView(state=state, producer_id=pid, producer_epoch=epoch,
                                   partitions=frozenset((t, p) for t, ps, _ in topics
                                                        for p in ps))
        return None

    async def end(self, h: Hanging) -> None:
        """Write the hanging transaction's marker to its partition's leader."""
        await retrying(lambda: self._end(h))

    async def _end(self, h: Hanging) -> None:
        response: Any = await self._client.send(await self._leader(h.tp),
                                                WriteTxnMarkersRequest(h))
        for _pid, topics, _ in response.markers:
            for _name, partitions, _ in topics:
                for _index, error_code, _ in partitions:
                    if error_code:
                        raise _refused(error_code, "ending the transaction of producer"
                                       f" {h.producer.producer_id} on {h.tp.topic}-"
                                       f"{h.tp.partition}")
