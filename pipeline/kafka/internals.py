"""Kafka adapter: every use the project makes of aiokafka's, Faust's and
mode's private attributes, each behind a name that says what it is for.

The libraries promise none of these, and an upgrade may rename or remove any
of them: ``tests/unit/test_library_internals.py`` pins each on the installed
versions, so such an upgrade fails there rather than in production. Nothing
else reaches into another object's private attributes; the Faust subclasses
of ``pipeline.kafka.transport`` override Faust's own hooks and state, which the
same test pins.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Awaitable, Callable, Mapping, Set
from typing import Any, cast

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.errors import KafkaConnectionError
from aiokafka.producer import sender as aiokafka_sender
from faust.types import TP, AppT, ChannelT

# -- aiokafka: patches of the library itself, made once at import by
# -- pipeline.kafka.clientconfig


def set_concurrent_transactions_backoff(seconds: float) -> None:
    """How soon aiokafka asks a transaction's first AddPartitionsToTxn again
    when the coordinator answers CONCURRENT_TRANSACTIONS: a module constant
    of its sender (BACKOFF_OVERRIDE, 20 ms), with no setting."""
    aiokafka_sender.BACKOFF_OVERRIDE = seconds


def _failing_as_broken(send: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send)
    def sending(self: AIOKafkaConnection, request: Any, expect_response: bool = True) -> Any:
        try:
            return send(self, request, expect_response)
        except RuntimeError as err:
            if "closed" not in str(err):
                raise
            self.close(reason=CloseReason.CONNECTION_BROKEN)
            raise KafkaConnectionError(
                f"Connection at {self._host}:{self._port} closed: {err}") from err
    sending.failing_as_broken = True  # type: ignore[attr-defined]
    return sending


def fail_closed_writes_as_broken_connections() -> None:
    """aiokafka's request send, with a write on a connection already closed
    failing as a broken connection (KafkaConnectionError, which every caller
    retries). aiokafka expects OSError there; uvloop raises RuntimeError
    ("the handler is closed"), which ended a client's metadata task for good
    when two brokers were lost at once: every request of that client waited
    for metadata that never came, and the frontend answered 503 "Kafka is
    unavailable" with all three brokers back. Patched once, however often
    called."""
    if not getattr(AIOKafkaConnection.send, "failing_as_broken", False):
        AIOKafkaConnection.send = _failing_as_broken(AIOKafkaConnection.send)


def _closing_its_fetches_first(close: Callable[[Fetcher], Awaitable[None]]
                               ) -> Callable[[Fetcher], Awaitable[None]]:
    @functools.wraps(close)
    async def closing(self: Fetcher) -> None:
        # as close() begins: closed, and the routine that starts fetches ended
        self._closed = True
        self._fetch_task.cancel()
        await asyncio.wait([self._fetch_task])
        pending = list(self._pending_tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)  # their own cancellation is not the caller's
        self._pending_tasks.clear()
        await close(self)
    closing.closing_its_fetches_first = True  # type: ignore[attr-defined]
    return closing


def stop_consumers_without_their_fetches_cancellation() -> None:
    """aiokafka's fetcher close, with the fetches still pending cancelled and
    awaited first without raising their cancellation. aiokafka awaits each
    one it cancels bare, and a fetch that failed (its broker gone) and waits
    out its retry backoff ends in CancelledError: ``consumer.stop()`` raised
    it to its caller (aio-libs/aiokafka#647), which took it for its own
    cancellation. A fleet's follower ended so, for good, when its source's
    broker was restarted. The caller's own cancellation still goes through.
    Patched once, however often called."""
    if not getattr(Fetcher.close, "closing_its_fetches_first", False):
        Fetcher.close = _closing_its_fetches_first(Fetcher.close)  # type: ignore[method-assign]


#: every aiokafka client made in this process since :func:`track_clients`
_CLIENTS: weakref.WeakSet[AIOKafkaClient] = weakref.WeakSet()


def _tracked(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def initialising(self: AIOKafkaClient, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _CLIENTS.add(self)
    initialising.tracked = True  # type: ignore[attr-defined]
    return initialising


def track_clients() -> None:
    """aiokafka's client (the one under every producer, consumer and admin
    client, Faust's too), noting each one made in this process, for
    :func:`clients`. Patched once, however often called."""
    if not getattr(AIOKafkaClient.__init__, "tracked", False):
        AIOKafkaClient.__init__ = _tracked(AIOKafkaClient.__init__)  # type: ignore[method-assign]


def clients() -> list[AIOKafkaClient]:
    """The aiokafka clients of this process not yet collected."""
    return list(_CLIENTS)


def bootstrap_of(client: AIOKafkaClient) -> str | list[str]:
    """The bootstrap servers ``client`` was made with: which cluster it is of."""
    servers: str | list[str] = client._bootstrap_servers
    return servers


def brokers_in_metadata(client: AIOKafkaClient) -> set[int] | None:
    """The brokers in a started ``client``'s metadata (None: not started, or
    closed). A broker missing there is one the client will not connect to:
    aiokafka's coordinator lookup then retries for ever (until its next
    metadata refresh, minutes later) when the coordinator it is told of is
    that broker, as a broker back from being fenced can be."""
    if client._sync_task is None:
        return None
    return set(client.cluster._brokers)


def known_brokers(client: AIOKafkaClient) -> set[int]:
    """The brokers a started ``client`` knows of (in its metadata, or
    connected); none if it is not started, or closed."""
    in_metadata = brokers_in_metadata(client)
    if in_metadata is None:
        return set()
    return in_metadata | {node for node, _ in client._conns if isinstance(node, int)}


def refresh_metadata(client: AIOKafkaClient) -> None:
    """Have ``client`` ask the cluster for its metadata again, now."""
    client.force_metadata_update()


def forget_brokers(client: AIOKafkaClient, nodes: Set[int]) -> None:
    """Take ``nodes`` out of ``client``'s metadata and close its connections
    to them: each request still waiting on one fails as a broken connection
    (which aiokafka retries once it has asked the cluster again, of a broker
    it still knows), and the client asks the cluster for its metadata."""
    for node in nodes:
        client.cluster._brokers.pop(node, None)
    for key, conn in list(client._conns.items()):
        if key[0] in nodes:
            del client._conns[key]
            conn.close(reason=CloseReason.CONNECTION_BROKEN)
    refresh_metadata(client)


# -- aiokafka: a consumer someone else created


def set_fetching(consumer: AIOKafkaConsumer, *, isolation_level: str, fetch_min_bytes: int,
                 fetch_max_wait_ms: int) -> None:
    """Change how a consumer not yet started fetches (what it hands its
    fetcher when it starts): for Faust's worker consumer, which takes none
    of these from its configuration."""
    consumer._isolation_level = isolation_level
    consumer._fetch_min_bytes = fetch_min_bytes
    consumer._fetch_max_wait_ms = fetch_max_wait_ms


# -- aiokafka: a transactional producer's transaction manager and sender


def wait_for_producer_id(producer: AIOKafkaProducer) -> Awaitable[Any]:
    """Until the started transactional ``producer`` has its producer id and
    epoch (InitProducerId: the step that fences earlier producers of its
    transactional.id)."""
    return cast(Awaitable[Any], producer._txn_manager.wait_for_pid())


def producer_identity(producer: AIOKafkaProducer) -> tuple[int, int]:
    """The transactional ``producer``'s producer id and epoch."""
    manager = producer._txn_manager
    return int(manager.producer_id), int(manager.producer_epoch)


