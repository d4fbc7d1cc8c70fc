"""What the committer reads of ClickHouse when it starts and when a key
leaves its cache: the materializer's progress, the objects that exist, and
the latest state of keys."""

from __future__ import annotations

from collections.abc import Iterable

from clickhouse_connect.driver.client import Client

from pipeline.clickhouse import reads
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.progress import ProgressReads
from pipeline.model.objects import key_id
from pipeline.model.versions import Current, Progress


class CommitterQueries:
    """The committer's reads on ``connection``."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._progress = ProgressReads(connection)

    async def progress(self, topic: str, partition: int = 0) -> Progress | None:
        return await self._progress.progress(topic, partition)

    async def watermark(self) -> int:
        return await self._progress.watermark()

    async def live_keys(self) -> dict[int, None]:
        """The ``key_id`` of every object not deleted (a dict's keys: the
        garbage collector leaves a dict of numbers alone), read a block at a
        time: a million rows' tuples of strings, held at once, take 250 MB
        or more."""
        def query(client: Client) -> dict[int, None]:
            live: dict[int, None] = {}
            with client.query_row_block_stream(
                    "SELECT resource, namespace, name FROM reports FINAL") as blocks:
                for block in blocks:
                    live.update((key_id((r[0], r[1], r[2])), None) for r in block)
            return live
        return await self._connection.run(query)

    async def current(self, keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str],
                                                                           Current]:
        return await reads.current(self._connection, keys)
