"""What a failed fetch of the embedded Kafka's jars says (pure parts)."""

from __future__ import annotations

from pathlib import Path

from launcher.broker.jars import DEPENDENCY_PLUGIN, fetch_failed, maven_reason

OFFLINE = (
    "[ERROR] Plugin org.apache.maven.plugins:maven-dependency-plugin:3.8.1 or one of its"
    " dependencies could not be resolved: Failed to read artifact descriptor for"
    " org.apache.maven.plugins:maven-dependency-plugin:jar:3.8.1: Could not transfer artifact"
    " org.apache.maven.plugins:maven-dependency-plugin:pom:3.8.1 from/to central"
    " (https://repo.maven.apache.org/maven2): transfer failed for https://repo.maven.apache.org"
    "/maven2/org/apache/maven/plugins/maven-dependency-plugin/3.8.1/maven-dependency-plugin-3.8.1"
    ".pom: Unknown host repo.maven.apache.org: Temporary failure in name resolution -> [Help 1]")


def test_the_reason_is_the_innermost_of_mavens() -> None:
    assert maven_reason(["[INFO] Scanning for projects...", OFFLINE, "[ERROR]"]) == (
        "Could not transfer artifact org.apache.maven.plugins:maven-dependency-plugin:pom:3.8.1"
        " from/to central (https://repo.maven.apache.org/maven2): Unknown host"
        " repo.maven.apache.org: Temporary failure in name resolution")
    assert maven_reason(["[INFO] nothing"]) == "Maven exited without saying why"


def test_a_failed_fetch_is_one_line_that_says_what_to_do() -> None:
    line = fetch_failed("4.3.1", "Unknown host repo.maven.apache.org", Path("/c/fetch.log"))
    assert "\n" not in line
    assert line.startswith("could not fetch Apache Kafka 4.3.1's jars from Maven Central")
    for what in ("Unknown host", "/c/fetch.log", "network", "proxy settings",
                 "KAFKA_BOOTSTRAP"):
        assert what in line


def test_the_dependency_plugin_is_named_in_full() -> None:
    """No plugin-prefix lookup (maven-metadata.xml): group, artifact, version."""
    group, artifact, version = DEPENDENCY_PLUGIN.split(":")
    assert (group, artifact) == ("org.apache.maven.plugins", "maven-dependency-plugin")
    assert version[0].isdigit()
