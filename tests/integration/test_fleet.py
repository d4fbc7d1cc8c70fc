"""The fleet: three clusters (three systems on the session's broker, each with
its own topics and database, all calling themselves ``default``) followed
into one store. Its counts equal the sum of theirs; a cluster added to the
config file while it runs is followed; a fleet stopped in the middle of the
traffic and started again on its store counts nothing twice; a cluster whose
change log no longer holds what the fleet has not taken is reported, not
skipped."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from bench import questions
from dashboard import filters, views
from dashboard.filters import Filters
from kubeclient import target
from launcher.fleet import Fleet, FleetOptions, resync
from launcher.trends import TrendQuery, fetch
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.fleet import FleetStore, SourceState
from pipeline.fleet.follower import RESYNC
from pipeline.fleet.sources import Source
from pipeline.model.resources import RESOURCES
from pipeline.settings import Settings
from tests.helpers import COUNTED, collection_path, report
from tests.integration.conftest import serve

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


async def the_same(fleet: Fleet, clusters: dict[str, Any], *, history: bool = True,
                   timeout: float = 60) -> None:
    """Await every cluster's reports, current counts and (with ``history``)
    results in the fleet as its own store holds them, once its store holds
    every report its API lists and its aggregation agent has counted them
    all (until then the fleet may match a state on its way: under load the
    store and the agent can lag the API alike and agree on a count)."""
    parts = 3 if history else 2
    async with asyncio.timeout(timeout):
        for name, running in clusters.items():
            listed = await api_reports(running)
            while True:
                held = (await what(running))[:parts]
                [[counts, reports]] = await source_rows(running, COUNTED)
                if held[1] and counts == reports and stored(held[0]) == listed \
                        and held == (await what_fleet(fleet, name))[:parts]:
                    break
                await asyncio.sleep(0.3)


async def api_reports(running: Any) -> set[tuple[str, str, int]]:
    """(namespace, name, failing) of every PolicyReport the cluster's API lists."""
    r = await running.client.get(collection_path(POLR, None))
    assert r.status_code == 200, r.text
    return {(i["metadata"]["namespace"], i["metadata"]["name"], i["summary"]["fail"])
            for i in r.json()["items"]}


def stored(held: list[list[Any]]) -> set[tuple[str, str, int]]:
    """The same of the current reports a store holds (REPORTS' rows)."""
    return {(ns, name, fail) for _resource, ns, name, _rv, fail in held}


async def traffic(running: Any, cluster: int, count: int) -> None:
    for i in range(count):
        ns = f"team-{i % 3}"
        body = report(POLR, f"pod-{i}", ns, fail=(i + cluster) % 4)
        if i % 4 == 1:  # a score on its first result, as a scanner's reports carry
            body["results"][0]["properties"] = {"score": f"{6 + i % 5}.5"}
        r = await running.client.post(collection_path(POLR, ns), json=body)
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
        await documented_answers(fleet, clusters)
    finally:
        await fleet.stop()


FLEET_DOC = Path(__file__).parents[2] / "docs" / "fleet.md"


def documented_queries() -> dict[str, str]:
    blocks = re.findall(r"```sql\n(.*?)```", FLEET_DOC.read_text(), re.S)
    return {m.group(1): b for b in blocks if (m := re.match(r"-- name: (\S+)", b))}


