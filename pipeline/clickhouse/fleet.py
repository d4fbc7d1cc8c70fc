"""The fleet's part of ClickHouse: each source's rows with the position they
end at, the positions it resumes from, and each source's state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from pipeline.clickhouse import rows
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.fleetrows import (
    FLEET_REPORT_COLUMNS,
    POLICY_COUNT_COLUMNS,
    POLICY_TOTAL_COLUMNS,
    POLICY_WINDOW_COLUMNS,
    Batch,
)

Position = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class SourceState:
    """A source as the fleet last recorded it, with its newest change."""
    cluster: str
    bootstrap: str
    prefix: str
    state: str
    detail: str
    last_contact: datetime
    last_change: datetime | None


class FleetStore:
    """The fleet's rows and positions on ``connection``."""

    def __init__(self, connection: Connection):
        self._connection = connection

    async def positions(self, cluster: str) -> dict[Position, int]:
        """The offset of the last record taken from each of ``cluster``'s
        partitions (-1: start from the beginning)."""
        def query(client: Client) -> dict[Position, int]:
            found = client.query(
                "SELECT topic, partition, offset FROM fleet_progress FINAL"
                " WHERE cluster = {c:String}", parameters={"c": cluster}).result_rows
            return {(str(t), int(p)): int(o) for t, p, o in found}
        return await self._connection.run(query)

    async def write(self, batch: Batch) -> None:
        """A batch's rows, then the positions it ends at. Safe to repeat: a
        batch written twice collapses into the same rows (each has its
        version), so a crash between the two leaves nothing counted twice.
        The reports, the results and the trend tables are inserted at once
        (each on a thread and client of its own); the positions once all of
        them are stored."""
        def raw(table: str, columns: Sequence[str], found: list[rows.Row]
                ) -> Callable[[Client], object]:
            return lambda client: client.raw_insert(table, columns, rows.encode(found),
                                                    fmt=rows.FORMAT)

        def trends(client: Client) -> None:
            for table, columns, found in (("policy_counts", POLICY_COUNT_COLUMNS, batch.counts),
                                          ("policy_windows", POLICY_WINDOW_COLUMNS,
                                           batch.windows),
                                          ("policy_totals_windows", POLICY_TOTAL_COLUMNS,
                                           batch.totals)):
                if found:
                    client.raw_insert(table, columns, rows.encode_values(found),
                                      fmt=rows.FORMAT)
        inserts: list[Callable[[Client], object]] = [trends]
        if batch.reports:
            inserts.append(raw("fleet_reports", FLEET_REPORT_COLUMNS, batch.reports))
        if batch.results:
            inserts.append(raw("results", rows.RESULT_COLUMNS, batch.results))
        done = await asyncio.gather(*(self._connection.run(i, operation="write")
                                      for i in inserts), return_exceptions=True)
        for outcome in done:  # every insert over, stored or not, before one is told
            if isinstance(outcome, BaseException):
                raise outcome
        await self._connection.run(lambda client: self._insert_positions(client, batch.positions),
                                   operation="write")

    async def set_positions(self, cluster: str, ends: Mapping[Position, int]) -> None:
        """Move ``cluster``'s positions (a resync starts its log again)."""
        now = datetime.now(UTC)
        await self._connection.run(
            lambda client: self._insert_positions(
                client, {(cluster, t, p): (o, now) for (t, p), o in ends.items()}),
            operation="write")

    @staticmethod
    def _insert_positions(client: Client,
                          positions: Mapping[tuple[str, str, int], tuple[int, datetime]]
                          ) -> None:
        if positions:
            client.insert("fleet_progress",
                          [[c, t, p, o, at] for (c, t, p), (o, at) in positions.items()],
                          column_names=("cluster", "topic", "partition", "offset",
                                        "last_change"))

    async def record_states(self, states: Sequence[SourceState]) -> None:
        """Each source's state as the fleet sees it now, in one insert. The
        row's version is the time of this call, not of the insert: of two
        calls whose inserts run the other way round (the fleet's round of
        every source and a follower's change), the one seen last is kept."""
        if not states:
            return
        seen = datetime.now(UTC)
        await self._connection.run(lambda client: client.insert(
            "fleet_sources", [[s.cluster, s.bootstrap, s.prefix, s.state, s.detail,
                               s.last_contact, seen] for s in states],
            column_names=("cluster", "bootstrap", "prefix", "state", "detail",
                          "last_contact", "updated")), operation="write")

    async def states(self) -> list[SourceState]:
        """Every source recorded, with the commit time of its newest change."""
        def query(client: Client) -> list[SourceState]:
            found = client.query(
                "SELECT s.cluster, s.bootstrap, s.prefix, s.state, s.detail, s.last_contact,"
                " p.last_change FROM (SELECT * FROM fleet_sources FINAL) AS s"
                " LEFT JOIN (SELECT cluster, max(last_change) AS last_change"
                "            FROM fleet_progress FINAL WHERE topic LIKE '%.changes'"
                "            GROUP BY cluster) AS p ON p.cluster = s.cluster"
                " ORDER BY s.cluster", settings={"join_use_nulls": 1}).result_rows
            return [SourceState(str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]),
                                _utc(r[5]), None if r[6] is None else _utc(r[6]))
                    for r in found]
        return await self._connection.run(query)

    async def forget(self, cluster: str, keep: set[tuple[str, str, str]], at_version: int
                     ) -> int:
        """Mark deleted, at ``at_version``, every current report of ``cluster``
        not in ``keep`` ((resource, namespace, name): what a resync listed at
        that version), so a report deleted while the fleet could not follow
        goes too. How many."""
        def command(client: Client) -> int:
            found = client.query(
                "SELECT resource, namespace, name, uid, created FROM fleet_reports FINAL"
                " WHERE cluster = {c:String}", parameters={"c": cluster}).result_rows
            now = rows.stamp(datetime.now(UTC))
            gone = [[cluster, r, ns, name, uid, at_version, 1, rows.stamp(_utc(created)), now, {},
                     "", "", 0, 0, 0, 0, 0, "{}"]
                    for r, ns, name, uid, created in found if (r, ns, name) not in keep]
            if gone:
                client.raw_insert("fleet_reports", FLEET_REPORT_COLUMNS, rows.encode(gone),
                                  fmt=rows.FORMAT)
            return len(gone)
        return await self._connection.run(command, operation="write")


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
