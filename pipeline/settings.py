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
    the embedded broker that ``reports-pipeline up`` starts."""

    clickhouse_url: str = ""
    """CLICKHOUSE_URL: ``http(s)://user:password@host:port`` of a ClickHouse server;
    empty means embedded chDB under the data directory."""

    database: str = "reports"
    """REPORTS_DATABASE: ClickHouse database holding every table."""

    topic_prefix: str = "reports"
    """REPORTS_TOPIC_PREFIX: prefix of every topic name (``<prefix>.changes`` ...)."""

    cluster: str = "default"
    """REPORTS_CLUSTER: name of the Kubernetes cluster the reports belong to."""

    fetch_max_wait_ms: int = 5
    """REPORTS_FETCH_MAX_WAIT_MS: consumer long-poll bound. The embedded broker
    answers a fetch only when this expires, so it bounds delivery latency."""

    write_timeout: float = 10.0
    """REPORTS_WRITE_TIMEOUT: seconds a write waits for the committer's answer."""

    watch_cache_size: int = 20000
    """REPORTS_WATCH_CACHE_SIZE: change-log events each frontend keeps in memory."""

    max_body_bytes: int = 3 * 1024 * 1024
    """REPORTS_MAX_BODY_BYTES: largest request body accepted (413 beyond)."""

    materialize_batch: int = 500
    """REPORTS_MATERIALIZE_BATCH: most changes written to ClickHouse in one insert."""

    materialize_interval: float = 0.25
    """REPORTS_MATERIALIZE_INTERVAL: seconds the materializer waits to fill a batch."""

    results_ttl_days: int = 90
    """REPORTS_RESULTS_TTL_DAYS: how long the results history is kept."""

    window_seconds: int = 60
    """REPORTS_WINDOW_SECONDS: size of the tumbling windows of activity."""

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
        return settings
