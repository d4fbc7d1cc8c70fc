"""What ``pipeline.kafka.internals`` and the Faust subclasses of
``pipeline.kafka.transport`` rely on in aiokafka, Faust and mode beyond their
public interfaces, pinned on the installed versions: an upgrade that renames
or removes any of it fails here, not in production. Objects are real,
constructed without a broker."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.cluster import BrokerMetadata
from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.errors import KafkaConnectionError
from aiokafka.producer import sender as aiokafka_sender
from aiokafka.producer.sender import AddPartitionsToTxnHandler, Sender
from aiokafka.producer.transaction_manager import TransactionManager
from faust.transport import consumer as faust_consumer
from faust.transport.conductor import Conductor
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from mode import Service

from pipeline.kafka import clientconfig, internals, transport

TP = TopicPartition("changes", 0)


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


# -- aiokafka: the patches


def test_the_concurrent_transactions_backoff_is_the_module_constant_the_sender_reads() -> None:
    assert isinstance(aiokafka_sender.BACKOFF_OVERRIDE, float)
    assert aiokafka_sender.BACKOFF_OVERRIDE == clientconfig.CONCURRENT_TRANSACTIONS_BACKOFF_S
    assert "BACKOFF_OVERRIDE" in inspect.getsource(AddPartitionsToTxnHandler.handle_response)


def test_aiokafka_still_fails_only_oserror_writes_as_broken_connections() -> None:
    """The reason for the patch: were aiokafka to catch RuntimeError itself,
    the patch could go."""
    original = inspect.getsource(inspect.unwrap(AIOKafkaConnection.send))
    assert "except OSError" in original and "RuntimeError" not in original


def test_aiokafka_still_awaits_the_fetches_it_cancels_bare() -> None:
    """The reason for the fetcher's close patch: were aiokafka to suppress
    their cancellation itself (aio-libs/aiokafka#647), the patch could go."""
    original = inspect.getsource(inspect.unwrap(Fetcher.close))
    assert "x.cancel()\n            await x" in original


def test_the_fetcher_close_is_patched_once_over_the_state_it_reads() -> None:
    close = Fetcher.close
    assert getattr(close, "closing_its_fetches_first", False)
    internals.stop_consumers_without_their_fetches_cancellation()
    assert Fetcher.close is close
    source = inspect.getsource(Fetcher.__init__)
    assert "self._pending_tasks = set()" in source
    assert "self._fetch_task = create_task(" in source
    assert "self._closed = True" in inspect.getsource(inspect.unwrap(close))


def test_the_connection_send_is_patched_once() -> None:
    send = AIOKafkaConnection.send
    assert getattr(send, "failing_as_broken", False)
    internals.fail_closed_writes_as_broken_connections()
    assert AIOKafkaConnection.send is send
    assert parameters(inspect.unwrap(send)) == ["self", "request", "expect_response"]


class _Request:
    def prepare(self, versions: Any) -> Any:
        header = SimpleNamespace(encode=lambda: b"h")
        return SimpleNamespace(build_request_header=lambda **kw: header, encode=lambda: b"r")


class _ClosedWriter:
    def write(self, data: bytes) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>;"
                           " the handler is closed")

    def close(self) -> None:
        pass


async def test_a_write_on_a_closed_handler_fails_as_a_broken_connection() -> None:
    conn = AIOKafkaConnection("127.0.0.1", 9)
    assert (conn._host, conn._port) == ("127.0.0.1", 9)
    conn._writer = _ClosedWriter()
    closed: list[Any] = []
    conn.close = lambda reason=None, exc=None: closed.append(reason)  # type: ignore[method-assign]
    with pytest.raises(KafkaConnectionError, match="127.0.0.1:9 closed"):
        conn.send(_Request())
    assert closed == [CloseReason.CONNECTION_BROKEN]


# -- aiokafka: Faust's consumer's fetching


async def test_a_consumer_hands_its_fetching_settings_to_its_fetcher_when_it_starts() -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")
    try:
        internals.set_fetching(consumer, isolation_level="read_committed", fetch_min_bytes=7,
                               fetch_max_wait_ms=8)
        assert (consumer._isolation_level, consumer._fetch_min_bytes,
                consumer._fetch_max_wait_ms) == ("read_committed", 7, 8)
    finally:
        await consumer.stop()
    start = inspect.getsource(AIOKafkaConsumer.start)
    for name in ("isolation_level", "fetch_min_bytes", "fetch_max_wait_ms"):
        assert f"{name}=self._{name}" in start
        assert name in inspect.signature(Fetcher).parameters


