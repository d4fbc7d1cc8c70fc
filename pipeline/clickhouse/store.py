"""ClickHouse adapter: schema migrations, materializing changes, serving reads.

Works on a ClickHouse server (``CLICKHOUSE_URL``) or on embedded chDB under a
data directory. Calls are blocking; each runs on a small thread pool, one
client per thread, behind ``async`` methods. All values are bound server-side.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError

from pipeline.clickhouse import rows
from pipeline.clickhouse.coalesce import Coalesced
from pipeline.model import objects
from pipeline.model.messages import Change
from pipeline.model.storage import AnalyticsTimeout, QueryError, StoredObject, StoreError
from pipeline.model.versions import Current, Progress
from pipeline.observe import metrics
from pipeline.runtime.logs import quiet
from pipeline.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

def _reason(err: Exception) -> str:
    """The gist of a ClickHouse client error, on one line."""
    text = str(err).strip()
    refused = re.search(r"\[Errno -?\d+\] ([^\"')\n]+)", text)
    if refused:
        return refused.group(1).strip()
    return (text.splitlines() or [type(err).__name__])[0][:300]


def _where(settings: Settings) -> str:
    """The ClickHouse in use, for messages (without a password)."""
    return redacted(settings.clickhouse_url) or "the embedded ClickHouse"


def redacted(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _analytics_error(err: Exception, settings: Settings) -> QueryError:
    """What an analyst is told when ClickHouse refuses or stops a query."""
    text = str(err)
    if "TIMEOUT_EXCEEDED" in text:
        return AnalyticsTimeout(f"the query ran longer than {settings.analytics_timeout:g} s"
                                " (REPORTS_ANALYTICS_TIMEOUT) and was stopped")
    if "TOO_MANY_ROWS_OR_BYTES" in text:
        return QueryError(f"the result has more than {settings.analytics_max_rows} rows"
                          " (REPORTS_ANALYTICS_MAX_ROWS): aggregate, or add a LIMIT")
    if "MEMORY_LIMIT_EXCEEDED" in text:
        return QueryError(f"the query needs more than {settings.analytics_max_memory_mb} MB"
                          " (REPORTS_ANALYTICS_MAX_MEMORY_MB)")
    if "QUERY_WAS_CANCELLED" in text:
        return QueryError("the query was cancelled")
    if isinstance(err, OperationalError):  # the server, not the query
        return QueryError(f"ClickHouse at {_where(settings)} cannot be used: {_reason(err)}")
    return QueryError(text)


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


def chdb_caches(megabytes: int) -> dict[str, str]:
    """chDB start-up options bounding ClickHouse's caches to ``megabytes``."""
    budget = max(megabytes, 16) * 1024 * 1024
    return {name: str(int(budget * share)) for name, share in CHDB_CACHE_SHARES.items()}


