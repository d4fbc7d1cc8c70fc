"""A deleted report leaves nothing in the aggregate agent's contributions table
(pods, and their reports, come and go all day): its changelog topic ends with
a tombstone for the report, and the counts stay exact across a restart."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from pipeline.aggregate import counts as aggregate
from pipeline.model import objects, topics
from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report
from tests.kafka import committed

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


async def latest_values(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    return {r.key: r.value for r in await committed(bootstrap, topic)}


async def counts_match(client: Any) -> None:
    listed = (await client.get(collection_path(POLR, None))).json()["items"]
    expected = {k: v for k, v in aggregate.by_policy(aggregate.recount(listed)).items()
                if any(v.values())}

    async def materialized() -> dict[tuple[str, str], dict[str, int]]:
        r = await client.post("/analytics/v1/query", json={
            "query": "SELECT namespace, policy, pass, fail, warn, error, skip"
                     " FROM policy_counts FINAL"})
        assert r.status_code == 200, r.text
        rows = {(row[0], row[1]): dict(zip(aggregate.STATUSES, row[2:], strict=True))
                for row in r.json()["rows"]}
        return {k: v for k, v in rows.items() if any(v.values())}
    async with asyncio.timeout(30):
        while await materialized() != expected:
            await asyncio.sleep(0.2)


async def test_a_deleted_report_leaves_no_contribution(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings()
    running = await start(settings)
    path = collection_path(POLR, "ns")
    for i in range(3):
        r = await running.client.post(path, json=report(POLR, f"r{i}", "ns", fail=i + 1))
        assert r.status_code == 201, r.text
    await counts_match(running.client)  # r1's contribution is in the table
    assert (await running.client.delete(f"{path}/r1")).status_code == 200
    await counts_match(running.client)

    changelog = topics.changelog_topic(settings, topics.contributions_table(settings))
    def key(name: str) -> bytes:  # Faust's keys are JSON
        return orjson.dumps(objects.object_key(POLR, "ns", name))
    deleted = key("r1")
    async with asyncio.timeout(20):
        while (latest := await latest_values(settings.kafka_bootstrap, changelog)).get(
                deleted, b"") is not None:
            await asyncio.sleep(0.2)
    assert latest[key("r0")] is not None
    await running.close()

    again = await start(settings)
    r = await again.client.post(path, json=report(POLR, "r3", "ns", fail=2))
    assert r.status_code == 201, r.text
    assert (await again.client.delete(f"{path}/r0")).status_code == 200
    await counts_match(again.client)
