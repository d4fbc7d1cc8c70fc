"""The broker `up` runs, docker-compose's and the Helm chart's are one Kafka
version, pinned in launcher/broker/kafka-broker.pom.xml."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import yaml
from aiokafka.errors import ConcurrentTransactions
from aiokafka.producer.sender import AddPartitionsToTxnHandler
from aiokafka.producer.transaction_manager import TransactionManager

from launcher.broker.cluster import KafkaCluster, node_properties
from launcher.broker.jars import kafka_version
from launcher.broker.node import port_free, server_properties
from pipeline.kafka.clientconfig import CONCURRENT_TRANSACTIONS_BACKOFF_S
from pipeline.kafka.transport import FlushSentProducer

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
    assert not port_free(port), "a port someone listens on is taken"
    accepted.close()  # the server closes first: its end waits in TIME_WAIT
    listener.close()
    client.close()
    assert port_free(port)


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


def _merged_compose() -> dict[str, Any]:
    """docker-compose.yml with the three-broker profile over it, merged as
    Compose merges: mappings key by key, the rest replaced."""
    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
        return over
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    over = yaml.safe_load((ROOT / "docker-compose.replicated.yml").read_text())
    return cast(dict[str, Any], merge(base, over))


def test_composes_three_broker_profile_is_one_replicated_cluster() -> None:
    services = _merged_compose()["services"]
    nodes = {name: s for name, s in services.items() if name.startswith("kafka")}
    assert len(nodes) == 3
    assert {s["image"] for s in nodes.values()} == {f"apache/kafka:{kafka_version()}"}
    envs = [s["environment"] for s in nodes.values()]
    voters = {f"{e['KAFKA_NODE_ID']}@{name}:9093" for name, e in zip(nodes, envs, strict=True)}
    for env in envs:
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters
        assert env["CLUSTER_ID"] == envs[0]["CLUSTER_ID"]
        assert (env["KAFKA_DEFAULT_REPLICATION_FACTOR"], env["KAFKA_MIN_INSYNC_REPLICAS"]) \
            == ("3", "2")
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert "KAFKA_TRANSACTION_PARTITION_VERIFICATION_ENABLE" not in env
    for name in ("reports", "worker"):
        bootstrap = services[name]["environment"]["KAFKA_BOOTSTRAP"].split(",")
        assert bootstrap == [f"{n}:9092" for n in nodes], name
    host_ports = [p for s in nodes.values() for p in s["ports"]]
    assert len(set(host_ports)) == 3


def test_the_three_broker_cluster_is_kafkas_defaults_and_productions_two(
        tmp_path: Path) -> None:
    props = dict(line.split("=", 1) for line in node_properties(
        node=2, port=9092, controller_port=9093, voters="1@a:1,2@b:2,3@c:3",
        logs=tmp_path).splitlines())
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")
    assert props["node.id"] == "2" and props["controller.quorum.voters"] == "1@a:1,2@b:2,3@c:3"
    # none of the single node's departures from Kafka's defaults
    single = dict(line.split("=", 1) for line in server_properties(
        port=9092, controller_port=9093, logs=tmp_path).splitlines())
    kept = {"process.roles", "node.id", "controller.quorum.voters", "listeners",
            "advertised.listeners", "controller.listener.names", "inter.broker.listener.name",
            "listener.security.protocol.map", "log.dirs", "log.cleaner.dedupe.buffer.size"}
    assert set(props) & set(single) == kept


def test_a_controller_of_its_own_listens_for_the_quorum_only(tmp_path: Path) -> None:
    controller = dict(line.split("=", 1) for line in node_properties(
        node=4, port=9092, controller_port=9093, voters="4@a:1,5@b:2,6@c:3", logs=tmp_path,
        roles="controller").splitlines())
    assert controller["process.roles"] == "controller"
    assert controller["listeners"] == "CONTROLLER://127.0.0.1:9093"
    assert "advertised.listeners" not in controller
    assert "inter.broker.listener.name" not in controller
    broker = dict(line.split("=", 1) for line in node_properties(
        node=1, port=9092, controller_port=9093, voters="4@a:1,5@b:2,6@c:3", logs=tmp_path,
        roles="broker").splitlines())
    assert broker["process.roles"] == "broker"
    assert broker["listeners"] == broker["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert broker["controller.listener.names"] == "CONTROLLER"
    assert (broker["default.replication.factor"], broker["min.insync.replicas"]) == ("3", "2")


def test_a_cluster_with_controllers_of_their_own(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, brokers=3, controllers=3)
    assert cluster.node_ids() == [1, 2, 3, 4, 5, 6]
    assert cluster.broker_ids() == [1, 2, 3]
    assert [n.roles for n in cluster.nodes] == ["broker"] * 3 + ["controller"] * 3
    assert cluster.bootstrap.count(",") == 2
    combined = KafkaCluster(tmp_path, brokers=3)
    assert combined.broker_ids() == combined.node_ids() == [1, 2, 3]
    assert {n.roles for n in combined.nodes} == {"broker,controller"}


def test_an_operators_settings_go_on_top(tmp_path: Path) -> None:
    props = dict(line.split("=", 1) for line in node_properties(
        node=1, port=9092, controller_port=9093, voters="1@a:1", logs=tmp_path,
        config={"broker.session.timeout.ms": "4500", "min.insync.replicas": "1"}).splitlines())
    assert props["broker.session.timeout.ms"] == "4500"
    assert props["min.insync.replicas"] == "1"
    assert props["default.replication.factor"] == "3"
