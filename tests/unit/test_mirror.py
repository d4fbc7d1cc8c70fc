"""MirrorMaker 2's configuration for a fleet, and its pinned jars in step
with the broker's."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import pytest

from launcher.broker.jars import MIRRORMAKER, BrokerError, kafka_version
from launcher.broker.mirror import mm2_properties


def test_the_public_topics_of_each_cluster_are_mirrored_read_committed() -> None:
    text = mm2_properties({"east": "e:9092", "west": "w:9092"}, "c:9092", replication=1)
    lines = set(text.splitlines())
    assert "clusters = east, west, central" in lines
    assert "central.bootstrap.servers = c:9092" in lines
    for alias, bootstrap in (("east", "e:9092"), ("west", "w:9092")):
        assert f"{alias}.bootstrap.servers = {bootstrap}" in lines
        assert f"{alias}.consumer.isolation.level = read_committed" in lines
        assert f"{alias}->central.enabled = true" in lines
        assert f"{alias}->central.topics = reports\\.(changes|summaries)" in lines
    assert "emit.checkpoints.enabled = false" in lines
    assert "offset.storage.replication.factor = 1" in lines


@pytest.mark.parametrize("sources", [{"bad alias": "e:9092"}, {"central": "e:9092"}])
def test_an_alias_that_cannot_be_one(sources: dict[str, str]) -> None:
    with pytest.raises(BrokerError):
        mm2_properties(sources, "c:9092")


def test_mirrormaker_is_the_brokers_kafka_version() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(resources.files("launcher.broker").joinpath(MIRRORMAKER.pom)
                         .read_text())
    version = root.find("m:properties/m:kafka.version", ns)
    assert version is not None and version.text == kafka_version()


def test_docs_configure_mirrormaker_as_the_tested_mirror_does() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "fleet.md").read_text()
    [block] = re.findall(r"```properties\n(.*?)```", doc, re.S)
    assert block == mm2_properties({"prod-eu": "kafka.prod-eu.example:9092",
                                    "prod-us": "kafka.prod-us.example:9092"},
                                   "kafka.central.example:9092")
