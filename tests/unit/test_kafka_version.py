"""The broker `up` runs, docker-compose's and the Helm chart's are one Kafka
version, pinned in launcher/kafka-broker.pom.xml."""

from __future__ import annotations

from pathlib import Path

import yaml

from launcher.broker import kafka_version, server_properties

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
