"""The aggregation agent's part of ClickHouse: its trend tables' rows, and
the reads its rebuild of the contributions makes (``AggregateStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clickhouse_connect.driver.client import Client

from pipeline.clickhouse import rows as rows_format
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.progress import ProgressReads
from pipeline.clickhouse.reads import StoredObject
from pipeline.model import objects


class AggregateWrites:
    """The agent's rows written on ``connection``, and what it reads there:
    the materializer's progress, and the objects' versions its rebuild of
    the contributions starts from."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._progress = ProgressReads(connection)

    async def watermark(self) -> int:
        return await self._progress.watermark()

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
        return await self._connection.run(query)

    async def write_policy_counts(self, rows: Sequence[Sequence[Any]]) -> None:
        await self._insert("policy_counts", rows, (
            "cluster", "namespace", "policy", *objects.SUMMARY_FIELDS, "resource_version",
            "updated"))

    async def write_policy_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        await self._insert("policy_windows", rows, (
            "cluster", "namespace", "policy", "window_start", "window_end", "results_written",
            "new_failures", "resolved_failures", *objects.SUMMARY_FIELDS, "resource_version",
            "updated"))

    async def write_policy_totals_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        await self._insert("policy_totals_windows", rows, (
            "cluster", "policy", "window_start", "window_end", *objects.SUMMARY_FIELDS,
            "resource_version", "updated"))

    async def _insert(self, table: str, rows: Sequence[Sequence[Any]],
                      columns: Sequence[str]) -> None:
        await self._connection.run(lambda client: client.raw_insert(
            table, columns, rows_format.encode_values(rows), fmt=rows_format.FORMAT))
