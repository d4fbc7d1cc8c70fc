"""/metrics after a short workload: every metric the system registers is set,
read back with Prometheus' own text parser."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.model.resources import RESOURCES
from pipeline.observe import metrics
from tests.helpers import collection_path, report
from tests.integration.conftest import serve, watch_until

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]
PATH = collection_path(POLR, "ns")


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


async def scrape(watch: asyncio.Task[Any], watching: asyncio.Event, api: httpx.AsyncClient,
                 scraped: dict[str, Any]) -> None:
    try:
        async with asyncio.timeout(30):
            await watching.wait()
        response = await api.get("/metrics")  # while the watch is open
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        scraped.update(samples(response.text))
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)


async def test_every_metric_is_set_after_a_workload(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    running = await start(make_settings())
    api = running.client
    # the registry is the process's: what earlier tests observed is there too
    before = samples((await api.get("/metrics")).text)
    for i in range(5):
        assert (await api.post(PATH, json=report(POLR, f"r{i}", "ns", fail=i))).status_code == 201
    assert (await api.get(f"{PATH}/r0")).status_code == 200
    assert (await api.get(PATH)).status_code == 200
    patched = await api.patch(f"{PATH}/r1", json={"metadata": {"labels": {"a": "b"}}},
                              headers={"Content-Type": "application/merge-patch+json"})
    assert patched.status_code == 200
    assert (await api.delete(f"{PATH}/r4")).status_code == 200
    assert (await api.post("/analytics/v1/query", json={"query": "SELECT 1"})).status_code == 200

    # ClickHouse has the first batch (commit -> ClickHouse is observed then)
    async with asyncio.timeout(30):
        while (await api.post("/analytics/v1/query", json={
                "query": "SELECT count() FROM reports"})).json()["rows"][0][0] < 1:
            await asyncio.sleep(0.2)

    scraped: dict[str, list[tuple[dict[str, str], float]]] = {}
    watching = asyncio.Event()
    async with serve(running.system.app) as url, httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {running.system.token}"}) as http:
        watch = asyncio.create_task(watch_until(
            http, PATH, {"resourceVersion": "0"}, lambda events: any(
                e["object"]["metadata"]["name"] == "watched" for e in events),
            started=watching))
        async with asyncio.timeout(30):
            await watching.wait()
        # a change the open watch sees: its dispatch is timed
        assert (await api.post(PATH, json=report(POLR, "watched", "ns"))).status_code == 201
        async with asyncio.timeout(30):
            await asyncio.shield(watch)
        await scrape(watch, watching, api, scraped)

    def value(name: str, **labels: str) -> float:
        return sum(v for found, v in scraped.get(name, [])
                   if all(found.get(k) == want for k, want in labels.items()))

    for verb in ("create", "get", "list", "patch", "delete"):
        assert value("apiserver_request_total", verb=verb, resource="policyreports",
                     group="wgpolicyk8s.io") >= 1, verb
        assert value("apiserver_request_duration_seconds_count", verb=verb,
                     resource="policyreports") >= 1, verb
    assert value("reports_open_watches", resource="policyreports") >= 1
    assert value("reports_watch_cache_events") >= 6
    assert value("reports_watch_cache_age_seconds") > 0
    for name in ("reports_object_cache_objects", "reports_object_cache_bytes"):
        assert name in scraped, name  # nothing left the watch cache yet: 0
    assert {labels["result"] for labels, _ in scraped["reports_object_cache_reads_total"]
            } == {"hit", "miss"}
    for op in ("create", "update", "delete"):
        assert value("reports_write_commit_seconds_count", op=op) >= 1, op
    assert value("reports_commit_to_clickhouse_seconds_count") >= 1
    # seconds, not a timestamp's worth of them (record times are in seconds in
    # Faust), over this workload's changes (a backlog's are days old)
    def since(name: str) -> float:
        return value(name) - sum(v for _, v in before.get(name, []))
    assert since("reports_commit_to_clickhouse_seconds_count") >= 1
    assert since("reports_commit_to_clickhouse_seconds_sum") / since(
        "reports_commit_to_clickhouse_seconds_count") < 60
    # the change the watch saw, handed to it within seconds of its commit
    assert since("reports_watch_dispatch_seconds_count") >= 1
    assert since("reports_watch_dispatch_seconds_sum") / since(
        "reports_watch_dispatch_seconds_count") < 60
    assert value("reports_committer_batch_requests_count") >= 1
    assert value("reports_committer_recovery_seconds") > 0
    # keys let go of: none in so short a workload, both sources counted from 0
    assert {labels["source"] for labels, _ in scraped["reports_committer_lookups_total"]
            } == {"log", "clickhouse"}
    for step in ("decide", "publish"):
        assert value("reports_committer_transaction_seconds_count", step=step) >= 1, step
    # where a write's time goes: one sample per write at every stage
    writes = since("reports_write_stage_seconds_count") and {
        stage: value("reports_write_stage_seconds_count", stage=stage)
        for stage in ("produce", "queue", "decide", "transaction", "commit", "visible")}
    assert writes and min(writes.values()) >= 1, writes
    assert writes["queue"] == writes["decide"] == writes["transaction"], writes
    for operation in ("read", "write", "analytics"):
        assert value("reports_clickhouse_query_seconds_count", operation=operation) >= 1
    assert value("reports_authorization_decisions_total", decision="allowed") >= 10
    # lag is a count that is 0 when caught up: it is set for each agent
    for agent in ("materializer", "aggregate", "committer"):
        assert any(labels.get("agent") == agent
                   for labels, _ in scraped["reports_consumer_lag_records"]), agent

    # where the memory is: ClickHouse's tracked bytes and the interpreter's blocks
    assert value("reports_clickhouse_memory_bytes") > 1024 * 1024
    assert value("reports_python_allocated_blocks") > 100_000
    # the event loop's lag is sampled for as long as the process runs
    assert value("reports_event_loop_lag_seconds_count") >= 1

    # nothing registered that the workload left unset
    registered = {m.name for m in metrics.REGISTRY.collect()}
    assert registered == {
        "apiserver_request", "apiserver_request_duration_seconds", "reports_open_watches",
        "reports_watch_cache_events", "reports_watch_cache_age_seconds",
        "reports_object_cache_objects", "reports_object_cache_bytes",
        "reports_object_cache_reads", "reports_write_commit_seconds",
        "reports_commit_to_clickhouse_seconds", "reports_watch_dispatch_seconds",
        "reports_consumer_lag_records", "reports_clickhouse_query_seconds",
        "reports_committer_batch_requests", "reports_committer_transaction_seconds",
        "reports_committer_recovery_seconds", "reports_committer_lookups",
        "reports_write_stage_seconds", "reports_authorization_decisions",
        "reports_clickhouse_memory_bytes", "reports_python_allocated_blocks",
        "reports_event_loop_lag_seconds", "reports_kafka_retries",
        "reports_malloc_trim_seconds"}