async def documented_answers(fleet: Fleet, clusters: dict[str, Any]) -> None:
    """docs/fleet.md's questions, answered by the fleet as the clusters'
    own stores answer them, summed."""
    queries = documented_queries()
    assert queries == questions.FLEET  # the benchmark asks what the docs say
    failing, reports, by_policy = {}, {}, {}
    for name, running in clusters.items():
        failing[name] = (await source_rows(
            running, "SELECT sum(fail) FROM policy_counts FINAL"))[0][0]
        reports[name] = (await source_rows(
            running, "SELECT count(), sum(fail) FROM reports FINAL"))[0]
        for policy, fail in await source_rows(
                running, "SELECT policy, sum(fail) FROM policy_counts FINAL GROUP BY policy"):
            by_policy.setdefault(policy, {})[name] = fail

    async def ask(name: str, **params: Any) -> list[list[Any]]:
        _, rows = await fleet.analytics.analytics(queries[name], params)
        return [list(r) for r in rows]
    assert {c: f for c, f in await ask("fleet-failing-now")} == failing
    await fleet_page(fleet, failing)
    await resources_and_findings(fleet, clusters)
    assert {c: [n, f] for c, n, f in await ask("fleet-reports")} == reports
    top = await ask("fleet-top-policies")
    failing_policies = {p: v for p, v in by_policy.items() if sum(v.values())}
    assert len(top) == min(10, len(failing_policies))
    for policy, fail, where, since in top:
        assert fail == sum(failing_policies[policy].values())
        assert where == sum(1 for f in failing_policies[policy].values() if f)
        assert since is not None
    assert [r[1] for r in top] == sorted((r[1] for r in top), reverse=True)
    policy = top[0][0]
    assert {c: f for c, f in await ask("fleet-policy-by-cluster", policy=policy)} == {
        c: f for c, f in by_policy[policy].items() if f}
    # `trends --by cluster`: a series per cluster and policy, ending at its count
    expected = {(c, p): f for p, v in by_policy.items() for c, f in v.items() if f}
    async with asyncio.timeout(30):
        while True:
            _, series = await fetch(FleetSource(fleet), TrendQuery("", 60, 3600, by="cluster"))
            if {s.key: s.fail[-1] for s in series if s.fail[-1]} == expected:
                break
            await asyncio.sleep(0.3)


async def fleet_page(fleet: Fleet, failing: dict[str, int]) -> None:
    """The dashboard's fleet page: a row per cluster with its failing results."""
    html = await views.fleet(FleetSource(fleet), Filters(range="1h"))
    rows = re.findall(r"<tr><td><a [^>]*>([^<]+)</a></td><td>([^<]+)</td><td>[^<]*</td>"
                      r'<td class="n">(\d+)</td>', html)
    assert {c: (s, int(n)) for c, s, n in rows} == {
        c: ("following", n) for c, n in failing.items()}, html


async def resources_and_findings(fleet: Fleet, clusters: dict[str, Any]) -> None:
    """The dashboard's resources and findings over the fleet: what each
    cluster's own store answers, with the cluster filter, and on the pages."""
    source = FleetSource(fleet)
    f = Filters(severity="medium", top=50, min_score=7.0)
    for name, running in clusters.items():
        async def own(query: tuple[str, dict[str, Any]], running: Any = running
                      ) -> list[list[Any]]:
            r = await running.client.post("/analytics/v1/query",
                                          json={"query": query[0], "parameters": query[1]})
            assert r.status_code == 200, r.text
            return [list(row) for row in r.json()["rows"]]

        async def in_fleet(query: tuple[str, dict[str, Any]]) -> list[list[Any]]:
            _, rows = await source.query(*query)
            return [list(row) for row in rows]
        top = await own(filters.top_resources(f))
        assert top and len(top) < 50
        kept = replace(f, cluster=name)
        assert [r[:5] for r in await in_fleet(filters.top_resources(kept, filters.FLEET))] == top
        scored = await own(filters.findings(f))
        assert scored
        assert [r[1:] for r in await in_fleet(filters.findings(kept, filters.FLEET))] == scored
        target = filters.Resource(*top[0][:3])
        assert [r[1:] for r in await in_fleet(
            filters.resource_results(kept, target, filters.FLEET))] == await own(
                filters.resource_results(f, target))
    html = await views.resources(source, f, None)
    shown = re.findall(r'<tr><td>Pod</td><td>(team-\d)</td><td><a [^>]*>[^<]+</a></td>'
                       r'<td class="n">(\d+)</td><td>[^<]*</td><td>([^<]*)</td></tr>', html)
    assert shown and {c for _, _, cs in shown for c in cs.split(", ")} == set(clusters), html
    html = await views.findings(source, Filters(min_score=7.0))
    assert {c for c in re.findall(r"<tr><td>([a-z]+)</td><td>team-", html)} == set(clusters), html