def in_transaction(producer: AIOKafkaProducer) -> bool:
    """Whether the transactional ``producer`` has a transaction begun."""
    return bool(producer._txn_manager.is_in_transaction())


def add_partition(producer: AIOKafkaProducer, tp: TopicPartition) -> None:
    """Have ``tp`` added to the ``producer``'s begun transaction by its
    sender's next AddPartitionsToTxn, before any record is sent to it."""
    producer._txn_manager.maybe_add_partition_to_txn(tp)


def on_partition_added(producer: AIOKafkaProducer,
                       callback: Callable[[TopicPartition], None]) -> None:
    """Call ``callback`` with each partition the coordinator added to the
    ``producer``'s transaction, after aiokafka has noted it (aiokafka tells
    no one: its transaction manager is told, and here, so is ``callback``)."""
    manager = producer._txn_manager
    added = manager.partition_added

    def partition_added(tp: TopicPartition) -> None:
        added(tp)
        callback(tp)
    manager.partition_added = partition_added


def sender_task(producer: AIOKafkaProducer) -> asyncio.Task[None]:
    """The started ``producer``'s sender: it ends on an error it does not
    retry, and a step waiting on it would wait for ever."""
    return cast(asyncio.Task[None], producer._sender.sender_task)


# -- Faust and mode


def stopped(service: Any) -> Callable[[], bool]:
    """Whether a mode service (Faust's consumer, its fetcher) was told to
    stop: the event mode sets first when it stops (its ``should_stop`` is
    also true once it crashed)."""
    is_set: Callable[[], bool] = service._stopped.is_set
    return is_set


def channels_by_topic(app: AppT) -> Mapping[str, Set[ChannelT]]:
    """The channels (the agents' streams' topics) subscribed to each topic
    name: Faust's conductor's index, by which it hands a record over."""
    index: Mapping[str, Set[ChannelT]] = cast(Any, app.topics)._topic_name_index
    return index


def recovery_behind(app: AppT) -> dict[TP, int]:
    """The changelog partitions of the app's active tables that Faust's
    recovery, under way, still waits on, each with the offset it waits to
    have read: the last one the partition had when the recovery began (its
    "highwater"). Faust's recovery service keeps both, offset by offset."""
    recovery = cast(Any, app.tables).recovery
    if not recovery.in_recovery:
        return {}
    offsets = recovery.active_offsets
    return {tp: highwater for tp, highwater in recovery.active_highwaters.items()
            if highwater is not None and offsets[tp] is not None and offsets[tp] < highwater}


def recovery_offset(app: AppT, tp: TP) -> int | None:
    """The last offset of ``tp`` that Faust's recovery has read."""
    offset: int | None = cast(Any, app.tables).recovery.active_offsets[tp]
    return offset


def changelog_records_waiting(app: AppT) -> bool:
    """Whether records read from the tables' changelogs wait in Faust's
    queue to be applied."""
    return not cast(Any, app.tables).changelog_queue.empty()


def mark_recovery_read(app: AppT, tp: TP, offset: int) -> None:
    """Have Faust's recovery take ``tp`` as read up to ``offset``: it ends
    when every partition is read up to its highwater (it checks on each
    record it applies, and every five seconds when none comes)."""
    cast(Any, app.tables).recovery.active_offsets[tp] = offset
