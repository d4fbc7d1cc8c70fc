"""The broker `up` runs, docker-compose's and the Helm chart's are one Kafka
version, pinned in launcher/kafka-broker.pom.xml."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import yaml
from aiokafka.errors import ConcurrentTransactions
from aiokafka.producer.sender import AddPartitionsToTxnHandler
from aiokafka.producer.transaction_manager import TransactionManager

from launcher.broker import _port_free, kafka_version, server_properties
from pipeline.kafka.client import CONCURRENT_TRANSACTIONS_BACKOFF_S, FlushSentProducer

ROOT = Path(__file__).resolve().parents[2]


def test_compose_and_chart_run_the_pinned_kafka() -> None:
    version = kafka_version()
    assert version.startswith("4.")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{version}"
    values = yaml.safe_load(
        (ROOT / "deploy" / "helm" / "reports-pipeline" / "values.yaml").read_text())
    assert values["kafka"]["image"] == f"apache/kafka:{version}"


def test_the_embedded_broker_is_a_single_kraft_node_on_loopback(tmp_path: Path) -> None:
    props = dict(line.split("=", 1) for line in server_properties(
        port=9092, controller_port=9093, logs=tmp_path).splitlines())
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["log.dirs"] == str(tmp_path)
    assert props["auto.create.topics.enable"] == "false"
    assert props["transaction.state.log.replication.factor"] == "1"


def test_a_killed_brokers_port_is_free_again_while_only_its_connections_linger() -> None:
    """A broker killed with clients connected leaves its side of their
    connections in TIME_WAIT; the restarted one (listening with SO_REUSEADDR,
    as the JVM does) can take the port again, and must: its metadata still
    holds that address."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    assert not _port_free(port), "a port someone listens on is taken"
    accepted.close()  # the server closes first: its end waits in TIME_WAIT
    listener.close()
    client.close()
    assert _port_free(port)


async def test_a_transaction_begun_while_the_last_ones_markers_are_written_asks_again_soon(
        ) -> None:
    """aiokafka's own AddPartitionsToTxn handler, given the coordinator's
    CONCURRENT_TRANSACTIONS for a transaction's first partition, waits the
    project's backoff rather than its fixed 20 ms (what it reads is a module
    constant, so this shows the setting reaches it)."""
    sender = SimpleNamespace(_retry_backoff=0.1, _txn_manager=TransactionManager("t", 60000))
    handler = AddPartitionsToTxnHandler(sender, [])
    response = SimpleNamespace(errors=[("changes", [(0, ConcurrentTransactions.errno)])])
    assert handler.handle_response(response) == CONCURRENT_TRANSACTIONS_BACKOFF_S < 0.005


async def test_a_commit_flushes_what_the_agents_had_sent_not_until_they_stop() -> None:
    """Faust flushes its producer before every offset commit; ours sends what
    its buffer held when the flush began (the agent keeps adding table
    records), then waits for what the Kafka producer holds."""
    asked: list[object] = []

    async def flush_atmost(n: int) -> int:
        asked.append(n)
        return n

    async def flush() -> None:
        asked.append("kafka")

    producer = object.__new__(FlushSentProducer)
    producer.buffer = SimpleNamespace(size=7, flush_atmost=flush_atmost)  # type: ignore[assignment]
    producer._producer = SimpleNamespace(flush=flush)  # type: ignore[assignment]
    producer._transaction_producers = {}
    await producer.flush()
    assert asked == [7, "kafka"]
