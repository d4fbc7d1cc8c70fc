"""The HTTP contract of the frontend, driven through the real Starlette app
(as ``launcher.system`` builds it: the embedded token's user) over an
in-process transport, its storage ports served by in-memory fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from apiserver.http.app import Access, create_app
from apiserver.storage.service import ReportService
from pipeline.model.resources import RESOURCES
from pipeline.model.storage import StoredObject, StoreError
from pipeline.settings import Settings
from tests.fakes import MemoryCommitter, MemoryFeed, MemoryReader
from tests.helpers import collection_path, report

POLR = RESOURCES[0]
TOKEN = "contract-token"
BASE = collection_path(POLR, "ns")


def _client(reader: MemoryReader | None = None) -> httpx.AsyncClient:
    reader = reader or MemoryReader()
    feed = MemoryFeed(start=reader.watermark())
    service = ReportService(store=reader, changelog=feed,
                            writer=MemoryCommitter(feed))
    app = create_app(service, Settings(), access=Access(token=TOKEN))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://test",
                             headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    async with _client() as client:
        yield client


def _names(body: dict[str, object]) -> list[str]:
    items = body["items"]
    assert isinstance(items, list)
    return [item["metadata"]["name"] for item in items]


async def test_create_get_list_update_delete(api: httpx.AsyncClient) -> None:
    created = await api.post(BASE, json=report(POLR, "a", "ns"))
    assert created.status_code == 201, created.text
    meta = created.json()["metadata"]
    assert meta["uid"] and meta["generation"] == 1 and int(meta["resourceVersion"]) > 0

    got = await api.get(f"{BASE}/a")
    assert got.status_code == 200 and got.json()["metadata"] == meta

    listed = await api.get(BASE)
    assert listed.status_code == 200
    assert listed.json()["kind"] == POLR.list_kind and _names(listed.json()) == ["a"]
    assert int(listed.json()["metadata"]["resourceVersion"]) >= int(meta["resourceVersion"])

    changed = got.json()
    changed["metadata"]["labels"] = {"team": "x"}
    updated = await api.put(f"{BASE}/a", json=changed)
    assert updated.status_code == 200, updated.text
    assert updated.json()["metadata"]["labels"] == {"team": "x"}
    assert int(updated.json()["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])

    deleted = await api.delete(f"{BASE}/a")
    assert deleted.status_code == 200 and deleted.json()["metadata"]["name"] == "a"
    assert (await api.get(f"{BASE}/a")).status_code == 404


async def test_a_missing_object_is_a_not_found_status(api: httpx.AsyncClient) -> None:
    missing = await api.get(f"{BASE}/nothing")
    assert missing.status_code == 404
    status = missing.json()
    assert status["kind"] == "Status" and status["reason"] == "NotFound"
    assert status["details"] == {"name": "nothing", "group": POLR.group, "kind": POLR.plural}


async def test_a_stale_resource_version_is_a_conflict(api: httpx.AsyncClient) -> None:
    first = (await api.post(BASE, json=report(POLR, "a", "ns"))).json()
    fresh = dict(first, metadata={**first["metadata"], "labels": {"v": "2"}})
    assert (await api.put(f"{BASE}/a", json=fresh)).status_code == 200
    stale = await api.put(f"{BASE}/a", json=dict(first, metadata={**first["metadata"],
                                                                  "labels": {"v": "3"}}))
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict" and stale.json()["kind"] == "Status"
    again = await api.post(BASE, json=report(POLR, "a", "ns"))
    assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"


async def test_invalid_input_is_unprocessable(api: httpx.AsyncClient) -> None:
    bad = await api.post(BASE, json=report(POLR, "Not_A_Name", "ns"))
    assert bad.status_code == 422
    status = bad.json()
    assert status["reason"] == "Invalid" and status["details"]["causes"]
    assert (await api.get(BASE)).json()["items"] == []


async def test_a_list_with_a_label_selector(api: httpx.AsyncClient) -> None:
    for name, team in (("a", "x"), ("b", "y"), ("c", "x")):
        made = await api.post(BASE, json=report(POLR, name, "ns", labels={"team": team}))
        assert made.status_code == 201
    listed = await api.get(BASE, params={"labelSelector": "team=x"})
    assert _names(listed.json()) == ["a", "c"]
    listed = await api.get(BASE, params={"labelSelector": "team!=x"})
    assert _names(listed.json()) == ["b"]


async def test_paging_with_limit_and_continue(api: httpx.AsyncClient) -> None:
    for name in "edcba":
        assert (await api.post(BASE, json=report(POLR, name, "ns"))).status_code == 201
    pages, token = [], ""
    while True:
        params = {"limit": "2", **({"continue": token} if token else {})}
        body = (await api.get(BASE, params=params)).json()
        pages.append(_names(body))
        token = body["metadata"].get("continue", "")
        if not token:
            break
    assert pages == [["a", "b"], ["c", "d"], ["e"]]


async def test_a_watch_receives_the_events_after_its_version(api: httpx.AsyncClient) -> None:
    since = (await api.get(BASE)).json()["metadata"]["resourceVersion"]
    made = (await api.post(BASE, json=report(POLR, "a", "ns"))).json()
    watched = await api.get(BASE, params={"watch": "1", "resourceVersion": since,
                                          "timeoutSeconds": "0.05"})
    assert watched.status_code == 200
    events = [orjson.loads(line) for line in watched.content.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", made["metadata"]["resourceVersion"])]


async def test_an_object_is_read_from_the_store_when_the_feed_lacks_it() -> None:
    stored = report(POLR, "old", "ns")
    stored["metadata"]["resourceVersion"] = "7"
    reader = MemoryReader([(POLR.id, StoredObject(7, "ns", "old", orjson.dumps(stored)))])
    async with _client(reader) as api:
        got = await api.get(f"{BASE}/old")
        assert got.status_code == 200 and got.json()["metadata"]["resourceVersion"] == "7"
        assert _names((await api.get(BASE)).json()) == ["old"]


async def test_a_request_without_the_token_is_unauthorized(api: httpx.AsyncClient) -> None:
    refused = await api.get(BASE, headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401 and refused.json()["kind"] == "Status"


class _Unreachable(MemoryReader):
    async def get(self, resource: str, namespace: str, name: str) -> StoredObject | None:
        raise StoreError("ClickHouse is unreachable")


async def test_storage_that_cannot_answer_is_a_service_unavailable_status() -> None:
    async with _client(_Unreachable()) as api:
        down = await api.get(f"{BASE}/a")
    assert down.status_code == 503 and down.headers["retry-after"] == "1"
    status = down.json()
    assert status["reason"] == "ServiceUnavailable" and status["details"]["retryAfterSeconds"] == 1
    assert status["message"] == "storage is unavailable: ClickHouse is unreachable"