# -- aiokafka: the committer's transactional producer


async def test_a_transactional_producers_manager_and_sender() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", transactional_id="t",
                                enable_idempotence=True)
    try:
        assert isinstance(producer._txn_manager, TransactionManager)
        assert isinstance(producer._sender, Sender)
        assert producer._sender.sender_task is None  # until it starts
        assert internals.producer_identity(producer) == (-1, -1)
        assert not internals.in_transaction(producer)
    finally:
        await producer.stop()
    assert isinstance(inspect.getattr_static(Sender, "sender_task"), property)
    assert inspect.iscoroutinefunction(TransactionManager.wait_for_pid)
    for name in ("producer_id", "producer_epoch"):
        assert isinstance(inspect.getattr_static(TransactionManager, name), property)
    assert parameters(TransactionManager.maybe_add_partition_to_txn) == ["self", "tp"]
    assert parameters(TransactionManager.partition_added) == ["self", "tp"]
    # the sender tells the manager (looked up on it, so a replacement is called)
    assert "txn_manager.partition_added(tp)" in inspect.getsource(
        AddPartitionsToTxnHandler.handle_response)


async def test_a_partition_added_is_noted_by_aiokafka_and_told_to_the_callback() -> None:
    manager = TransactionManager("t", 60000)
    manager.set_pid_and_epoch(5, 1)
    producer: Any = SimpleNamespace(_txn_manager=manager)
    told: list[TopicPartition] = []
    internals.on_partition_added(producer, told.append)
    manager.begin_transaction()
    assert internals.in_transaction(producer)
    assert internals.producer_identity(producer) == (5, 1)
    internals.add_partition(producer, TP)
    assert manager.partitions_to_add() == {TP}
    manager.partition_added(TP)
    assert told == [TP]
    assert manager.txn_partitions == {TP} and not manager.partitions_to_add()


async def test_waiting_for_the_producer_id_ends_once_it_is_set() -> None:
    manager = TransactionManager("t", 60000)
    producer: Any = SimpleNamespace(_txn_manager=manager)
    waiting = asyncio.ensure_future(internals.wait_for_producer_id(producer))
    await asyncio.sleep(0)
    assert not waiting.done()
    manager.set_pid_and_epoch(3, 0)
    await asyncio.wait_for(waiting, 1)


# -- mode and Faust


async def test_a_mode_service_has_the_event_set_when_it_stops() -> None:
    service = Service()
    stopped = internals.stopped(service)
    assert not stopped()
    await service.stop()
    assert stopped()


def test_faust_indexes_its_channels_by_topic_name() -> None:
    app = faust.App("internals-test", broker="reports-kafka://127.0.0.1:9")
    assert isinstance(app.topics, Conductor)
    index = internals.channels_by_topic(app)
    assert index == {} and hasattr(index, "get")
    assert "_topic_name_index[topic].add(channel)" in inspect.getsource(
        Conductor._update_indices)


def test_faust_still_has_the_hooks_the_project_overrides() -> None:
    """Each override of a private hook of Faust (``pipeline.kafka.transport``)
    replaces one Faust still calls, with the same parameters."""
    overridden = [
        (transport.ReadCommittedConsumerThread, faust_aiokafka.AIOKafkaConsumerThread,
         "_create_worker_consumer"),
        (transport.ReadCommittedConsumer, faust_aiokafka.Consumer, "_new_consumer_thread"),
        (transport.ReadCommittedConsumer, faust_consumer.Consumer, "_new_offset"),
        (transport.ReadCommittedConsumer, faust_consumer.Consumer, "_drain_messages"),
        (transport.Topic, faust.Topic, "_get_producer"),
        (transport.TurnTakingBuffer, ProducerBuffer, "_send_pending"),
        (transport.TurnTakingBuffer, ProducerBuffer, "__post_init__"),
    ]
    for ours, theirs, name in overridden:
        assert issubclass(ours, theirs)
        assert name in vars(theirs) or any(name in vars(c) for c in theirs.__mro__[1:]), name
        assert parameters(getattr(ours, name)) == parameters(getattr(theirs, name)), name
        assert (inspect.iscoroutinefunction(getattr(ours, name))
                == inspect.iscoroutinefunction(getattr(theirs, name))), name
    assert "consumer._drain_messages(self)" in inspect.getsource(faust_consumer.Fetcher)
    assert "self._create_worker_consumer(" in inspect.getsource(
        faust_aiokafka.AIOKafkaConsumerThread._create_consumer)
    assert "self._new_offset(tp)" in inspect.getsource(
        faust_consumer.Consumer._filter_committable_offsets)
    assert "self._new_consumer_thread()" in inspect.getsource(faust_consumer.ThreadDelegateConsumer)


