"""Every topic has a policy that fits its role, derived from the settings."""

from __future__ import annotations

import pytest

from pipeline.model.topics import HOUR_MS, WINDOWS_KEPT, Replication, replication, specs
from pipeline.settings import Settings


def test_each_topic_has_a_policy_for_its_role() -> None:
    settings = Settings.from_env({}, topic_prefix="p", requests_retention_minutes=30,
                                 changes_retention_hours=48, changes_retention_bytes=10**9)
    by_name = {t.name: t.config for t in specs(settings)}
    assert set(by_name) == {"p.requests", "p.replies", "p.changes", "p.result-events",
                            "p.summaries", "p-pipeline-p-contributions-changelog",
                            "p-pipeline-p-activity-changelog"}
    for name in ("p.requests", "p.replies"):
        assert by_name[name]["cleanup.policy"] == "delete"
        assert by_name[name]["retention.ms"] == str(HOUR_MS // 2)
        # retention removes whole segments: they roll at least as often
        assert int(by_name[name]["segment.ms"]) <= HOUR_MS // 2
    changes = by_name["p.changes"]
    assert changes["cleanup.policy"] == "delete"
    assert changes["retention.ms"] == str(48 * HOUR_MS)
    assert changes["retention.bytes"] == str(10**9)
    assert by_name["p.summaries"]["cleanup.policy"] == "compact,delete"
    assert by_name["p.result-events"]["cleanup.policy"] == "delete"
    assert all(int(c["max.message.bytes"]) >= 3 * 1024 * 1024 for c in by_name.values())


def test_the_agents_table_changelogs_close_segments_kafka_can_compact_and_delete() -> None:
    settings = Settings.from_env({}, topic_prefix="p", window_seconds=60)
    by_name = {t.name: t.config for t in specs(settings)}
    contributions = by_name["p-pipeline-p-contributions-changelog"]
    assert contributions["cleanup.policy"] == "compact"
    activity = by_name["p-pipeline-p-activity-changelog"]
    # deleted once its windows have expired (Faust drops a window
    # WINDOWS_KEPT windows after its end): a window's first record outlasts it
    assert activity["cleanup.policy"] == "compact,delete"
    assert activity["retention.ms"] == str((WINDOWS_KEPT + 1) * 60_000)
    for config in (contributions, activity):
        assert int(config["segment.ms"]) <= HOUR_MS
        assert int(config["segment.bytes"]) <= 64 * 1024 * 1024
    # a window's segment closes before the window has expired
    assert int(activity["segment.ms"]) < int(activity["retention.ms"])


def test_three_replicas_two_in_sync_wherever_the_cluster_has_three_brokers() -> None:
    defaults = Settings.from_env({})
    assert replication(defaults, 1) == Replication(1, 1)
    assert replication(defaults, 2) == Replication(2, 1)
    assert replication(defaults, 3) == Replication(3, 2)
    assert replication(defaults, 6) == Replication(3, 2)
    # a setting wins; min ISR follows the factor unless set too
    chosen = Settings.from_env({"REPORTS_REPLICATION_FACTOR": "5"})
    assert replication(chosen, 6) == Replication(5, 2)
    assert replication(Settings.from_env({"REPORTS_MIN_INSYNC_REPLICAS": "3"}), 5) \
        == Replication(3, 3)
    with pytest.raises(ValueError, match="no write could succeed"):
        replication(Settings.from_env({"REPORTS_REPLICATION_FACTOR": "2",
                                       "REPORTS_MIN_INSYNC_REPLICAS": "3"}), 3)


def test_every_topic_takes_the_min_insync_replicas() -> None:
    settings = Settings.from_env({})
    assert all("min.insync.replicas" not in t.config for t in specs(settings))
    assert {t.config["min.insync.replicas"] for t in specs(settings, Replication(3, 2))} == {"2"}
