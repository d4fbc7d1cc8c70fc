"""Create, read, update and delete every resource type through the frontend,
with the real broker, Faust agents and chDB behind it."""

from __future__ import annotations

import httpx
import pytest

from pipeline.model.resources import RESOURCES, ResourceType
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def item_path(rtype: ResourceType, namespace: str, name: str) -> str:
    return f"{collection_path(rtype, namespace)}/{name}"


async def test_every_resource_type_round_trips(api: httpx.AsyncClient) -> None:
    seen_rvs: list[int] = []
    for rtype in RESOURCES:
        ns = "team-a"
        for name, namespace in (("one", ns), ("two", ns), ("three", "team-b")):
            r = await api.post(collection_path(rtype, namespace),
                               json=report(rtype, name, namespace, fail=1))
            assert r.status_code == 201, r.text
            created = r.json()
            seen_rvs.append(int(created["metadata"]["resourceVersion"]))
            # read-your-writes: a GET right after the create returns it
            got = await api.get(item_path(rtype, namespace, name))
            assert got.status_code == 200, got.text
            assert got.json() == created

        listed = (await api.get(collection_path(rtype, ns))).json()
        assert listed["kind"] == rtype.list_kind
        if rtype.namespaced:
            assert [i["metadata"]["name"] for i in listed["items"]] == ["one", "two"]
            everywhere = (await api.get(collection_path(rtype, None))).json()
            assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in
                    everywhere["items"]] == [("team-a", "one"), ("team-a", "two"),
                                             ("team-b", "three")]
        else:
            assert [i["metadata"]["name"] for i in listed["items"]] == ["one", "three", "two"]
        assert int(listed["metadata"]["resourceVersion"]) >= max(seen_rvs)

        current = (await api.get(item_path(rtype, ns, "one"))).json()
        changed = report(rtype, "one", ns, fail=4)
        changed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        r = await api.put(item_path(rtype, ns, "one"), json=changed)
        assert r.status_code == 200, r.text
        updated = r.json()
        assert updated["metadata"]["uid"] == current["metadata"]["uid"]
        assert int(updated["metadata"]["resourceVersion"]) > int(
            current["metadata"]["resourceVersion"])
        stale = await api.put(item_path(rtype, ns, "one"), json=changed)
        assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"

        table = (await api.get(collection_path(rtype, ns), headers={"Accept": TABLE})).json()
        assert table["kind"] == "Table"
        fails = {row["cells"][0]: row["cells"][4] for row in table["rows"]}
        assert fails["one"] == 4

        r = await api.delete(item_path(rtype, ns, "one"))
        assert r.status_code == 200, r.text
        gone = await api.get(item_path(rtype, ns, "one"))
        assert gone.status_code == 404 and gone.json()["reason"] == "NotFound"
        assert (await api.delete(item_path(rtype, ns, "one"))).status_code == 404
    assert seen_rvs == sorted(seen_rvs) and len(set(seen_rvs)) == len(seen_rvs)


POLR = RESOURCES[0]


@pytest.mark.parametrize("body, code, reason", [
    (b"{not json", 400, "BadRequest"),
    (b'{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "ClusterPolicyReport",'
     b' "metadata": {"name": "x"}}', 400, "BadRequest"),
    (b'{"apiVersion": "v1", "kind": "PolicyReport", "metadata": {"name": "x"}}', 400,
     "BadRequest"),
    (b'{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",'
     b' "metadata": {"name": "x", "namespace": "elsewhere"}}', 400, "BadRequest"),
    (b'{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport", "metadata": {}}',
     422, "Invalid"),
])
async def test_bad_input_gets_a_status(api: httpx.AsyncClient, body: bytes, code: int,
                                       reason: str) -> None:
    r = await api.post(collection_path(POLR, "ns"), content=body,
                       headers={"Content-Type": "application/json"})
    assert r.status_code == code, r.text
    status = r.json()
    assert status["kind"] == "Status" and status["reason"] == reason and status["code"] == code
    listed = (await api.get(collection_path(POLR, "ns"))).json()
    assert listed["items"] == []


async def test_conflicts_and_unknowns(api: httpx.AsyncClient) -> None:
    path = collection_path(POLR, "ns")
    assert (await api.post(path, json=report(POLR, "dup", "ns"))).status_code == 201
    again = await api.post(path, json=report(POLR, "dup", "ns"))
    assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"
    other = report(POLR, "other", "ns")
    r = await api.put(f"{path}/dup", json=other)
    assert r.status_code == 400
    missing = await api.get(f"{path}/nope")
    assert missing.status_code == 404 and missing.json()["kind"] == "Status"
    for url in ("/apis/wgpolicyk8s.io/v1alpha2/nothings", "/apis/nowhere.io/v1", "/nope"):
        r = await api.get(url)
        assert r.status_code == 404 and r.json()["kind"] == "Status", url
    unauth = await api.get(path, headers={"Authorization": "Bearer wrong"})
    assert unauth.status_code == 401 and unauth.json()["reason"] == "Unauthorized"
    too_big = await api.post(path, content=b"x" * (3 * 1024 * 1024 + 1),
                             headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413
