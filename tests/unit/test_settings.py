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


def test_merge_nice_must_be_a_nice_value() -> None:
    with pytest.raises(ValueError, match="REPORTS_CHDB_MERGE_NICE"):
        Settings.from_env({"REPORTS_CHDB_MERGE_NICE": "20"})
    assert Settings.from_env({"REPORTS_CHDB_MERGE_NICE": "-20"}).chdb_merge_nice == -20


def test_chdb_options_bound_the_caches_and_lower_the_merges() -> None:
    from pipeline.clickhouse.connection import chdb_options

    options = chdb_options(Settings(chdb_cache_mb=100))
    caches = sum(int(v) for k, v in options.items() if k.endswith("_cache_size"))
    assert 99 * 1024 * 1024 < caches <= 100 * 1024 * 1024
    assert options["os_threads_nice_value_merge_mutate"] == "10"
    assert "os_threads_nice_value_merge_mutate" not in chdb_options(Settings(chdb_merge_nice=0))


def test_every_setting_is_documented() -> None:
    """Each REPORTS_* variable the settings read is in README's Configuration
    or in docs/design.md's full list."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    named = set(re.findall(r"REPORTS_[A-Z_]+[A-Z]", (root / "pipeline" / "settings.py")
                           .read_text()))
    readme = (root / "README.md").read_text()
    documented = readme[readme.index("\n## Configuration\n"):
                        readme.index("\n## Streaming consumers")]
    documented += (root / "docs" / "design.md").read_text().split("\n## Every setting\n")[1]
    listed = set(re.findall(r"`(REPORTS_[A-Z_]+[A-Z])`", documented))
    # `REPORTS_X` / `_Y` rows name two
    for first, suffix in re.findall(r"`(REPORTS_[A-Z_]+[A-Z])` / `(_[A-Z_]+)`", documented):
        listed.add(first.rsplit("_", 1)[0] + suffix)
    assert named - listed == set()
