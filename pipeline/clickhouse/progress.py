"""How far the materializer has got: the position it records in ClickHouse
beside each batch it writes (``changes_progress``). Read by the materializer
and the committer when they start, by the frontend's change-log cache and by
the lag monitor."""

from __future__ import annotations

from clickhouse_connect.driver.client import Client

from pipeline.clickhouse.connection import Connection
from pipeline.model.versions import Progress


class ProgressReads:
    """The materializer's recorded progress on ``connection``."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._topic = connection.settings.changes_topic

    async def progress(self, topic: str, partition: int = 0) -> Progress | None:
        def query(client: Client) -> Progress | None:
            rows = client.query(
                "SELECT offset, resource_version FROM changes_progress FINAL"
                " WHERE topic = {t:String} AND partition = {p:UInt32}",
                parameters={"t": topic, "p": partition}).result_rows
            return Progress(int(rows[0][0]), int(rows[0][1])) if rows else None
        return await self._connection.run(query)

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
                parameters={"t": self._topic}).result_rows[0][0])
        return await self._connection.run(query)
