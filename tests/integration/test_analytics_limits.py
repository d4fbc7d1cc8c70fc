"""The analytics endpoint cannot take the system down: a runaway query is
stopped at REPORTS_ANALYTICS_TIMEOUT (504) while the API keeps answering, a
result past REPORTS_ANALYTICS_MAX_ROWS is refused, and a query whose client
goes away is stopped at once."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report
from tests.integration.conftest import serve

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
RUNAWAY = "SELECT count() FROM system.numbers"


async def test_a_runaway_query_is_cut_off_while_the_api_answers(start, make_settings  # type: ignore[no-untyped-def]
                                                                 ) -> None:
    running = await start(make_settings(analytics_timeout=4, analytics_max_rows=1000))
    api = running.client
    assert (await api.post(collection_path(POLR, "ns"), json=report(POLR, "r", "ns"))
            ).status_code == 201
    runaway = asyncio.ensure_future(api.post("/analytics/v1/query", json={"query": RUNAWAY},
                                             timeout=60))
    await asyncio.sleep(0.5)  # let it start
    answered = []
    while not runaway.done():
        started = time.monotonic()
        listed = await api.get(collection_path(POLR, "ns"))
        assert listed.status_code == 200
        answered.append(time.monotonic() - started)
        await asyncio.sleep(0.2)
    stopped = await runaway
    assert stopped.status_code == 504, stopped.text
    status = stopped.json()
    assert status["kind"] == "Status" and "REPORTS_ANALYTICS_TIMEOUT" in status["message"]
    # the API answered all along (the query runs on threads of its own)
    assert len(answered) >= 5, answered

    too_many = await api.post("/analytics/v1/query",
                              json={"query": "SELECT number FROM system.numbers LIMIT 5000"})
    assert too_many.status_code == 400
    assert "REPORTS_ANALYTICS_MAX_ROWS" in too_many.json()["message"]
    # no setting can be loosened from inside
    loosened = await api.post("/analytics/v1/query", json={
        "query": "SELECT 1 SETTINGS max_execution_time = 1000"})
    assert loosened.status_code == 400


async def test_a_query_whose_client_leaves_is_stopped(start, make_settings  # type: ignore[no-untyped-def]
                                                     ) -> None:
    running = await start(make_settings(analytics_timeout=120))
    app = running.system.app
    token = running.system.token
    async with serve(app) as url, httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/analytics/v1/query", json={"query": RUNAWAY}, timeout=1.5)
        # the query is gone long before its 120 s
        async with asyncio.timeout(15):
            while True:
                left = await running.client.post("/analytics/v1/query", json={
                    "query": "SELECT count() FROM system.processes"
                             " WHERE query LIKE '%system.numbers%'"
                             " AND query NOT LIKE '%system.processes%'"})
                if left.json()["rows"] == [[0]]:
                    break
                await asyncio.sleep(0.2)
