"""Analysts' queries (the frontend's analytics endpoint, ``trends``, the
dashboard): read-only, bounded, on threads of their own, so they never wait
for, nor hold up, the API's and the pipeline's queries."""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError

from pipeline.clickhouse.connection import Connection, StoreError, reason, where
from pipeline.model.storage import AnalyticsTimeout, QueryError
from pipeline.observe import metrics
from pipeline.runtime.logs import quiet
from pipeline.settings import Settings


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
        return QueryError(f"ClickHouse at {where(settings)} cannot be used: {reason(err)}")
    return QueryError(text)


def analytics_limits(settings: Settings) -> dict[str, str]:
    """An analysts' session: bounded in time, rows, memory and threads, and
    read-only last (after which no setting can be changed)."""
    s = settings
    return {"max_execution_time": str(max(1, int(s.analytics_timeout))),
            "max_result_rows": str(s.analytics_max_rows),
            "result_overflow_mode": "throw",
            "max_memory_usage": str(s.analytics_max_memory_mb * 1024 * 1024),
            "max_threads": str(max(1, s.analytics_threads)),
            "readonly": "1"}


class AnalyticsQueries:
    """Analysts' queries on ``connection``'s ClickHouse, each on a read-only
    client of its thread (REPORTS_ANALYTICS_THREADS of them)."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._settings = connection.settings
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=max(1, self._settings.analytics_threads),
                                        thread_name_prefix="analytics")

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
                    client = self._local.readonly = self._connection.connect(
                        self._settings.database, session=analytics_limits(self._settings))
                with metrics.CLICKHOUSE_SECONDS.labels("analytics").time():
                    result = client.query(marked, parameters=parameters or {})
            except ClickHouseError as err:
                raise _analytics_error(err, self._settings) from err
            return list(result.column_names), [tuple(r) for r in result.result_rows]
        return await asyncio.get_running_loop().run_in_executor(self._pool, query)

    async def check_analytics(self, table: str = "policy_windows") -> None:
        """Raise StoreError, saying what to do, unless an analyst's session can
        read ``table`` (a trend table the worker keeps)."""
        at = where(self._settings)
        database = self._settings.database

        def probe() -> None:
            try:
                with quiet("clickhouse_connect", "urllib3"):
                    client = self._connection.connect(
                        None, session=analytics_limits(self._settings))
                found = client.query(
                        "SELECT (SELECT count() FROM system.databases WHERE name = {db:String}),"
                    " (SELECT count() FROM system.tables WHERE database = {db:String}"
                    " AND name = {table:String})",
                    parameters={"db": database, "table": table}).result_rows
            except ClickHouseError as err:
                raise StoreError(f"ClickHouse at {at} cannot be used: {reason(err)};"
                                 " check CLICKHOUSE_URL") from err
            [(databases, tables)] = found
            if not databases:
                raise StoreError(f"ClickHouse at {at} has no database {database!r}; check"
                                 " REPORTS_DATABASE (a worker against this server makes it)")
            if not tables:
                raise StoreError(f"ClickHouse at {at} has no table {database}.{table};"
                                 " start a worker against this server first (it makes it)")
        await asyncio.get_running_loop().run_in_executor(self._pool, probe)

    async def cancel_analytics(self, tag: str) -> None:
        """Stop the analytics query ``tag`` (its client went away)."""
        if not re.fullmatch(r"[0-9a-f-]+", tag):
            raise ValueError(f"not a query tag: {tag!r}")

        def kill() -> None:
            admin = self._connection.connect(None)
            try:
                admin.command(f"KILL QUERY WHERE query LIKE '/* analytics:{tag} */%' ASYNC")
            finally:
                self._connection.discard(admin)
        await asyncio.get_running_loop().run_in_executor(None, kill)

    async def close(self) -> None:
        """Stop the queries not yet begun and wait for the others (their
        clients close with the connection's)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
