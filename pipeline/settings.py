"""Settings of every process, read once from the environment. Pure data."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str = ""
    """KAFKA_BOOTSTRAP: ``host:port[,host:port]`` of a Kafka cluster; empty means
    the single-node Apache Kafka that ``reports-pipeline up`` runs as a child."""

    clickhouse_url: str = ""
    """CLICKHOUSE_URL: ``http(s)://user:password@host:port`` of a ClickHouse server;
    empty means embedded chDB under the data directory."""

    database: str = "reports"
    """REPORTS_DATABASE: ClickHouse database holding every table."""

    topic_prefix: str = "reports"
    """REPORTS_TOPIC_PREFIX: prefix of every topic name (``<prefix>.changes`` ...)."""

    cluster: str = "default"
    """REPORTS_CLUSTER: name of the Kubernetes cluster the reports belong to."""

    write_timeout: float = 10.0
    """REPORTS_WRITE_TIMEOUT: seconds a write waits for the committer's answer."""

    watch_cache_size: int = 10000
    """REPORTS_WATCH_CACHE_SIZE: change-log events each frontend keeps in memory
    (about 7 KB each for a Kyverno report): the history a watch can resume from."""

    object_cache_mib: int = 512
    """REPORTS_OBJECT_CACHE_MIB: memory each frontend keeps every object in,
    compressed (a Kyverno report in about 400 bytes with its key: a million
    in about 380 MiB), for the GETs of keys its watch cache no longer holds;
    beyond it the oldest are let go and read from ClickHouse. 0: none kept."""

    max_body_bytes: int = 3 * 1024 * 1024
    """REPORTS_MAX_BODY_BYTES: largest request body accepted (413 beyond)."""

    max_url_bytes: int = 32 * 1024
    """REPORTS_MAX_URL_BYTES: longest request URL, query included (414 beyond)."""

    max_header_bytes: int = 48 * 1024
    """REPORTS_MAX_HEADER_BYTES: largest request headers, all together (431
    beyond). URL and headers together stay under 80 KiB, where the HTTP parser
    stops on its own."""

    materialize_batch: int = 2000
    """REPORTS_MATERIALIZE_BATCH: most changes written to ClickHouse in one
    insert, and aggregated together. Batches only fill while a reader is
    behind; larger ones let it catch up, as a batch costs the same number of
    ClickHouse inserts and window records however many changes it holds."""

    materialize_interval: float = 1.0
    """REPORTS_MATERIALIZE_INTERVAL: seconds the materializer and the aggregating
    agent wait to fill a batch: each batch is one insert per ClickHouse table,
    and every insert a part that ClickHouse merges again (at 0.25 s, merging
    took a third of a core at 250 writes/s). Reads never wait for it."""

    results_ttl_days: int = 90
    """REPORTS_RESULTS_TTL_DAYS: how long the results history is kept."""

    window_seconds: int = 60
    """REPORTS_WINDOW_SECONDS: size of the tumbling windows of activity."""

    changes_retention_hours: float = 168.0
    """REPORTS_CHANGES_RETENTION_HOURS: how long the change log keeps a change
    (ClickHouse keeps the history; the log must outlast any materializer outage)."""

    changes_retention_bytes: int = 4 * 1024**3
    """REPORTS_CHANGES_RETENTION_BYTES: most bytes the change log keeps."""

    requests_retention_minutes: float = 60.0
    """REPORTS_REQUESTS_RETENTION_MINUTES: how long write requests and replies are
    kept (a write waits seconds for its reply)."""

    events_retention_hours: float = 168.0
    """REPORTS_EVENTS_RETENTION_HOURS: how long result events are kept."""

    summaries_retention_days: float = 30.0
    """REPORTS_SUMMARIES_RETENTION_DAYS: the summaries topic is compacted (the last
    record per key); window records older than this are deleted. Current counts
    are published again every day, so they never age out."""

    replication_factor: int = 0
    """REPORTS_REPLICATION_FACTOR: replicas of every topic the system creates, its
    own (public and internal) and Faust's; 0: 3 where the Kafka cluster has
    three or more brokers, else as many as it has. A topic that exists keeps
    its replicas (the log says when they are fewer)."""

    min_insync_replicas: int = 0
    """REPORTS_MIN_INSYNC_REPLICAS: ``min.insync.replicas`` of those topics, the
    replicas a write must reach before it is acknowledged; 0: 2 where they
    have three or more replicas, else 1."""

    transactional_id: str = ""
    """REPORTS_TRANSACTIONAL_ID: the committer's Kafka transactional.id (default
    ``<prefix>-committer``). Every worker of one deployment uses the same, so a
    new committer fences the one it replaces."""

    committer_cache_keys: int = 2000
    """REPORTS_COMMITTER_CACHE_KEYS: objects whose latest version the committer
    keeps in memory (those written last) beyond those ClickHouse does not
    hold yet."""

    instance_id: str = ""
    """REPORTS_INSTANCE_ID: a stable name of this worker (static Kafka group
    membership: a restarted worker takes its partitions back at once instead of
    after the session timeout). ``up`` derives one from its data directory."""

    kafka_heap: str = "256m"
    """REPORTS_KAFKA_HEAP: Java heap of the embedded Kafka broker."""

    analytics_timeout: float = 30.0
    """REPORTS_ANALYTICS_TIMEOUT: seconds an analytics query may run (then 504)."""

    analytics_max_rows: int = 100_000
    """REPORTS_ANALYTICS_MAX_ROWS: most rows an analytics query may return."""

    analytics_max_memory_mb: int = 1024
    """REPORTS_ANALYTICS_MAX_MEMORY_MB: memory one analytics query may use."""

    analytics_threads: int = 1
    """REPORTS_ANALYTICS_THREADS: ClickHouse threads one analytics query may use,
    and how many analytics queries run at once; they never run on the threads
    that serve the API and the pipeline."""

    authz_cache_seconds: float = 10.0
    """REPORTS_AUTHZ_CACHE_SECONDS: how long a TokenReview's or a
    SubjectAccessReview's answer is reused."""

    chdb_cache_mb: int = 256
    """REPORTS_CHDB_CACHE_MB: memory the embedded ClickHouse (chDB) may keep in
    its caches (marks, primary indexes, compiled expressions, query conditions),
    split between them. ClickHouse's own defaults are sized for a server of its
    own (5 GiB for the mark cache alone), not for a process shared with the
    frontend and the worker."""

    chdb_merge_nice: int = 10
    """REPORTS_CHDB_MERGE_NICE: the Linux nice value of the embedded
    ClickHouse's merges (-20 to 19; 0: as every other thread). Merging the
    materializer's parts is background work: on a machine the frontend shares
    with it, its bursts took CPU from the event loop that answers writes.
    ClickHouse applies it only with CAP_SYS_NICE (as root, for one)."""

    malloc_trim_seconds: float = 5.0
    """REPORTS_MALLOC_TRIM_SECONDS: how often a process hands the memory it has
    freed back to the system (glibc's ``malloc_trim``); 0: never. A trim of
    ``up`` holding a million reports took 8 ms on average, on a thread
    (``reports_malloc_trim_seconds``); every 30 s, ``up`` still held 270 MB
    that a trim then returned when the bench read its memory at rest."""

    malloc_arenas: int = 2
    """REPORTS_MALLOC_ARENAS: most glibc malloc arenas per process (as
    ``MALLOC_ARENA_MAX``, which wins when set); 0: glibc's default, eight per
    core, each keeping what its threads freed."""

    kafka_cache: str = ""
    """REPORTS_KAFKA_CACHE: where the embedded Kafka's jars are cached (default
    ``~/.cache/reports-pipeline``)."""

    @property
    def changes_topic(self) -> str:
        return f"{self.topic_prefix}.changes"

    @property
    def requests_topic(self) -> str:
        return f"{self.topic_prefix}.requests"

    @property
    def replies_topic(self) -> str:
        return f"{self.topic_prefix}.replies"

    @property
    def result_events_topic(self) -> str:
        return f"{self.topic_prefix}.result-events"

    @property
    def summaries_topic(self) -> str:
        return f"{self.topic_prefix}.summaries"

    @property
    def committer_transactional_id(self) -> str:
        return self.transactional_id or f"{self.topic_prefix}-committer"

    @property
    def committer_group(self) -> str:
        return f"{self.topic_prefix}-committer"

    @property
    def materializer_group(self) -> str:
        return f"{self.topic_prefix}-materializer"

    @property
    def app_id(self) -> str:
        return f"{self.topic_prefix}-pipeline"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        env = os.environ if env is None else env
        names = {"kafka_bootstrap": "KAFKA_BOOTSTRAP", "clickhouse_url": "CLICKHOUSE_URL"}
        values: dict[str, object] = {}
        for f in fields(cls):
            var = names.get(f.name, "REPORTS_" + f.name.upper())
            if var in env:
                convert = {"int": int, "float": float}.get(str(f.type), str)
                try:
                    values[f.name] = convert(env[var])
                except ValueError as err:
                    raise ValueError(f"{var}={env[var]!r} is not a valid {f.type}") from err
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)  # type: ignore[arg-type]
        if not _IDENT.match(settings.database):
            raise ValueError(f"REPORTS_DATABASE {settings.database!r} is not a plain identifier")
        if not -20 <= settings.chdb_merge_nice <= 19:
            raise ValueError(f"REPORTS_CHDB_MERGE_NICE {settings.chdb_merge_nice} is not a nice"
                             " value (-20 to 19)")
        return settings
