"""The fleet as users run it: three `up` systems, each with its own embedded
broker, under Kyverno-shaped writes, and one `reports-pipeline fleet`
process following them. The fleet is SIGKILLed under load and started again,
a source's broker is stopped (SIGSTOP) and resumed, then that cluster is
stopped and started again (its broker with it, on the same port), a cluster
is added to the config file while the fleet runs; in the end every
cluster's reports,
counts and results in the fleet equal what that cluster holds."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from dashboard import filters
from pipeline.fleet.follower import CONTACT_SECONDS
from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import BIN, Up, client_for
from tests.helpers import COUNTED, collection_path, report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]

REPORTS = ("SELECT count(), sum(fail) FROM {table} FINAL{where}")
COUNTS = ("SELECT namespace, policy, fail FROM policy_counts FINAL WHERE {where} fail > 0"
          " ORDER BY namespace, policy")
RESULTS = "SELECT count() FROM results FINAL{where}"


async def ask(api: httpx.AsyncClient, sql: str, **params: Any) -> list[list[Any]]:
    r = await api.post("/analytics/v1/query", json={"query": sql, "parameters": params})
    assert r.status_code == 200, r.text
    return [list(row) for row in r.json()["rows"]]


async def held(api: httpx.AsyncClient) -> tuple[Any, ...]:
    return (await ask(api, REPORTS.format(table="reports", where="")),
            await ask(api, COUNTS.format(where="")),
            await ask(api, RESULTS.format(where="")))


async def in_fleet(api: httpx.AsyncClient, cluster: str) -> tuple[Any, ...]:
    where = " WHERE cluster = {c:String}"
    return (await ask(api, REPORTS.format(table="fleet_reports", where=where), c=cluster),
            await ask(api, COUNTS.format(where="cluster = {c:String} AND"), c=cluster),
            await ask(api, RESULTS.format(where=where), c=cluster))


async def writer(api: httpx.AsyncClient, cluster: int, n: int, stop: asyncio.Event,
                 count: int = 2000) -> int:
    """Kyverno-shaped writes: a report per Pod, rewritten as results change,
    some Pods going away. Bounded; ``stop`` ends it sooner. While its broker
    is stopped a write may be refused (503) or time out: it goes on."""
    written = 0
    for i in range(count):
        if stop.is_set():
            break
        ns = f"team-{(n + i) % 4}"
        name = f"pod-{n}-{i % 40}"
        path = collection_path(POLR, ns)
        body = report(POLR, name, ns, fail=(i + cluster) % 5)
        try:
            r = await api.post(path, json=body)
            if r.status_code == 409:
                current = await api.get(f"{path}/{name}")
                if current.status_code == 200:
                    body["metadata"]["resourceVersion"] = current.json()["metadata"][
                        "resourceVersion"]
                    r = await api.put(f"{path}/{name}", json=body)
            if i % 9 == 8:
                r = await api.delete(f"{path}/pod-{n}-{(i - 3) % 40}")
        except httpx.HTTPError:
            await asyncio.sleep(0.5)
            continue
        assert r.status_code in (200, 201, 404, 409, 429, 503, 504), r.text
        written += r.status_code < 300
    return written


def sources_yaml(clusters: dict[str, Up]) -> str:
    lines = ["clusters:"]
    for name, u in clusters.items():
        endpoints = json.loads((u.data_dir / "endpoints.json").read_text())
        lines += [f"  - name: {name}", f"    bootstrap: {endpoints['kafka_bootstrap']}",
                  "    prefix: e2e"]
    return "\n".join(lines) + "\n"


async def sources(api: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    r = await api.get("/fleet/v1/sources")
    assert r.status_code == 200, r.text
    return {c["cluster"]: c for c in r.json()["clusters"]}


async def until(check: Any, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.5)


def test_three_clusters_one_fleet_through_kills_and_stops(tmp_path: Path,
                                                         browser: Any) -> None:
    started: list[Up] = []
    try:
        # in a thread of its own: Playwright's sync API runs a loop in this one
        with ThreadPoolExecutor(1) as thread:
            fleet, failing = thread.submit(asyncio.run, scenario(tmp_path, started)).result()
        dashboard_shows(fleet, failing, browser)
    finally:
        for u in reversed(started):
            try:
                u.stop(timeout=60)
            except Exception:  # noqa: BLE001 - still killed below
                pass
            u.kill(group=True)


def dashboard_shows(fleet: Up, failing: dict[str, int], browser: Any) -> None:
    """`dashboard --data-dir FLEET`'s fleet page in headless Chromium: a row
    per cluster with its failing results, all following."""
    proc = subprocess.Popen([str(BIN / "reports-pipeline"), "dashboard", "--data-dir",
                             str(fleet.data_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://\S+)", line)
        assert match, line + proc.stdout.read()
        base, _, query = match[1].partition("?")
        page = browser.new_page()
        page.goto(f"{base}fleet?{query}&range=1h&refresh=0")
        rows = page.locator("#fleet-clusters tbody tr")
        shown = {rows.nth(i).locator("td").nth(0).inner_text():
                 (rows.nth(i).locator("td").nth(1).inner_text(),
                  int(rows.nth(i).locator("td").nth(3).inner_text()))
                 for i in range(rows.count())}
        assert shown == {c: ("following", n) for c, n in failing.items()}, (
            page.content()[:3000] + "\n" + "".join(fleet.output[-40:]))
        assert int(page.locator("[data-fleet-last]").get_attribute("data-fleet-last")) == sum(
            failing.values())
        assert page.locator("#where-policies-fail tbody tr").count() > 0
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()


async def scenario(tmp_path: Path, started: list[Up]) -> tuple[Up, dict[str, int]]:
    apis: dict[str, httpx.AsyncClient] = {}
    fleet_api: httpx.AsyncClient | None = None
    try:
        clusters = {}
        for name in ("east", "west", "north"):
            u = Up(tmp_path / name)
            started.append(u)
            clusters[name] = u
        for u in clusters.values():
            await asyncio.to_thread(u.wait_ready, 180)
        config = tmp_path / "fleet.yaml"
        config.write_text(sources_yaml({n: clusters[n] for n in ("east", "west")}))
        fleet = Up(tmp_path / "fleet", verb="fleet", args=("--config", str(config)))
        started.append(fleet)
        await asyncio.to_thread(fleet.wait_ready)

        apis.update({n: client_for(u) for n, u in clusters.items()})
        stop = asyncio.Event()
        writing = asyncio.gather(*(writer(api, i, n, stop) for i, api in enumerate(apis.values())
                                   for n in range(2)))
        # SIGKILL under load, and again on the same store
        await asyncio.sleep(8)
        fleet.kill(group=True)
        fleet = Up(tmp_path / "fleet", verb="fleet", args=("--config", str(config)))
        started.append(fleet)
        await asyncio.to_thread(fleet.wait_ready)  # the writers go on meanwhile
        fleet_api = client_for(fleet)

        # a cluster added while it runs
        config.write_text(sources_yaml(clusters))

        async def north_followed() -> bool:
            return (await sources(fleet_api)).get("north", {}).get("state") == "following"
        await until(north_followed, 60)

        # west's broker stops answering: west goes stale, the others stay fresh
        [broker] = clusters["west"].children("kafka.Kafka")
        broker.send_signal(signal.SIGSTOP)
        try:
            async def west_stale() -> bool:
                found = await sources(fleet_api)
                return found["west"]["state"] == "unreachable"
            await until(west_stale, 60)
            found = await sources(fleet_api)
            assert found["east"]["state"] == found["north"]["state"] == "following"
            assert found["west"]["lastChange"] is not None
        finally:
            broker.send_signal(signal.SIGCONT)

        async def west_back() -> bool:
            return (await sources(fleet_api))["west"]["state"] == "following"
        await until(west_back, 90)

        # west stopped (its broker with it) and started again on its data:
        # the fleet follows it again by itself
        stop.set()
        assert sum(await writing) > 0
        await apis["west"].aclose()
        assert clusters["west"].stop() == 0
        clusters["west"].kill()
        await until(west_stale, 60)
        clusters["west"] = Up(tmp_path / "west")
        started.append(clusters["west"])
        await asyncio.to_thread(clusters["west"].wait_ready, 180)
        apis["west"] = client_for(clusters["west"])
        await until(west_back, 90)
        assert await writer(apis["west"], 1, 9, asyncio.Event(), count=40) > 0

        for name, api in apis.items():
            async def same(name: str = name, api: httpx.AsyncClient = api) -> bool:
                return await held(api) == await in_fleet(fleet_api, name)
            await until(same, 120)
        total = sum([(await held(api))[0][0][0] for api in apis.values()])
        assert (await ask(fleet_api, "SELECT count() FROM fleet_reports FINAL"))[0][0] == total

        # a cluster started again counts on after it is ready (its aggregation
        # agent catches up with its change log in the background): the
        # fleet's counts equal each cluster's own once both have settled
        failing: dict[str, int] = {}

        async def counted() -> bool:
            failing.clear()
            for name, api in apis.items():
                [[counts, reports]] = await ask(api, COUNTED)
                if counts != reports:
                    return False  # counted on its way: the fleet may match it there
                failing[name] = counts
            fleet_counts = await ask(fleet_api, "SELECT cluster, sum(fail) FROM policy_counts FINAL"
                                                " GROUP BY cluster")
            return {c: n for c, n in fleet_counts} == failing
        await until(counted, 120)

        # the dashboard shows the states the fleet records every CONTACT_SECONDS
        sql, _ = filters.sources()

        async def recorded_following() -> bool:
            return {row[0]: row[1] for row in await ask(fleet_api, sql)} == dict.fromkeys(
                apis, "following")
        try:
            await until(recorded_following, 3 * CONTACT_SECONDS)
        except TimeoutError:
            raise AssertionError(f"{await ask(fleet_api, sql)}; {await sources(fleet_api)}"
                                 ) from None
        return fleet, failing
    finally:
        for api in [*apis.values(), *([fleet_api] if fleet_api else [])]:
            await api.aclose()
