"""The last changes of a burst reach ClickHouse and the counts on their own,
with no traffic after them: the materializer takes what each fetch returns,
and the aggregating agent waits at most its interval for more."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


async def test_last_changes_of_a_burst_are_materialized_and_counted(start, make_settings
                                                                   ) -> None:  # type: ignore[no-untyped-def]
    running = await start(make_settings())
    store = running.system.analytics
    assert store is not None
    for burst in range(3):
        namespace = f"burst-{burst}"
        path = collection_path(POLR, namespace)
        for i in range(5):
            r = await running.client.post(path, json=report(POLR, f"r{i}", namespace, fail=i))
            assert r.status_code == 201, r.text
        r = await running.client.patch(f"{path}/r1", json={"metadata": {"labels": {"x": "y"}}},
                                       headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
        r = await running.client.delete(f"{path}/r4")
        assert r.status_code == 200, r.text
        last = int(r.json()["metadata"]["resourceVersion"])
        # live: r0..r3, failing 0 + 1 + 2 + 3 results
        want = (last, 4, 6)

        async def seen(namespace: str = namespace) -> tuple[int, int, int]:
            _, rows = await store.analytics(
                "SELECT (SELECT max(resource_version) FROM reports WHERE namespace = {ns:String}),"
                " (SELECT count() FROM reports FINAL WHERE namespace = {ns:String}"
                "  AND deleted = 0),"
                " (SELECT sum(fail) FROM policy_counts FINAL WHERE namespace = {ns:String})",
                {"ns": namespace})
            return tuple(int(v or 0) for v in rows[0])  # type: ignore[return-value]

        async with asyncio.timeout(30):
            while (got := await seen()) != want:
                await asyncio.sleep(0.1)
        assert got == want
