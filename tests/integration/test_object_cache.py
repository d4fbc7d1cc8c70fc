"""GETs of keys the watch cache let go of, through ``up``'s frontend: the
object cache answers them with each key's latest version (a deletion stays
deleted), and a second frontend, started later, reads ClickHouse's objects
back and answers from memory too."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from pipeline.model.resources import RESOURCES
from pipeline.observe import metrics
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
PATH = collection_path(POLR, "ns")


def _hits() -> float:
    return metrics.OBJECT_CACHE_READS.labels("hit")._value.get()  # type: ignore[no-any-return]


async def _expect(api: httpx.AsyncClient, latest: dict[str, dict | None]) -> None:  # type: ignore[type-arg]
    for name, obj in latest.items():
        got = await api.get(f"{PATH}/{name}")
        if obj is None:
            assert got.status_code == 404, (name, got.text)
            assert got.json()["kind"] == "Status"
        else:
            assert got.status_code == 200, (name, got.text)
            assert got.json() == obj, name


async def test_gets_below_the_watch_cache_come_from_memory(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(watch_cache_size=5)
    first = await start(settings)
    api = first.client
    latest: dict[str, dict | None] = {}  # type: ignore[type-arg]
    for i in range(30):
        made = await api.post(PATH, json=report(POLR, f"o{i:02d}", "ns", fail=i % 4))
        assert made.status_code == 201, made.text
        latest[f"o{i:02d}"] = made.json()
    for i in range(0, 30, 3):  # updated once more
        obj = latest[f"o{i:02d}"]
        assert obj is not None
        obj["metadata"]["labels"] = {"round": "2"}
        put = await api.put(f"{PATH}/o{i:02d}", json=obj)
        assert put.status_code == 200, put.text
        latest[f"o{i:02d}"] = put.json()
    for i in range(1, 30, 5):
        assert (await api.delete(f"{PATH}/o{i:02d}")).status_code == 200
        latest[f"o{i:02d}"] = None
    for i in range(5):  # every key above goes below the watch cache's floor
        made = await api.post(PATH, json=report(POLR, f"late{i}", "ns"))
        latest[f"late{i}"] = made.json()

    changelog = first.system.changelog
    assert changelog is not None
    assert changelog.stats()["objects"] >= 20
    hits = _hits()
    await _expect(api, latest)
    assert _hits() - hits >= 20  # the keys below the watch cache were not read from ClickHouse

    # a frontend started now has only ClickHouse's objects below its cache:
    # it reads them back
    second = await start(settings, worker=False)
    other = second.system.changelog
    assert other is not None
    async with asyncio.timeout(60):
        while other.stats()["objects"] < 24 - 5:
            await asyncio.sleep(0.1)
    hits = _hits()
    await _expect(second.client, latest)
    assert _hits() - hits >= 15
