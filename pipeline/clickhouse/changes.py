"""The materializer's writes: committed changes into the reports and results
tables, each batch with the position it ends at."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from pipeline.clickhouse import rows
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.progress import ProgressReads
from pipeline.model.messages import Change
from pipeline.model.versions import Progress


class ChangeWrites:
    """Batches of changes written on ``connection``, and the position the
    last one recorded (where to resume)."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._cluster = connection.settings.cluster
        self._progress = ProgressReads(connection)

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
            reports, results = rows.change_rows(changes, committed, cluster=self._cluster,
                                                object_json=object_json)
            progress = rows.encode([[topic, partition, offset,
                                     max(c.resource_version for c in changes)]])
            if reports:
                client.raw_insert("reports", rows.REPORT_COLUMNS, reports, fmt=rows.FORMAT)
            if results:
                client.raw_insert("results", rows.RESULT_COLUMNS, results, fmt=rows.FORMAT)
            client.raw_insert("changes_progress", rows.PROGRESS_COLUMNS, progress,
                              fmt=rows.FORMAT)
        await self._connection.run(insert, operation="write")

    async def progress(self, topic: str, partition: int = 0) -> Progress | None:
        return await self._progress.progress(topic, partition)
