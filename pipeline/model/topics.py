"""Every topic the system creates and the policy that fits its role. Pure.

- write requests and replies live seconds: short time retention;
- the change log is the source of truth until ClickHouse holds it: time and
  size retention (ClickHouse keeps the history);
- result events are a stream of facts: time retention;
- summaries are a table (the last record per key): compacted, with window
  records deleted after a while.

- the aggregation agent's tables' changelogs (Faust's, named as Faust names
  them) are read back whole whenever the agent starts: compacted, the
  windowed table's also deleted once its windows have expired, each in
  segments small enough for Kafka to compact and delete (it does so only to
  closed segments), so that what is read back follows the tables' contents,
  not every update they ever had.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.settings import Settings

#: Largest record batch any topic accepts (a report may be several MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
HOUR_MS = 3_600_000
#: Closed windows of activity the aggregation agent keeps (late changes still
#: count in them); its windowed table's changelog keeps as long.
WINDOWS_KEPT = 3
#: The largest segment of a table's changelog. Kafka compacts and deletes
#: only closed segments; with its defaults (1 GiB, 7 days) a changelog's
#: segment did not close, and the agent read back every update ever made
#: (several activity records a report written) each time it started.
TABLE_SEGMENT_BYTES = 64 * 1024 * 1024
#: Every topic has this one partition: the change log's order is the
#: resourceVersion order. Producers name it, so no key is hashed.
PARTITION = 0


@dataclass(frozen=True)
class Replication:
    """How many copies of each topic the cluster keeps, and how many a write
    must reach."""

    factor: int
    min_insync: int


def replication(settings: Settings, brokers: int) -> Replication:
    """The replication of the system's topics on a cluster of ``brokers``:
    the settings', else three replicas with two in sync wherever the cluster
    has three brokers or more (what survives the loss of one machine while
    writes go on), else one per broker. Pure."""
    factor = settings.replication_factor or min(3, max(brokers, 1))
    min_insync = settings.min_insync_replicas or (2 if factor >= 3 else 1)
    if min_insync > factor:
        raise ValueError(f"REPORTS_MIN_INSYNC_REPLICAS={min_insync} is more than the"
                         f" {factor} replicas of each topic: no write could succeed")
    return Replication(factor, min_insync)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    role: str
    config: dict[str, str]


def contributions_table(settings: Settings) -> str:
    """The aggregation agent's table of each report's contribution."""
    return f"{settings.topic_prefix}-contributions"


def activity_table(settings: Settings) -> str:
    """The aggregation agent's windowed table of activity."""
    return f"{settings.topic_prefix}-activity"


def changelog_topic(settings: Settings, table: str) -> str:
    """The changelog topic Faust keeps a table in."""
    return f"{settings.app_id}-{table}-changelog"


def activity_retention_ms(settings: Settings) -> int:
    """How long the windowed table's changelog keeps a record: a window more
    than Faust keeps a window past its end (a window's first record must
    outlast the window, or a restart would read it back short)."""
    return settings.window_seconds * (WINDOWS_KEPT + 1) * 1000


def table_segments(settings: Settings, table: str) -> dict[str, str]:
    """How often the segments of ``table``'s changelog close: the windowed
    table's once a window, the other's hourly, each at
    ``TABLE_SEGMENT_BYTES`` at most."""
    every = (settings.window_seconds * 1000 if table == activity_table(settings)
             else HOUR_MS)
    return {"segment.ms": str(every), "segment.bytes": str(TABLE_SEGMENT_BYTES)}


def _ms(hours: float) -> str:
    return str(int(hours * HOUR_MS))


def specs(settings: Settings, replicated: Replication | None = None) -> list[TopicSpec]:
    base = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    if replicated is not None:
        base["min.insync.replicas"] = str(replicated.min_insync)
    short = _ms(settings.requests_retention_minutes / 60)
    transient = {**base, "cleanup.policy": "delete", "retention.ms": short,
                 # Retention removes whole segments: roll them often enough.
                 "segment.ms": str(min(int(short), HOUR_MS)),
                 "segment.bytes": str(64 * 1024 * 1024)}
    return [
        TopicSpec(settings.requests_topic, "write requests to the committer", transient),
        TopicSpec(settings.replies_topic, "the committer's answers", transient),
        TopicSpec(settings.changes_topic, "the change log: every committed write", {
            **base, "cleanup.policy": "delete",
            "retention.ms": _ms(settings.changes_retention_hours),
            "retention.bytes": str(settings.changes_retention_bytes),
            "segment.bytes": str(256 * 1024 * 1024),
            "segment.ms": str(min(int(_ms(settings.changes_retention_hours)) // 4,
                                  24 * HOUR_MS))}),
        TopicSpec(settings.result_events_topic, "result status changes", {
            **base, "cleanup.policy": "delete",
            "retention.ms": _ms(settings.events_retention_hours),
            "segment.ms": str(min(int(_ms(settings.events_retention_hours)) // 4,
                                  24 * HOUR_MS))}),
        TopicSpec(settings.summaries_topic, "counts per namespace and policy", {
            **base, "cleanup.policy": "compact,delete",
            "retention.ms": _ms(settings.summaries_retention_days * 24),
            "segment.ms": str(6 * HOUR_MS), "min.cleanable.dirty.ratio": "0.25",
            "delete.retention.ms": str(24 * HOUR_MS)}),
        TopicSpec(changelog_topic(settings, contributions_table(settings)),
                  "the aggregation agent's contributions table (Faust's changelog)", {
                      **base, "cleanup.policy": "compact",
                      **table_segments(settings, contributions_table(settings))}),
        TopicSpec(changelog_topic(settings, activity_table(settings)),
                  "the aggregation agent's windowed activity table (Faust's changelog)", {
                      **base, "cleanup.policy": "compact,delete",
                      "retention.ms": str(activity_retention_ms(settings)),
                      **table_segments(settings, activity_table(settings))}),
    ]