class FleetSource:
    """The fleet's store as ``trends`` reads an analytics source."""

    def __init__(self, fleet: Fleet):
        self._fleet = fleet

    async def check(self) -> None:
        pass

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Any]:
        return await self._fleet.analytics.analytics(sql, parameters)

    async def aclose(self) -> None:
        pass


async def traffic_more(running: Any, count: int) -> None:
    for i in range(count):
        r = await running.client.post(collection_path(POLR, "later"),
                                      json=report(POLR, f"later-{i}", "later", fail=i % 2))
        assert r.status_code == 201, r.text


async def test_a_change_log_past_the_fleet_is_reported_then_resynced_from_the_api(  # type: ignore[no-untyped-def]
        start, make_settings, data_dir: Path, tmp_path: Path) -> None:
    settings: Settings = make_settings()
    running = await start(settings)
    await traffic(running, 0, 6)
    async with asyncio.timeout(30):  # in the cluster's own store first
        while len((await what(running))[0]) != 4:
            await asyncio.sleep(0.2)
    # the oldest changes are gone from the log before the fleet took them
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(settings.changes_topic, 0): RecordsToDelete(3)})
    finally:
        await admin.close()
    fleet_settings = make_settings()
    source = Source("gone", settings.kafka_bootstrap, settings.topic_prefix)
    options = FleetOptions(data_dir, sources=[source])
    fleet = Fleet(fleet_settings, options)
    await fleet.start()
    try:
        async with asyncio.timeout(30):
            while (states := await fleet.states())[0].state != RESYNC:
                await asyncio.sleep(0.2)
        assert "--resync gone --kubeconfig" in states[0].detail
        async with asyncio.timeout(10):  # it no longer follows that cluster
            while not fleet.followers["gone"].done:
                await asyncio.sleep(0.1)
        _, rows = await fleet.analytics.analytics("SELECT count() FROM fleet_reports")
        assert rows[0][0] == 0  # nothing taken from a log that lost its head
    finally:
        await fleet.stop()

    # resynced from the cluster's API, the fleet follows it again
    async with serve(running.system.app) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {"token": running.system.token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        done = await resync(fleet_settings, data_dir, source, await target(kubeconfig))
    assert done.log_start == 3 and done.reports == len((await what(running))[0])
    await traffic_more(running, 5)  # and goes on from there
    fleet = Fleet(fleet_settings, options)
    await fleet.start()
    try:
        # the history of what changed before the log's start is not listed
        await the_same(fleet, {"gone": running}, history=False)
        assert (await fleet.states())[0].state == "following"
    finally:
        await fleet.stop()


async def test_a_state_seen_later_is_kept_whatever_order_the_inserts_run(
        make_settings, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """The fleet records every source's state on a round of its own while a
    follower records its change at once; their inserts run on the store's
    threads in either order. The state seen last is the one kept."""
    connection = Connection(make_settings(), data_dir=data_dir)
    await connection.start()
    store = FleetStore(connection)
    run = connection.run
    held, later_written = asyncio.Event(), asyncio.Event()

    async def first_held_back(fn: Any, **options: Any) -> Any:
        held.set()
        await later_written.wait()
        return await run(fn, **options)

    def seen(state: str) -> SourceState:
        return SourceState("west", "127.0.0.1:9092", "e2e", state, "",
                           datetime.now(UTC), None)
    try:
        connection.run = first_held_back  # type: ignore[method-assign]
        round_of_all = asyncio.create_task(store.record_states([seen("unreachable")]))
        await held.wait()  # the round saw west before it came back
        connection.run = run  # type: ignore[method-assign]
        await store.record_states([seen("following")])
        later_written.set()
        await round_of_all  # its insert runs after the later one's
        assert [s.state for s in await store.states()] == ["following"]
    finally:
        await connection.close()
