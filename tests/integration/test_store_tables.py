"""Every MergeTree table of the store removes the parts a merge replaced within
a cleanup period, one by one: left to ClickHouse's defaults, replaced parts
piled up in memory for minutes under load and were removed by a hundred new
threads at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.clickhouse.connection import Connection

pytestmark = pytest.mark.integration


async def test_every_table_cleans_up_replaced_parts_promptly(make_settings,  # type: ignore[no-untyped-def]
                                                             data_dir: Path) -> None:
    settings = make_settings()
    clickhouse = Connection(settings, data_dir=data_dir)
    await clickhouse.start()
    try:
        def tables(client):  # type: ignore[no-untyped-def]
            return client.query(
                "SELECT name, create_table_query FROM system.tables WHERE database = {db:String}"
                " AND engine LIKE '%MergeTree' AND name != 'schema_migrations'",
                parameters={"db": settings.database}).result_rows
        found = dict(await clickhouse.run(tables))
    finally:
        await clickhouse.close()
    assert {"reports", "results", "changes_progress", "policy_counts"} <= found.keys()
    for name, ddl in found.items():
        assert "max_cleanup_delay_period = 30" in ddl, name
        assert "concurrent_part_removal_threshold = 1000000" in ddl, name


async def test_the_embedded_clickhouse_merges_at_the_nice_value_set(  # type: ignore[no-untyped-def]
        make_settings, data_dir: Path) -> None:
    settings = make_settings()
    clickhouse = Connection(settings, data_dir=data_dir)
    await clickhouse.start()
    try:
        rows = await clickhouse.run(lambda client: client.query(
            "SELECT value FROM system.server_settings"
            " WHERE name = 'os_threads_nice_value_merge_mutate'").result_rows)
    finally:
        await clickhouse.close()
    assert rows == [(str(settings.chdb_merge_nice),)] and settings.chdb_merge_nice > 0
