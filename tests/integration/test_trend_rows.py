"""The aggregation agent's trend rows in ClickHouse: read back as written,
their times included, and written without leaving anything for the garbage
collector's full collections (clickhouse-connect's ``insert`` kept every row
it was given in a cycle of its own, about 1,500 lists a second under load)."""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.clickhouse.aggregates import AggregateWrites
from pipeline.clickhouse.connection import Connection

pytestmark = pytest.mark.integration
ROWS = 500


async def test_trend_rows_are_stored_as_written_and_leave_no_cycles(  # type: ignore[no-untyped-def]
        make_settings, data_dir: Path) -> None:
    connection = Connection(make_settings(), data_dir=data_dir)
    await connection.start()
    writes = AggregateWrites(connection)
    now = datetime(2026, 12, 8, 1, 2, 3, 456000, tzinfo=UTC)
    start = datetime(2026, 12, 8, 1, 0, tzinfo=UTC)
    end = start + timedelta(minutes=1)
    counts = [["default", f"ns-{i}", "restrict-seccomp", 17, i, 0, 1, 0, 40 + i, now]
              for i in range(ROWS)]
    windows = [["default", f"ns-{i}", "restrict-seccomp", start, end, 19, 2, 1, 17, i, 0, 1, 0,
                40 + i, now] for i in range(ROWS)]
    totals = [["default", "restrict-seccomp", start, end, 17 * ROWS, 3, 0, 0, 0, 9, now]]
    try:
        await writes.write_policy_counts(counts[:1])  # the connection's first insert
        gc.collect()
        gc.disable()
        try:
            # rows of their own, let go of once written, as the agent's are
            await writes.write_policy_counts([list(r) for r in counts])
            await writes.write_policy_windows([list(r) for r in windows])
            await writes.write_policy_totals_windows([list(r) for r in totals])
            unreachable = gc.collect()
        finally:
            gc.enable()
        # through clickhouse-connect's insert, each row stayed in a cycle
        # until a full collection
        assert unreachable < ROWS // 5

        async def rows(sql: str) -> list[list[object]]:
            found = await connection.run(lambda client: client.query(sql).result_rows)
            return [[v.replace(tzinfo=UTC) if isinstance(v, datetime) else v for v in r]
                    for r in found]
        assert await rows("SELECT * FROM policy_counts FINAL ORDER BY resource_version") == counts
        assert await rows("SELECT cluster, namespace, policy, window_start, window_end,"
                          " results_written, new_failures, resolved_failures, pass, fail, warn,"
                          " error, skip, resource_version, updated FROM policy_windows FINAL"
                          " ORDER BY resource_version") == windows
        assert await rows("SELECT cluster, policy, window_start, window_end, pass, fail, warn,"
                          " error, skip, resource_version, updated"
                          " FROM policy_totals_windows FINAL") == totals
    finally:
        await connection.close()
