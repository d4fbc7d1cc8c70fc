from __future__ import annotations

import pytest

from pipeline.settings import Settings


def test_from_env_reads_prefixed_and_plain_variables() -> None:
    s = Settings.from_env({"KAFKA_BOOTSTRAP": "k:9092", "REPORTS_TOPIC_PREFIX": "t",
                           "REPORTS_WRITE_TIMEOUT": "2.5", "REPORTS_WATCH_CACHE_SIZE": "7"})
    assert s.kafka_bootstrap == "k:9092" and s.changes_topic == "t.changes"
    assert s.write_timeout == 2.5 and s.watch_cache_size == 7


def test_database_must_be_an_identifier() -> None:
    with pytest.raises(ValueError):
        Settings.from_env({"REPORTS_DATABASE": "x; DROP"})
