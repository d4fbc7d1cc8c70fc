"""State and the resourceVersion sequence survive a full restart, including the
change log, ClickHouse and the Faust tables all coming back."""

from __future__ import annotations

import pytest

from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


async def test_restart_keeps_reports_and_resource_versions(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings()
    first = await start(settings)
    path = collection_path(POLR, "ns")
    rvs = []
    for i in range(5):
        r = await first.client.post(path, json=report(POLR, f"r{i}", "ns", fail=i))
        assert r.status_code == 201
        rvs.append(int(r.json()["metadata"]["resourceVersion"]))
    assert (await first.client.delete(f"{path}/r4")).status_code == 200
    before = (await first.client.get(path)).json()
    await first.close()

    second = await start(settings)
    after = (await second.client.get(path)).json()
    assert after["items"] == before["items"]
    assert int(after["metadata"]["resourceVersion"]) >= int(before["metadata"][
        "resourceVersion"])
    r = await second.client.post(path, json=report(POLR, "new", "ns"))
    assert r.status_code == 201, r.text
    assert int(r.json()["metadata"]["resourceVersion"]) > int(
        before["metadata"]["resourceVersion"])
    dup = await second.client.post(path, json=report(POLR, "r0", "ns"))
    assert dup.status_code == 409
    recreated = await second.client.post(path, json=report(POLR, "r4", "ns"))
    assert recreated.status_code == 201
