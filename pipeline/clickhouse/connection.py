"""The connection to ClickHouse that the other parts of this package share:
its clients (one per thread of a small pool), the thread that runs each
query behind ``async``, the schema migrations and retention applied at start.

Works on a ClickHouse server (``CLICKHOUSE_URL``) or on embedded chDB under a
data directory. Knows no table but the migrations' own: the queries of each
user of ClickHouse live in a part of their own, which runs them here.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources as importlib_resources
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from pipeline.model.storage import StoreError
from pipeline.observe import metrics
from pipeline.runtime.logs import quiet
from pipeline.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


def reason(err: Exception) -> str:
    """The gist of a ClickHouse client error, on one line."""
    text = str(err).strip()
    refused = re.search(r"\[Errno -?\d+\] ([^\"')\n]+)", text)
    if refused:
        return refused.group(1).strip()
    return (text.splitlines() or [type(err).__name__])[0][:300]


def where(settings: Settings) -> str:
    """The ClickHouse in use, for messages (without a password)."""
    return redacted(settings.clickhouse_url) or "the embedded ClickHouse"


def redacted(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def migrations() -> list[tuple[int, str, str]]:
    """(number, name, sql) of every migration shipped with the package, in order."""
    out = []
    for entry in importlib_resources.files("pipeline.clickhouse.migrations").iterdir():
        if entry.name.endswith(".sql"):
            number = int(entry.name.split("_", 1)[0])
            out.append((number, entry.name, entry.read_text()))
    return sorted(out)


def _statements(sql: str) -> list[str]:
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


#: how the embedded ClickHouse's cache budget is split (server settings,
#: passed to chDB as start-up options); each share in parts of the budget
CHDB_CACHE_SHARES = {
    "mark_cache_size": 0.4,
    "primary_index_cache_size": 0.2,
    "index_mark_cache_size": 0.1,
    "compiled_expression_cache_size": 0.1,
    "query_condition_cache_size": 0.1,
    "uncompressed_cache_size": 0.1,
}


def chdb_options(settings: Settings) -> dict[str, str]:
    """chDB's start-up options (server settings): ClickHouse's caches bounded
    to ``chdb_cache_mb``, its merges at the nice value ``chdb_merge_nice``."""
    budget = max(settings.chdb_cache_mb, 16) * 1024 * 1024
    options = {name: str(int(budget * share)) for name, share in CHDB_CACHE_SHARES.items()}
    if settings.chdb_merge_nice:
        options["os_threads_nice_value_merge_mutate"] = str(settings.chdb_merge_nice)
    return options


class Connection:
    """ClickHouse reached from a pool of threads, a client per thread; every
    client made here is closed by ``close``. Making one connects nothing (a
    thread's client is made by its first query), so a part built on it
    costs nothing until used."""

    def __init__(self, settings: Settings, *, data_dir: Path | None = None, threads: int = 4):
        self.settings = settings
        self._data_dir = data_dir
        self._local = threading.local()
        self._clients: list[Client] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="clickhouse")

    def connect(self, database: str | None, *,
                session: dict[str, str] | None = None) -> Client:
        """A new client on ``database`` (the server's default when None),
        its session set as ``session`` says; closed with the others."""
        if self.settings.clickhouse_url:
            client = clickhouse_connect.get_client(dsn=self.settings.clickhouse_url,
                                                   database=database or "default",
                                                   settings=session)
        else:
            if self._data_dir is None:
                raise StoreError("embedded ClickHouse needs a data directory")
            path = self._data_dir / "clickhouse"
            path.mkdir(parents=True, exist_ok=True)
            client = clickhouse_connect.get_client(
                dsn=f"chdb://{path.resolve()}", database=database, settings=session,
                chdb_options=chdb_options(self.settings))
        with self._lock:
            self._clients.append(client)
        return client

    def discard(self, client: Client) -> None:
        """Close ``client`` now, rather than with the others."""
        with self._lock:
            self._clients.remove(client)
        client.close()

    def _client(self) -> Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self.connect(self.settings.database)
        return client

    async def run(self, fn: Callable[[Client], T], *, operation: str = "read") -> T:
        timer = metrics.CLICKHOUSE_SECONDS.labels(operation)

        def call() -> T:
            try:
                with timer.time():
                    return fn(self._client())
            except ClickHouseError as err:
                raise StoreError(str(err)) from err
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def start(self) -> None:
        """Create the database and apply pending migrations."""
        def setup() -> None:
            try:
                with quiet("clickhouse_connect", "urllib3"):
                    admin = self.connect(None)
                admin.command(f"CREATE DATABASE IF NOT EXISTS `{self.settings.database}`")
            except ClickHouseError as err:
                raise StoreError(f"ClickHouse at {where(self.settings)} cannot be used:"
                                 f" {reason(err)}") from err
        await asyncio.get_running_loop().run_in_executor(self._pool, setup)
        await self.run(self._migrate)
        await self.run(self._retention)

    def _retention(self, client: Client) -> None:
        """Keep the results history as long as REPORTS_RESULTS_TTL_DAYS says."""
        days = int(self.settings.results_ttl_days)
        ttl = f"toDateTime(committed) + toIntervalDay({days})"
        current = client.query(
            "SELECT create_table_query FROM system.tables WHERE database = {db:String}"
            " AND name = 'results'", parameters={"db": self.settings.database}).result_rows
        if current and ttl not in current[0][0]:
            client.command(f"ALTER TABLE results MODIFY TTL {ttl}",
                           settings={"materialize_ttl_after_modify": 0})

    def _migrate(self, client: Client) -> None:
        client.command("""CREATE TABLE IF NOT EXISTS schema_migrations
            (version UInt32, name String, applied DateTime64(3, 'UTC') DEFAULT now64(3))
            ENGINE = ReplacingMergeTree ORDER BY version""")
        done = {r[0] for r in client.query("SELECT version FROM schema_migrations").result_rows}
        for number, name, sql in migrations():
            if number in done:
                continue
            for statement in _statements(sql):
                client.command(statement)
            client.insert("schema_migrations", [[number, name]], column_names=["version", "name"])
            log.info("applied migration %s", name)

    async def memory_tracked(self) -> int:
        """Bytes ClickHouse tracks as in use (MemoryTracking)."""
        def query(client: Client) -> int:
            rows = client.query("SELECT value FROM system.metrics"
                                " WHERE metric = 'MemoryTracking'").result_rows
            return int(rows[0][0]) if rows else 0
        return await self.run(query)

    async def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            for client in self._clients:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - closing best-effort
                    log.debug("closing ClickHouse client failed", exc_info=True)
            self._clients.clear()