class ReportStore:
    """ClickHouse tables of the project, reached from a pool of threads."""

    def __init__(self, settings: Settings, *, data_dir: Path | None = None, threads: int = 4):
        self._settings = settings
        self._data_dir = data_dir
        self._local = threading.local()
        self._clients: list[Client] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="clickhouse")
        # analysts' queries never wait for, nor hold up, the API's and the pipeline's
        self._analytics_pool = ThreadPoolExecutor(
            max_workers=max(1, settings.analytics_threads), thread_name_prefix="analytics")
        self._gets: Coalesced[tuple[str, str, str], Current] = Coalesced(self.current)

    # -- connection ---------------------------------------------------------
    def _connect(self, database: str | None, *, readonly: bool = False) -> Client:
        settings = self._analytics_limits() if readonly else None
        if self._settings.clickhouse_url:
            client = clickhouse_connect.get_client(dsn=self._settings.clickhouse_url,
                                                   database=database or "default",
                                                   settings=settings)
        else:
            if self._data_dir is None:
                raise StoreError("embedded ClickHouse needs a data directory")
            path = self._data_dir / "clickhouse"
            path.mkdir(parents=True, exist_ok=True)
            client = clickhouse_connect.get_client(
                dsn=f"chdb://{path.resolve()}", database=database, settings=settings,
                chdb_options=chdb_caches(self._settings.chdb_cache_mb))
        with self._lock:
            self._clients.append(client)
        return client

    def _client(self) -> Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._connect(self._settings.database)
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
                    admin = self._connect(None)
                admin.command(f"CREATE DATABASE IF NOT EXISTS `{self._settings.database}`")
            except ClickHouseError as err:
                raise StoreError(f"ClickHouse at {_where(self._settings)} cannot be used:"
                                 f" {_reason(err)}") from err
        await asyncio.get_running_loop().run_in_executor(self._pool, setup)
        await self.run(self._migrate)
        await self.run(self._retention)

    def _retention(self, client: Client) -> None:
        """Keep the results history as long as REPORTS_RESULTS_TTL_DAYS says."""
        days = int(self._settings.results_ttl_days)
        ttl = f"toDateTime(committed) + toIntervalDay({days})"
        current = client.query(
            "SELECT create_table_query FROM system.tables WHERE database = {db:String}"
            " AND name = 'results'", parameters={"db": self._settings.database}).result_rows
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

    def _analytics_limits(self) -> dict[str, str]:
        """An analysts' session: bounded in time, rows, memory and threads, and
        read-only last (after which no setting can be changed)."""
        s = self._settings
        return {"max_execution_time": str(max(1, int(s.analytics_timeout))),
                "max_result_rows": str(s.analytics_max_rows),
                "result_overflow_mode": "throw",
                "max_memory_usage": str(s.analytics_max_memory_mb * 1024 * 1024),
                "max_threads": str(max(1, s.analytics_threads)),
                "readonly": "1"}

    async def analytics(self, sql: str, parameters: dict[str, Any] | None = None, *,
                        tag: str = "") -> tuple[list[str], list[tuple[Any, ...]]]:
        """A read-only query for analysts: (column names, rows). Runs on its own
        threads, on a client whose session is ``readonly`` and bounded
        (REPORTS_ANALYTICS_*), so it cannot change anything or run away;
        ``tag`` names it for ``cancel_analytics``."""
        marked = f"/* analytics:{tag} */ {sql}" if tag else sql

        def query() -> tuple[list[str], list[tuple[Any, ...]]]:
            try:
                client = getattr(self._local, "readonly", None)
                if client is None:
                    client = self._local.readonly = self._connect(self._settings.database,
                                                                  readonly=True)
                with metrics.CLICKHOUSE_SECONDS.labels("analytics").time():
                    result = client.query(marked, parameters=parameters or {})
            except ClickHouseError as err:
                raise _analytics_error(err, self._settings) from err
            return list(result.column_names), [tuple(r) for r in result.result_rows]
        return await asyncio.get_running_loop().run_in_executor(self._analytics_pool, query)

    async def check_analytics(self, table: str = "policy_windows") -> None:
        """Raise StoreError, saying what to do, unless an analyst's session can
        read ``table`` (a trend table the worker keeps)."""
        where = _where(self._settings)
        database = self._settings.database

        def probe() -> None:
            try:
                with quiet("clickhouse_connect", "urllib3"):
                    client = self._connect(None, readonly=True)
                found = client.query(
                        "SELECT (SELECT count() FROM system.databases WHERE name = {db:String}),"
                    " (SELECT count() FROM system.tables WHERE database = {db:String}"
                    " AND name = {table:String})",
                    parameters={"db": database, "table": table}).result_rows
            except ClickHouseError as err:
                raise StoreError(f"ClickHouse at {where} cannot be used: {_reason(err)};"
                                 " check CLICKHOUSE_URL") from err
            [(databases, tables)] = found
            if not databases:
                raise StoreError(f"ClickHouse at {where} has no database {database!r}; check"
                                 " REPORTS_DATABASE (a worker against this server makes it)")
            if not tables:
                raise StoreError(f"ClickHouse at {where} has no table {database}.{table};"
                                 " start a worker against this server first (it makes it)")
        await asyncio.get_running_loop().run_in_executor(self._analytics_pool, probe)

    async def cancel_analytics(self, tag: str) -> None:
        """Stop the analytics query ``tag`` (its client went away)."""
        if not re.fullmatch(r"[0-9a-f-]+", tag):
            raise ValueError(f"not a query tag: {tag!r}")

        def kill() -> None:
            admin = self._connect(None)
            try:
                admin.command(f"KILL QUERY WHERE query LIKE '/* analytics:{tag} */%' ASYNC")
            finally:
                with self._lock:
                    self._clients.remove(admin)
                admin.close()
        await asyncio.get_running_loop().run_in_executor(None, kill)

    async def close(self) -> None:
        await self._gets.close()
        self._pool.shutdown(wait=True)
        self._analytics_pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for client in self._clients:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - closing best-effort
                    log.debug("closing ClickHouse client failed", exc_info=True)
            self._clients.clear()

    # -- materializing ------------------------------------------------------
    async def write_changes(self, changes: Sequence[Change], *, topic: str, partition: int,
                            offset: int,
                            committed: datetime | Sequence[datetime] | None = None,
                            object_json: Sequence[bytes | None] | None = None) -> None:
        """Insert a batch of changes, then record progress: the change at
        ``offset`` of ``topic`` is the last one. Safe to repeat. ``committed``:
        when the batch, or each change, was committed (default: now).
        ``object_json``: each change's object as the log holds it (spares
        encoding it again)."""
        committed = committed or datetime.now(UTC)

        def insert(client: Client) -> None:
            # encoded in the store's thread, like the insert: hundreds of
            # reports a batch, too long a wait for the event loop's other work
            reports, results = rows.change_rows(changes, committed, cluster=self._settings.cluster,
                                                object_json=object_json)
            progress = rows.encode([[topic, partition, offset,
                                     max(c.resource_version for c in changes)]])
            if reports:
                client.raw_insert("reports", rows.REPORT_COLUMNS, reports, fmt=rows.FORMAT)
            if results:
                client.raw_insert("results", rows.RESULT_COLUMNS, results, fmt=rows.FORMAT)
            client.raw_insert("changes_progress", rows.PROGRESS_COLUMNS, progress,
                              fmt=rows.FORMAT)
        await self.run(insert, operation="write")

    async def write_policy_counts(self, rows: Sequence[Sequence[Any]]) -> None:
        await self.run(lambda client: client.insert("policy_counts", rows, column_names=(
            "cluster", "namespace", "policy", *objects.SUMMARY_FIELDS, "resource_version",
            "updated")))

    async def write_policy_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        await self.run(lambda client: client.insert("policy_windows", rows, column_names=(
            "cluster", "namespace", "policy", "window_start", "window_end", "results_written",
            "new_failures", "resolved_failures", *objects.SUMMARY_FIELDS, "resource_version",
            "updated")))

    async def write_policy_totals_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        await self.run(lambda client: client.insert("policy_totals_windows", rows, column_names=(
            "cluster", "policy", "window_start", "window_end", *objects.SUMMARY_FIELDS,
            "resource_version", "updated")))

    async def progress(self, topic: str, partition: int = 0) -> Progress | None:
        def query(client: Client) -> Progress | None:
            rows = client.query(
                "SELECT offset, resource_version FROM changes_progress FINAL"
                " WHERE topic = {t:String} AND partition = {p:UInt32}",
                parameters={"t": topic, "p": partition}).result_rows
            return Progress(int(rows[0][0]), int(rows[0][1])) if rows else None
        return await self.run(query)

    async def memory_tracked(self) -> int:
        """Bytes ClickHouse tracks as in use (MemoryTracking)."""
        def query(client: Client) -> int:
            rows = client.query("SELECT value FROM system.metrics"
                                " WHERE metric = 'MemoryTracking'").result_rows
            return int(rows[0][0]) if rows else 0
        return await self.run(query)

    async def watermark(self) -> int:
        """Highest resourceVersion materialized (0 when empty): every change up
        to it is in ClickHouse. Read from the materializer's progress (a row
        per batch until merged), not from the reports, whose size grows."""
        def query(client: Client) -> int:
            # Versions only grow: the largest of every row is the latest one,
            # with no FINAL (which merges every part at query time).
            return int(client.query(
                "SELECT max(resource_version) FROM changes_progress"
                " WHERE topic = {t:String}",
                parameters={"t": self._settings.changes_topic}).result_rows[0][0])
        return await self.run(query)

    async def live_keys(self) -> set[tuple[str, str, str]]:
        """(resource, namespace, name) of every object not deleted."""
        def query(client: Client) -> set[tuple[str, str, str]]:
            rows = client.query("SELECT resource, namespace, name FROM reports FINAL").result_rows
            return {(r[0], r[1], r[2]) for r in rows}
        return await self.run(query)

    # -- reads --------------------------------------------------------------
    async def current(self, keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str],
                                                                           Current]:
        """Latest committed state of the given (resource, namespace, name)
        keys: each key's rows newest first, the first taken (FINAL would merge
        every part's rows around the keys)."""
        wanted = list(keys)
        if not wanted:
            return {}

        def query(client: Client) -> dict[tuple[str, str, str], Current]:
            result = client.query(
                "SELECT resource, namespace, name, resource_version, deleted, object"
                " FROM reports WHERE (resource, namespace, name) IN {keys:Array(Tuple(String,"
                " String, String))} ORDER BY resource_version DESC LIMIT 1 BY resource,"
                " namespace, name", parameters={"keys": wanted},
                column_formats={"object": "bytes"})
            return {(r[0], r[1], r[2]): Current(int(r[3]), r[5], bool(r[4]))
                    for r in result.result_rows}
        return await self.run(query)

    async def get(self, resource: str, namespace: str, name: str) -> StoredObject | None:
        """The object's latest version, unless that is its deletion. Reads
        made while others are in flight are asked together (``current``)."""
        found = await self._gets.get((resource, namespace, name))
        if found is None or found.deleted:
            return None
        return StoredObject(found.resource_version, namespace, name, found.raw)

    async def versions_before(self, resource: str, before: int, *,
                              after: tuple[str, str] | None = None, limit: int = 1000
                              ) -> list[tuple[StoredObject, bool]]:
        """Per object in (namespace, name) order after ``after``: its latest
        stored version older than ``before``, and whether that was a deletion."""
        params: dict[str, Any] = {"r": resource, "before": before, "lim": limit,
                                  "ans": after[0] if after else "",
                                  "aname": after[1] if after else ""}
        sql = ("SELECT resource_version, namespace, name, object, deleted FROM reports"
               " WHERE resource = {r:String} AND resource_version < {before:UInt64}"
               + (" AND (namespace, name) > ({ans:String}, {aname:String})" if after else "")
               + " ORDER BY namespace, name, resource_version DESC LIMIT 1 BY namespace, name"
               " LIMIT {lim:UInt32}")

        def query(client: Client) -> list[tuple[StoredObject, bool]]:
            rows = client.query(sql, parameters=params).result_rows
            return [(StoredObject(int(r[0]), r[1], r[2], r[3]), bool(r[4])) for r in rows]
        return await self.run(query)

    async def versions(self, resource: str, wanted: Sequence[tuple[str, str, int]]
                       ) -> dict[tuple[str, str], StoredObject]:
        """The given (namespace, name, resourceVersion) versions of objects,
        while ClickHouse still holds them: a merge keeps only an object's
        newest version, so one that was replaced may be gone."""
        if not wanted:
            return {}
        sql = ("SELECT resource_version, namespace, name, object FROM reports"
               " WHERE resource = {r:String} AND namespace IN {nss:Array(String)}"
               " AND name IN {names:Array(String)}"
               " AND has({keys:Array(Tuple(String, String, UInt64))},"
               " (namespace, name, resource_version)) AND NOT deleted")
        params = {"r": resource, "nss": sorted({w[0] for w in wanted}),
                  "names": sorted({w[1] for w in wanted}), "keys": list(wanted)}

        def query(client: Client) -> dict[tuple[str, str], StoredObject]:
            rows = client.query(sql, parameters=params,
                                column_formats={"object": "bytes"}).result_rows
            return {(r[1], r[2]): StoredObject(int(r[0]), r[1], r[2], r[3]) for r in rows}
        return await self.run(query)

    async def list_page(self, resource: str, *, namespace: str | None,
                        conditions: Sequence[str] = (), params: dict[str, Any] | None = None,
                        after: tuple[str, str] | None = None, limit: int = 1000
                        ) -> list[StoredObject]:
        """Current objects in (namespace, name) order after ``after``: ``limit``
        of them, fewer only at the end. Extra ``conditions`` reference bound
        ``params``; callers build both.

        Read a span of keys at a time, a little longer than the objects still
        wanted, bounded by a key that many rows on (rows read in key order,
        stopping there). The span's rows are read as they lie, every version,
        and each key's newest kept here, as FINAL would (FINAL merges them in
        order inside ClickHouse, which costs more than reading them). The
        conditions are a column, judged on that newest version, and only
        matching objects' bodies leave ClickHouse, as bytes. A span that
        yields few objects (a selective condition, deletions, versions not
        yet merged) is followed by longer ones."""
        base = {**(params or {}), "r": resource}
        scope = ["resource = {r:String}"]
        if namespace is not None:
            scope.append("namespace = {ns:String}")
            base["ns"] = namespace
        matched = " AND ".join(f"({c})" for c in conditions) or "1"
        select = ("SELECT resource_version, namespace, name, deleted, " + matched
                  + " AS matched, if(matched AND NOT deleted, object, '') AS body FROM reports"
                  " WHERE ")

        def query(client: Client) -> list[StoredObject]:
            out: list[StoredObject] = []
            cursor, scale = after, 1
            while len(out) < limit:
                want = limit - len(out)
                # a little more than wanted, for versions not yet merged away
                span = min(scale * (want + want // 16 + 16), 1 << 20)
                bound = dict(base)
                where = scope + _past(namespace, cursor, bound)
                upper = client.query(
                    "SELECT namespace, name FROM reports WHERE " + " AND ".join(where)
                    + " ORDER BY namespace, name LIMIT 1 OFFSET {span:UInt32}",
                    parameters={**bound, "span": span - 1}).result_rows
                if upper:
                    where += _past(namespace, (upper[0][0], upper[0][1]), bound, upto=True)
                rows = client.query(select + " AND ".join(where), parameters=bound,
                                    column_formats={"body": "bytes"}).result_rows
                newest: dict[tuple[str, str], Sequence[Any]] = {}
                for row in rows:
                    have = newest.get((row[1], row[2]))
                    if have is None or row[0] > have[0]:
                        newest[(row[1], row[2])] = row
                found = [StoredObject(int(r[0]), r[1], r[2], r[5])
                         for _, r in sorted(newest.items()) if r[4] and not r[3]]
                out.extend(found[:want])
                if not upper:
                    break
                cursor = (upper[0][0], upper[0][1])
                if len(found) < want // 2:
                    scale *= 2
            return out
        return await self.run(query)


def _past(namespace: str | None, key: tuple[str, str] | None, params: dict[str, Any], *,
          upto: bool = False) -> list[str]:
    """The condition on keys past ``key`` (``upto``: up to it, inclusive), in
    forms the primary key's index can use; binds its parameters in
    ``params``."""
    if key is None:
        return []
    ns, name, op, namespaces = (("uns", "uname", "<=", "<=") if upto else
                                ("ans", "aname", ">", ">="))
    params.update({ns: key[0], name: key[1]})
    if namespace == key[0]:
        return [f"name {op} {{{name}:String}}"]
    return [f"namespace {namespaces} {{{ns}:String}} AND (namespace, name) {op}"
            f" ({{{ns}:String}}, {{{name}:String}})"]
