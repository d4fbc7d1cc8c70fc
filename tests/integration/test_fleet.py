"""The fleet: three clusters (three systems on the session's broker, each with
its own topics and database, all calling themselves ``default``) followed
into one store. Its counts equal the sum of theirs; a cluster added to the
config file while it runs is followed; a fleet stopped in the middle of the
traffic and started again on its store counts nothing twice; a cluster whose
change log no longer holds what the fleet has not taken is reported, not
skipped."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from launcher.fleet import Fleet, FleetOptions
from pipeline.fleet.follower import RESYNC
from pipeline.fleet.sources import Source
from pipeline.model.resources import RESOURCES
from pipeline.settings import Settings
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]

REPORTS = ("SELECT resource, namespace, name, resource_version, fail FROM {table} FINAL{where}"
           " ORDER BY resource, namespace, name")
COUNTS = ("SELECT namespace, policy, pass, fail, warn, error, skip FROM policy_counts FINAL"
          " WHERE {where} (pass + fail + warn + error + skip) > 0 ORDER BY namespace, policy")
RESULTS = "SELECT count() FROM results FINAL{where}"


async def source_rows(running: Any, sql: str) -> list[list[Any]]:
    r = await running.client.post("/analytics/v1/query", json={"query": sql})
    assert r.status_code == 200, r.text
    return [list(row) for row in r.json()["rows"]]


async def fleet_rows(fleet: Fleet, sql: str, cluster: str) -> list[list[Any]]:
    _, rows = await fleet.analytics.analytics(sql, {"c": cluster})
    return [[str(v) if isinstance(v, str) else v for v in row] for row in rows]


async def what(running: Any) -> tuple[Any, ...]:
    return (await source_rows(running, REPORTS.format(table="reports", where="")),
            await source_rows(running, COUNTS.format(where="")),
            await source_rows(running, RESULTS.format(where="")))


async def what_fleet(fleet: Fleet, cluster: str) -> tuple[Any, ...]:
    return (await fleet_rows(fleet, REPORTS.format(table="fleet_reports",
                                                   where=" WHERE cluster = {c:String}"), cluster),
            await fleet_rows(fleet, COUNTS.format(where="cluster = {c:String} AND"), cluster),
            await fleet_rows(fleet, RESULTS.format(where=" WHERE cluster = {c:String}"),
                             cluster))


async def the_same(fleet: Fleet, clusters: dict[str, Any], timeout: float = 60) -> None:
    """Await every cluster's reports, current counts and results in the fleet
    as its own store holds them (once its aggregates settled)."""
    async with asyncio.timeout(timeout):
        for name, running in clusters.items():
            while True:
                held = await what(running)
                if held[1] and held == await what_fleet(fleet, name):
                    break
                await asyncio.sleep(0.3)


async def traffic(running: Any, cluster: int, count: int) -> None:
    for i in range(count):
        ns = f"team-{i % 3}"
        r = await running.client.post(collection_path(POLR, ns),
                                      json=report(POLR, f"pod-{i}", ns, fail=(i + cluster) % 4))
        assert r.status_code == 201, r.text
    for i in range(0, count, 5):  # some Pods go away
        ns = f"team-{i % 3}"
        r = await running.client.delete(f"{collection_path(POLR, ns)}/pod-{i}")
        assert r.status_code == 200, r.text


def sources_yaml(sources: list[Source]) -> str:
    return "clusters:\n" + "".join(
        f"  - name: {s.name}\n    bootstrap: {s.bootstrap}\n    prefix: {s.prefix}\n"
        for s in sources)


async def test_three_clusters_in_one_fleet(start, make_settings, data_dir: Path,  # type: ignore[no-untyped-def]
                                           tmp_path: Path) -> None:
    clusters: dict[str, Any] = {}
    sources: list[Source] = []
    for name in ("east", "west", "north"):
        settings: Settings = make_settings()  # each is REPORTS_CLUSTER=default
        clusters[name] = await start(settings)
        sources.append(Source(name, settings.kafka_bootstrap, settings.topic_prefix))
    for i, running in enumerate(clusters.values()):
        await traffic(running, i, 12 + 6 * i)

    config = tmp_path / "fleet.yaml"
    config.write_text(sources_yaml(sources[:2]))
    fleet_settings = make_settings()
    fleet = Fleet(fleet_settings, FleetOptions(data_dir, config=config))
    await fleet.start()
    try:
        await the_same(fleet, {n: clusters[n] for n in ("east", "west")})
        # a cluster added while the fleet runs
        config.write_text(sources_yaml(sources))
        await the_same(fleet, clusters)
        # stopped while the clusters write, and started again on its store
        writing = asyncio.gather(*(traffic_more(r, 30) for r in clusters.values()))
        await asyncio.sleep(0.5)
    finally:
        await fleet.stop()
    await writing
    fleet = Fleet(fleet_settings, FleetOptions(data_dir, config=config))
    await fleet.start()
    try:
        await the_same(fleet, clusters)
        states = {s.cluster: s for s in await fleet.states()}
        assert {n: s.state for n, s in states.items()} == dict.fromkeys(clusters, "following")
        assert all(s.last_change is not None for s in states.values())
        # the sum over the fleet is the sum of the clusters
        _, rows = await fleet.analytics.analytics(
            "SELECT count() FROM fleet_reports FINAL")
        total = sum(len((await what(r))[0]) for r in clusters.values())
        assert rows[0][0] == total
    finally:
        await fleet.stop()


async def traffic_more(running: Any, count: int) -> None:
    for i in range(count):
        r = await running.client.post(collection_path(POLR, "later"),
                                      json=report(POLR, f"later-{i}", "later", fail=i % 2))
        assert r.status_code == 201, r.text


async def test_a_change_log_past_the_fleet_is_reported_not_skipped(  # type: ignore[no-untyped-def]
        start, make_settings, data_dir: Path) -> None:
    settings: Settings = make_settings()
    running = await start(settings)
    await traffic(running, 0, 6)
    # the oldest changes are gone from the log before the fleet took them
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(settings.changes_topic, 0): 3})
    finally:
        await admin.close()
    fleet = Fleet(make_settings(), FleetOptions(data_dir, sources=[
        Source("gone", settings.kafka_bootstrap, settings.topic_prefix)]))
    await fleet.start()
    try:
        async with asyncio.timeout(30):
            while (states := await fleet.states())[0].state != RESYNC:
                await asyncio.sleep(0.2)
        assert "fleet resync gone" in states[0].detail
        assert fleet.followers["gone"].done
        _, rows = await fleet.analytics.analytics("SELECT count() FROM fleet_reports")
        assert rows[0][0] == 0  # nothing taken from a log that lost its head
    finally:
        await fleet.stop()
