"""Kafka adapter: what holds a partition's last stable offset back.

A transaction is *hanging* when its records are in a partition but no commit
or abort marker ever comes (its coordinator finished it without reaching the
partition's leader, or lost track of it): the last stable offset stays at its
first record, and readers of committed records wait behind it for ever. Only
an operator can decide to abort it (KIP-664: ``kafka-transactions.sh
find-hanging`` and ``abort``); what the system can do is say so precisely.
That needs the partition's active producers (DescribeProducers) and the
coordinator's state of a transactional.id (DescribeTransactions); aiokafka has
neither request, so they are declared here on its protocol types.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

TRANSACTIONAL_ID_NOT_FOUND = 105


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


class TransactionAdminError(RuntimeError):
    """The broker could not describe the producers or the transaction."""


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


class PartitionTransactions:
    """The active producers of one partition (from its leader) and the
    coordinator's view of a transactional.id."""

    def __init__(self, bootstrap: str, tp: TopicPartition):
        self._client = AIOKafkaClient(bootstrap_servers=bootstrap)
        self._tp = tp

    async def __aenter__(self) -> PartitionTransactions:
        await self._client.bootstrap()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()

    async def _leader(self) -> int:
        self._client.add_topic(self._tp.topic)
        await self._client.force_metadata_update()
        leader = self._client.cluster.leader_for_partition(self._tp)
        if leader is None or leader < 0:
            raise TransactionAdminError(f"{self._tp.topic}-{self._tp.partition} has no leader")
        return int(leader)

    async def producers(self) -> list[ActiveProducer]:
        response: Any = await self._client.send(await self._leader(),
                                                DescribeProducersRequest(self._tp))
        found: list[ActiveProducer] = []
        for _topic, partitions, _ in response.topics:
            for _index, error_code, message, active, _ in partitions:
                if error_code:
                    raise TransactionAdminError(
                        f"describing the producers of {self._tp.topic}: "
                        f"{for_code(error_code).__name__} {message or ''}".strip())
                found.extend(ActiveProducer(producer_id=pid, producer_epoch=epoch,
                                            coordinator_epoch=coordinator,
                                            last_timestamp=stamp, txn_start_offset=start)
                             for pid, epoch, _seq, stamp, coordinator, start, _ in active)
        return found

    async def coordinator_view(self, transactional_id: str) -> CoordinatorView | None:
        """The coordinator's state of ``transactional_id`` (None: it knows none)."""
        node = await self._client.coordinator_lookup(CoordinationType.TRANSACTION,
                                                     transactional_id)
        response: Any = await self._client.send(node,
                                                DescribeTransactionsRequest(transactional_id))
        for error_code, _id, state, _timeout, _start, pid, epoch, topics, _ in \
                response.transaction_states:
            if error_code == TRANSACTIONAL_ID_NOT_FOUND:
                return None
            if error_code:
                raise TransactionAdminError(f"describing transaction {transactional_id}: "
                                            f"{for_code(error_code).__name__}")
            return CoordinatorView(state=state, producer_id=pid, producer_epoch=epoch,
                                   partitions=frozenset((t, p) for t, ps, _ in topics
                                                        for p in ps))
        return None
