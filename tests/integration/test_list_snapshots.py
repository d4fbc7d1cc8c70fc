"""Paged lists as kube-apiserver serves them: every page of a list comes from
the snapshot of its first page (the objects as they were at its
resourceVersion, whatever changed since), and once that snapshot is gone the
continuation gets 410 Expired with a token that goes on with the current
state."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
MERGE = {"Content-Type": "application/merge-patch+json"}


def names(body: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in body["items"]]


async def page_through(api: httpx.AsyncClient, path: str, token: str, limit: int,
                       **params: str) -> list[dict[str, Any]]:
    items = []
    while token:
        r = await api.get(path, params={"limit": str(limit), "continue": token, **params})
        assert r.status_code == 200, r.text
        items += r.json()["items"]
        token = r.json()["metadata"].get("continue", "")
    return items


async def test_continuation_pages_are_the_first_pages_snapshot(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    running = await start(make_settings())
    api = running.client
    path = collection_path(POLR, "snap")
    for i in range(30):
        r = await api.post(path, json=report(POLR, f"r{i:02d}", "snap", labels={"v": "0"}))
        assert r.status_code == 201
    full = (await api.get(path)).json()
    first = (await api.get(path, params={"limit": "10"})).json()
    snapshot_rv = first["metadata"]["resourceVersion"]
    assert names(first) == [f"r{i:02d}" for i in range(10)]

    # meanwhile: one changed, one deleted, one created, past the first page
    assert (await api.patch(f"{path}/r15", headers=MERGE,
                            json={"metadata": {"labels": {"v": "1"}}})).status_code == 200
    assert (await api.delete(f"{path}/r20")).status_code == 200
    assert (await api.post(path, json=report(POLR, "r25a", "snap"))).status_code == 201

    rest = await page_through(api, path, first["metadata"]["continue"], 10)
    assert first["items"] + rest == full["items"]  # the objects as they were, versions too
    second = await api.get(path, params={"limit": "10",
                                         "continue": first["metadata"]["continue"]})
    assert second.json()["metadata"]["resourceVersion"] == snapshot_rv

    # a selector applies to the snapshot's objects: r15's label changed after it
    selected = (await api.get(path, params={"limit": "10", "labelSelector": "v=0"})).json()
    assert (await api.patch(f"{path}/r16", headers=MERGE,
                            json={"metadata": {"labels": {"v": "1"}}})).status_code == 200
    more = await page_through(api, path, selected["metadata"]["continue"], 10,
                              labelSelector="v=0")
    assert "r16" in [i["metadata"]["name"] for i in more]
    assert "r15" not in [i["metadata"]["name"] for i in more]


async def test_a_continuation_whose_snapshot_is_gone_expires(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    # a watch cache of 20 changes: the snapshot is gone after 20 more
    running = await start(make_settings(watch_cache_size=20))
    api = running.client
    path = collection_path(POLR, "gone")
    for i in range(12):
        assert (await api.post(path, json=report(POLR, f"g{i:02d}", "gone"))).status_code == 201
    first = (await api.get(path, params={"limit": "5"})).json()
    for round_ in range(3):
        for i in range(12):
            r = await api.patch(f"{path}/g{i:02d}", headers=MERGE,
                                json={"metadata": {"labels": {"round": str(round_)}}})
            assert r.status_code == 200
    r = await api.get(path, params={"limit": "5", "continue": first["metadata"]["continue"]})
    assert r.status_code == 410, r.text
    status = r.json()
    assert status["reason"] == "Expired"
    assert status["message"].startswith("The provided continue parameter is too old to"
                                        " display a consistent list result.")
    # its token goes on from the same place, with the objects as they are now
    rest = await page_through(api, path, status["metadata"]["continue"], 5)
    assert [i["metadata"]["name"] for i in rest] == [f"g{i:02d}" for i in range(5, 12)]
    assert {i["metadata"]["labels"]["round"] for i in rest} == {"2"}


async def test_an_old_version_comes_from_clickhouse_while_it_holds_it(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    """An object whose version at the snapshot is older than the watch cache
    is read from ClickHouse by that version; once a merge replaced it, the
    continuation expires."""
    running = await start(make_settings(watch_cache_size=20))
    api, clickhouse = running.client, running.system.clickhouse
    progress = running.system.progress
    path = collection_path(POLR, "old")
    for i in range(30):  # the cache keeps the last 20 creations
        assert (await api.post(path, json=report(POLR, f"o{i:02d}", "old"))).status_code == 201
    full = (await api.get(path)).json()["items"]
    await clickhouse.run(lambda c: c.command("SYSTEM STOP MERGES reports"))
    try:
        first = (await api.get(path, params={"limit": "4"})).json()
        # o05's version at the snapshot left the cache long ago
        late = await api.patch(f"{path}/o05", headers=MERGE,
                               json={"metadata": {"labels": {"late": "yes"}}})
        assert late.status_code == 200
        rest = await page_through(api, path, first["metadata"]["continue"], 4)
        assert first["items"] + rest == full
        # merged: ClickHouse keeps the newest version only
        rv = int(late.json()["metadata"]["resourceVersion"])
        async with asyncio.timeout(30):
            while await progress.watermark() < rv:
                await asyncio.sleep(0.1)
        await clickhouse.run(lambda c: c.command("SYSTEM START MERGES reports"))
        await clickhouse.run(lambda c: c.command("OPTIMIZE TABLE reports FINAL"))
        r = await api.get(path, params={"limit": "4", "continue": first["metadata"]["continue"]})
        assert r.status_code == 410 and r.json()["metadata"]["continue"]
    finally:
        await clickhouse.run(lambda c: c.command("SYSTEM START MERGES reports"))


async def test_lists_read_in_many_batches_see_each_object_once(start, make_settings,  # type: ignore[no-untyped-def]
                                                               monkeypatch) -> None:
    """ClickHouse read a few rows at a time, each batch overlaid with the
    cache's changes in its range: objects only ClickHouse still holds, objects
    only the cache holds yet, and deletions in either come out once, in order."""
    monkeypatch.setattr("apiserver.storage.service.PAGE", 4)
    running = await start(make_settings(watch_cache_size=20))
    api = running.client
    path = collection_path(POLR, "batches")
    for i in range(0, 30, 2):
        assert (await api.post(path, json=report(POLR, f"b{i:02d}", "batches"))).status_code == 201
    for i in (1, 3, 15, 27, 29):  # between the older ones, and past them
        assert (await api.post(path, json=report(POLR, f"b{i:02d}", "batches"))).status_code == 201
    for i in (2, 3, 16, 28):
        assert (await api.delete(f"{path}/b{i:02d}")).status_code == 200
    wanted = sorted({f"b{i:02d}" for i in (*range(0, 30, 2), 1, 3, 15, 27, 29)}
                    - {"b02", "b03", "b16", "b28"})
    assert names((await api.get(path)).json()) == wanted
    for limit in ("3", "4", "7"):
        first = (await api.get(path, params={"limit": limit})).json()
        rest = await page_through(api, path, first["metadata"]["continue"], int(limit))
        assert names(first) + [i["metadata"]["name"] for i in rest] == wanted


async def test_a_list_streamed_while_writes_go_on_is_its_resource_versions_state(  # type: ignore[no-untyped-def]
        start, make_settings, monkeypatch) -> None:
    """A whole list is read a batch at a time while it streams: objects
    changed, deleted or created past the batch it has reached come out as
    they were at the list's resourceVersion, as kube-apiserver's single read
    gives them. Nothing in it is newer than that version."""
    monkeypatch.setattr("apiserver.storage.service.PAGE", 4)
    running = await start(make_settings())
    api, store, progress = running.client, running.system.reads, running.system.progress
    path = collection_path(POLR, "stream")
    for i in range(20):
        assert (await api.post(path, json=report(POLR, f"s{i:02d}", "stream"))).status_code == 201
    before = (await api.get(path)).json()
    async with asyncio.timeout(30):  # in ClickHouse, read from it a batch at a time
        while await progress.watermark() < int(before["metadata"]["resourceVersion"]):
            await asyncio.sleep(0.1)

    read = store.list_page
    calls = []

    async def list_page(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("after"))
        if len(calls) == 2:  # the first batch is out: write past it
            assert (await api.patch(f"{path}/s10", headers=MERGE,
                                    json={"metadata": {"labels": {"late": "yes"}}})
                    ).status_code == 200
            assert (await api.delete(f"{path}/s12")).status_code == 200
            assert (await api.post(path, json=report(POLR, "s15a", "stream"))).status_code == 201
            assert (await api.delete(f"{path}/s01")).status_code == 200
        return await read(*args, **kwargs)
    monkeypatch.setattr(store, "list_page", list_page)

    during = (await api.get(path)).json()
    assert len(calls) > 2
    assert during["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert during["items"] == before["items"]
    listed = int(during["metadata"]["resourceVersion"])
    assert all(int(i["metadata"]["resourceVersion"]) <= listed for i in during["items"])
    # the next list is the state after the writes
    monkeypatch.setattr(store, "list_page", read)
    after = names((await api.get(path)).json())
    assert "s12" not in after and "s01" not in after and "s15a" in after
