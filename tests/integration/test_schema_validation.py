"""Schema validation through the API: create, update, merge and JSON patches
and server-side apply each refuse a bad body with 422 and store nothing; what
the schema accepts is stored and read back unchanged."""

from __future__ import annotations

import copy
import string
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.model.resources import by_id
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = by_id("policyreports.wgpolicyk8s.io")
PATH = collection_path(POLR, "ns")
BAD = [{"results": "nope"}, {"results": [1, 2]},
       {"results": [{"policy": "p", "result": "maybe"}]}, {"summary": {"pass": "x"}}]


def with_fields(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    obj = report(POLR, name, "ns")
    obj.update(fields)
    return obj


@pytest.mark.parametrize("fields", BAD, ids=[str(b)[:30] for b in BAD])
async def test_a_bad_body_is_refused_on_every_write_path(api: httpx.AsyncClient,
                                                         fields: dict[str, Any]) -> None:
    created = await api.post(PATH, json=with_fields("bad", fields))
    assert created.status_code == 422, created.text
    status = created.json()
    assert status["kind"] == "Status" and status["reason"] == "Invalid"
    assert status["message"].startswith('PolicyReport.wgpolicyk8s.io "bad" is invalid: ')
    assert status["details"]["causes"]
    assert (await api.get(f"{PATH}/bad")).status_code == 404

    good = (await api.post(PATH, json=report(POLR, "good", "ns"))).json()
    replaced = with_fields("good", fields)
    replaced["metadata"]["resourceVersion"] = good["metadata"]["resourceVersion"]
    attempts = [
        api.put(f"{PATH}/good", json=replaced),
        api.patch(f"{PATH}/good", json=fields,
                  headers={"Content-Type": "application/merge-patch+json"}),
        api.patch(f"{PATH}/good", json=[{"op": "replace", "path": f"/{k}", "value": v}
                                         for k, v in fields.items()],
                  headers={"Content-Type": "application/json-patch+json"}),
        api.patch(f"{PATH}/good", params={"fieldManager": "test"},
                  json={"apiVersion": POLR.api_version, "kind": POLR.kind,
                        "metadata": {"name": "good", "namespace": "ns"}, **fields},
                  headers={"Content-Type": "application/apply-patch+yaml"}),
    ]
    for attempt in attempts:
        response = await attempt
        assert response.status_code == 422, response.text
    after = (await api.get(f"{PATH}/good")).json()
    assert after["metadata"]["resourceVersion"] == good["metadata"]["resourceVersion"]
    assert (await api.delete(f"{PATH}/good")).status_code == 200


texts = st.text(string.ascii_letters + string.digits + " -_.:/", max_size=20)
results = st.fixed_dictionaries(
    {"policy": texts},
    optional={"rule": texts, "category": texts, "message": texts, "source": texts,
              "result": st.sampled_from(["pass", "fail", "warn", "error", "skip"]),
              "severity": st.sampled_from(["critical", "high", "medium", "low", "info"]),
              "scored": st.booleans(),
              "timestamp": st.fixed_dictionaries({
                  "seconds": st.integers(0, 2**40), "nanos": st.integers(0, 999_999_999)}),
              "properties": st.dictionaries(st.text(string.ascii_lowercase, min_size=1,
                                                    max_size=8), texts, max_size=3)})
summaries = st.fixed_dictionaries({}, optional={
    k: st.integers(0, 2**31) for k in ("pass", "fail", "warn", "error", "skip")})


def sample_bodies(count: int = 15) -> list[dict[str, Any]]:
    """Bodies hypothesis draws, before any system runs (so nothing else uses
    the random module while it draws)."""
    found: list[dict[str, Any]] = []

    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=st.fixed_dictionaries({"results": st.lists(results, max_size=4),
                                       "summary": summaries}))
    def collect(body: dict[str, Any]) -> None:
        found.append(body)

    collect()
    return found


@pytest.fixture
def bodies() -> list[dict[str, Any]]:
    return sample_bodies()


async def test_what_the_schema_accepts_reads_back_unchanged(
        bodies: list[dict[str, Any]], api: httpx.AsyncClient) -> None:
    assert bodies
    for i, body in enumerate(bodies):
        name = f"h{i}"
        obj = copy.deepcopy(with_fields(name, body))
        created = await api.post(PATH, json=obj)
        assert created.status_code == 201, (body, created.text)
        back = (await api.get(f"{PATH}/{name}")).json()
        for field in ("results", "summary", "scope"):
            assert back.get(field) == obj.get(field), body


async def test_delete_options_are_checked_before_anything_is_deleted(
        api: httpx.AsyncClient) -> None:
    await api.post(PATH, json=report(POLR, "keep", "ns"))
    refused = [
        (await api.request("DELETE", f"{PATH}/keep", json={"preconditions": 5}), 400),
        (await api.request("DELETE", f"{PATH}/keep", content=b"{not json"), 400),
        (await api.request("DELETE", f"{PATH}/keep",
                           json={"propagationPolicy": "Sideways"}), 422),
        (await api.delete(f"{PATH}/keep", params={"gracePeriodSeconds": "soon"}), 400),
        (await api.delete(f"{PATH}/keep", params={"dryRun": "Some"}), 422),
        (await api.delete(PATH, params={"propagationPolicy": "Sideways"}), 422),
    ]
    for response, code in refused:
        assert response.status_code == code, response.text
        assert response.json()["kind"] == "Status"
    assert (await api.get(f"{PATH}/keep")).status_code == 200

    # Foreground leaves the object to the garbage collector, with its finalizer
    deleting = await api.request("DELETE", f"{PATH}/keep",
                                 json={"kind": "DeleteOptions", "apiVersion": "v1",
                                       "propagationPolicy": "Foreground"})
    assert deleting.status_code == 200, deleting.text
    meta = (await api.get(f"{PATH}/keep")).json()["metadata"]
    assert meta["finalizers"] == ["foregroundDeletion"] and meta["deletionTimestamp"]
    await api.post(PATH, json=report(POLR, "gone", "ns"))
    assert (await api.delete(f"{PATH}/gone", params={"propagationPolicy": "Background",
                                                    "gracePeriodSeconds": "30"})
            ).status_code == 200
    assert (await api.get(f"{PATH}/gone")).status_code == 404
