"""Patches as controllers send them (the garbage collector, Kyverno, kubectl
label and annotate): without a resourceVersion, from many writers at once.
kube-apiserver applies each to the latest object, retrying on conflicts, so
every one succeeds and the object ends holding every change; only a patch
that names a resourceVersion may get 409."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
PATH = collection_path(POLR, "ns")
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
WRITERS, EACH = 8, 5


@pytest.mark.parametrize("kind", ["merge", "json"])
async def test_concurrent_patches_without_a_version_all_apply(api: httpx.AsyncClient,
                                                              kind: str) -> None:
    name = f"patched-{kind}"
    created = await api.post(PATH, json=report(POLR, name, "ns"))
    assert created.status_code == 201, created.text

    async def writer(w: int) -> list[int]:
        codes = []
        for i in range(EACH):
            key = f"w{w}-{i}"
            if kind == "merge":
                r = await api.patch(f"{PATH}/{name}", headers=MERGE,
                                    json={"metadata": {"labels": {key: "yes"}}})
            else:
                r = await api.patch(f"{PATH}/{name}", headers=JSON_PATCH, json=[
                    {"op": "add", "path": f"/metadata/annotations/{key}", "value": "yes"}])
            codes.append(r.status_code)
        return codes

    if kind == "json":  # the annotations map the JSON patches add to
        r = await api.patch(f"{PATH}/{name}", headers=MERGE,
                            json={"metadata": {"annotations": {"base": "yes"}}})
        assert r.status_code == 200
    codes = await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    assert [c for cs in codes for c in cs] == [200] * (WRITERS * EACH)
    final = (await api.get(f"{PATH}/{name}")).json()["metadata"]
    held = final["labels"] if kind == "merge" else final["annotations"]
    assert {f"w{w}-{i}" for w in range(WRITERS) for i in range(EACH)} <= set(held)


async def test_a_patch_naming_a_stale_version_conflicts(api: httpx.AsyncClient) -> None:
    created = (await api.post(PATH, json=report(POLR, "stale", "ns"))).json()
    stale = created["metadata"]["resourceVersion"]
    moved = await api.patch(f"{PATH}/stale", headers=MERGE,
                            json={"metadata": {"labels": {"first": "yes"}}})
    assert moved.status_code == 200
    r = await api.patch(f"{PATH}/stale", headers=MERGE, json={
        "metadata": {"resourceVersion": stale, "labels": {"second": "yes"}}})
    assert r.status_code == 409 and r.json()["reason"] == "Conflict"
    # naming the current version applies
    current = moved.json()["metadata"]["resourceVersion"]
    r = await api.patch(f"{PATH}/stale", headers=MERGE, json={
        "metadata": {"resourceVersion": current, "labels": {"second": "yes"}}})
    assert r.status_code == 200