def test_faust_keeps_the_state_the_project_reads_where_it_reads_it() -> None:
    """The Faust consumer's and producer's own state that the subclasses of
    ``pipeline.kafka.transport`` read and write."""
    init = inspect.getsource(faust_consumer.Consumer.__init__)
    for name in ("_acked", "_acked_index", "_committed_offset", "_read_offset",
                 "_commit_every"):
        assert f"self.{name} =" in init, name
    assert faust_consumer.Consumer._n_acked == 0  # a class default, counted per instance
    declared = faust_aiokafka.Producer.__annotations__
    for name in ("_producer", "_transaction_producers"):
        assert name in declared and hasattr(faust_aiokafka.Producer, name), name
    assert "flush_atmost" in vars(ProducerBuffer)


# -- aiokafka: every client of the process, and the brokers each knows


class _Conn:
    """A connection of a client: what forget_brokers closes."""

    def __init__(self) -> None:
        self.closed: list[Any] = []

    def close(self, reason: Any = None, exc: Any = None) -> None:
        self.closed.append(reason)


def as_started(client: AIOKafkaClient, brokers: list[int]) -> dict[int, _Conn]:
    """``client`` as a started one knowing ``brokers``, each connected."""
    client.cluster._brokers = {n: BrokerMetadata(n, "127.0.0.1", 9000 + n, None)
                               for n in brokers}
    conns = {n: _Conn() for n in brokers}
    client._conns.update({(n, ConnectionGroup.DEFAULT): c for n, c in conns.items()})
    client._sync_task = asyncio.get_running_loop().create_future()  # as bootstrap() sets
    return conns


@pytest.mark.asyncio
async def test_clients_are_tracked_and_forget_the_brokers_they_are_told() -> None:
    internals.track_clients()
    init = AIOKafkaClient.__init__
    internals.track_clients()
    assert AIOKafkaClient.__init__ is init  # patched once
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9001,127.0.0.1:9002")
    assert client in internals.clients()
    assert internals.bootstrap_of(client) == "127.0.0.1:9001,127.0.0.1:9002"
    assert internals.known_brokers(client) == set()  # not started: nothing to drop
    assert internals.brokers_in_metadata(client) is None
    conns = as_started(client, [1, 2, 3])
    assert internals.known_brokers(client) == internals.brokers_in_metadata(client) == {1, 2, 3}
    internals.forget_brokers(client, {2})
    assert internals.known_brokers(client) == {1, 3}
    assert client.cluster.broker_metadata(2) is None
    assert conns[2].closed == [CloseReason.CONNECTION_BROKEN]
    assert conns[1].closed == conns[3].closed == []
    assert client._md_update_fut is not None  # it asks the cluster again
    client._sync_task.cancel()


# -- Faust: its table recovery's state (pipeline.kafka.tablerecovery)


async def test_faust_keeps_its_recovery_state_where_the_recovery_watch_reads_it() -> None:
    app = faust.App("pins", web_enabled=False)
    recovery = app.tables.recovery  # type: ignore[attr-defined]
    tp = TopicPartition("table-changelog", 0)
    assert internals.recovery_behind(app) == {} and not recovery.in_recovery
    recovery.active_highwaters[tp] = 10
    recovery.active_offsets[tp] = 3
    recovery.in_recovery = True
    assert internals.recovery_behind(app) == {tp: 10}
    assert internals.recovery_offset(app, tp) == 3
    assert not internals.changelog_records_waiting(app)
    internals.mark_recovery_read(app, tp, 10)
    assert internals.recovery_behind(app) == {} and not recovery.need_recovery()
    # Faust ends a recovery that nothing more arrives for by that same check
    slurp = inspect.getsource(type(recovery)._slurp_changelogs.fun)
    assert "changelog_queue.get(), timeout=5.0" in slurp
    assert "self.in_recovery and not self.need_recovery()" in slurp
