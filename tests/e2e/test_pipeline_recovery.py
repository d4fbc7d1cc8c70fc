"""A randomized workload through the frontend while the Faust worker is killed
(SIGKILL) and restarted: afterwards ClickHouse's current counts per namespace
and policy, and the last values on the summaries topic, equal a recount from
the reports the frontend lists. The public topics follow their JSON Schemas,
and the consumer example prints a pass -> fail transition."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jsonschema
import pytest
from aiokafka import TopicPartition

from launcher.broker.singlenode import KafkaBroker
from pipeline.aggregate import counts as aggregate
from pipeline.kafka import clientconfig
from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import BIN, Up, client_for
from tests.helpers import collection_path, report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]
ROOT = Path(__file__).resolve().parents[2]
NAMESPACES = ("alpha", "beta", "gamma")


def random_report(rng: random.Random, name: str, ns: str) -> dict:  # type: ignore[type-arg]
    obj = report(POLR, name, ns)
    for r in obj["results"]:
        r["result"] = rng.choice(["pass", "pass", "pass", "fail", "warn", "skip"])
    del obj["summary"]
    return obj


async def workload(api: httpx.AsyncClient, rng: random.Random, steps: int) -> None:
    for _ in range(steps):
        ns, name = rng.choice(NAMESPACES), f"r{rng.randrange(12)}"
        path = f"{collection_path(POLR, ns)}/{name}"
        current = await api.get(path)
        if current.status_code == 404:
            r = await api.post(collection_path(POLR, ns), json=random_report(rng, name, ns))
            assert r.status_code == 201, r.text
        elif rng.random() < 0.3:
            assert (await api.delete(path)).status_code == 200
        else:
            body = random_report(rng, name, ns)
            body["metadata"]["resourceVersion"] = current.json()["metadata"]["resourceVersion"]
            r = await api.put(path, json=body)
            assert r.status_code == 200, r.text


async def query(api: httpx.AsyncClient, sql: str) -> list[list]:  # type: ignore[type-arg]
    r = await api.post("/analytics/v1/query", json={"query": sql})
    assert r.status_code == 200, r.text
    return r.json()["rows"]  # type: ignore[no-any-return]


def nonzero(counts: dict) -> dict:  # type: ignore[type-arg]
    return {k: v for k, v in counts.items() if any(v.values())}


async def summaries(bootstrap: str, prefix: str) -> tuple[dict, list[dict]]:  # type: ignore[type-arg]
    """Every record on the summaries topic, and the last "current" one per key."""
    tp = TopicPartition(f"{prefix}.summaries", 0)
    consumer = clientconfig.consumer(bootstrap)
    await consumer.start()
    last: dict = {}  # type: ignore[type-arg]
    values: list[dict] = []  # type: ignore[type-arg]
    try:
        consumer.assign([tp])
        consumer.seek(tp, (await consumer.beginning_offsets([tp]))[tp])
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                value = json.loads(record.value)
                values.append(value)
                if value["kind"] == "current":
                    last[(value["namespace"], value["policy"])] = value["counts"]
    finally:
        await consumer.stop()
    return last, values


async def counts_match(api: httpx.AsyncClient, bootstrap: str, prefix: str) -> None:
    """ClickHouse's current counts, its cluster-wide trend rows and the last
    summaries records all equal a recount of the reports the frontend lists;
    every summaries record follows its JSON Schema."""
    listed = (await api.get(collection_path(POLR, None))).json()["items"]
    expected = nonzero(aggregate.by_policy(aggregate.recount(listed)))
    assert expected, "the workload left failing and passing results"

    async def materialized() -> dict:  # type: ignore[type-arg]
        rows = await query(api, "SELECT namespace, policy, pass, fail, warn, error,"
                                " skip FROM policy_counts FINAL")
        return nonzero({(r[0], r[1]): dict(zip(aggregate.STATUSES, r[2:], strict=True))
                        for r in rows})
    async with asyncio.timeout(60):
        while (got := await materialized()) != expected:
            await asyncio.sleep(0.2)
    assert got == expected

    # the cluster-wide trend rows end on the same totals
    across = nonzero(aggregate.across_namespaces(aggregate.recount(listed)))

    async def cluster_wide() -> dict:  # type: ignore[type-arg]
        rows = await query(api, "SELECT policy, argMax((pass, fail, warn, error, skip),"
                                " (window_start, resource_version))"
                                " FROM policy_totals_windows FINAL GROUP BY policy")
        return nonzero({r[0]: dict(zip(aggregate.STATUSES, r[1], strict=True))
                        for r in rows})
    async with asyncio.timeout(60):
        while (totals := await cluster_wide()) != across:
            await asyncio.sleep(0.2)
    assert totals == across
    history = await query(api, "SELECT count() FROM results")
    assert history[0][0] > 0
    last, values = await summaries(bootstrap, prefix)
    assert nonzero(last) == expected
    validator = jsonschema.Draft202012Validator(
        json.loads((ROOT / "schemas" / "summaries.schema.json").read_text()))
    for value in values:
        validator.validate(value)
    assert any(v["kind"] == "window" for v in values)
    assert any(v["kind"] == "totals" for v in values)


@dataclass(frozen=True)
class Outside:
    """A broker that outlives `up`, and the environment that points `up` at
    it under a topic prefix of the test's own."""

    broker: KafkaBroker
    prefix: str

    @property
    def env(self) -> dict[str, str]:
        return {"KAFKA_BOOTSTRAP": self.broker.bootstrap, "REPORTS_TOPIC_PREFIX": self.prefix}


@pytest.fixture
async def outside(tmp_path: Path) -> AsyncIterator[Outside]:
    broker = KafkaBroker(tmp_path / "kafka")
    await broker.start()
    try:
        yield Outside(broker, f"e2e-{uuid.uuid4().hex[:8]}")
    finally:
        await broker.stop()


async def test_counts_survive_a_killed_worker(tmp_path: Path, outside: Outside) -> None:
    rng = random.Random(20261121)
    up = Up(tmp_path / "data", outside.env)
    try:
        await asyncio.to_thread(up.wait_ready)
        async with client_for(up) as api:
            await workload(api, rng, 150)
        up.kill(group=True)  # SIGKILL, the agent's process too: it dies wherever it is
        up = Up(tmp_path / "data", outside.env)
        await asyncio.to_thread(up.wait_ready)
        async with client_for(up) as api:
            await workload(api, rng, 150)
            await counts_match(api, outside.broker.bootstrap, outside.prefix)
    finally:
        up.kill()


async def test_counts_survive_a_killed_agent_process(tmp_path: Path, outside: Outside) -> None:
    """`up` starts its aggregation agent again when that process dies; the
    agent resumes where its committed offsets and tables left it."""
    rng = random.Random(20261127)
    up = Up(tmp_path / "data", outside.env)
    try:
        await asyncio.to_thread(up.wait_ready)
        async with client_for(up) as api:
            found = up.children("launcher.agentprocess")
            assert len(found) == 1, [c.cmdline() for c in found]
            agent = found[0]
            await workload(api, rng, 100)
            agent.kill()  # SIGKILL, mid-batch or between batches
            await workload(api, rng, 100)
            async with asyncio.timeout(60):
                while (found := up.children("launcher.agentprocess")) == [] or agent in found:
                    await asyncio.sleep(0.2)
            await workload(api, rng, 50)
            await counts_match(api, outside.broker.bootstrap, outside.prefix)
        assert "exited (-9); starting it again" in "".join(up.output)
    finally:
        up.kill()


async def test_consumer_example_prints_a_new_failure(tmp_path: Path, outside: Outside) -> None:
    broker, prefix = outside.broker, outside.prefix
    up = Up(tmp_path / "data", outside.env)
    example = None
    try:
        await asyncio.to_thread(up.wait_ready)
        # a failure from before the example starts: history, never printed
        async with client_for(up) as api:
            old = report(POLR, "old", "before", fail=1)
            assert (await api.post(collection_path(POLR, "before"), json=old)).status_code == 201
        await first_event(broker.bootstrap, f"{prefix}.result-events")
        example = await asyncio.create_subprocess_exec(
            str(BIN / "python"), str(ROOT / "examples" / "print_new_failures.py"),
            "--data-dir", str(up.data_dir),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert example.stdout is not None
        async with asyncio.timeout(30):
            assert b"watching" in await example.stdout.readline()
        async with client_for(up) as api:
            path = collection_path(POLR, "shop")
            created = (await api.post(path, json=report(POLR, "web", "shop"))).json()
            failing = report(POLR, "web", "shop", fail=1)
            failing["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
            assert (await api.put(f"{path}/web", json=failing)).status_code == 200
        async with asyncio.timeout(60):
            line = (await example.stdout.readline()).decode()
        assert "FAIL shop/Pod/kyverno-admission-controller-7d998c79c4-rj7th" in line, line
        assert "disallow-capabilities/adding-capabilities (was pass" in line

        consumer = clientconfig.consumer(broker.bootstrap, auto_offset_reset="earliest")
        consumer.subscribe([f"{prefix}.result-events", f"{prefix}.changes"])
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=3000)
        finally:
            await consumer.stop()
        schemas = {t: jsonschema.Draft202012Validator(json.loads(
            (ROOT / "schemas" / f"{t}.schema.json").read_text())) for t in ("result-events",
                                                                            "changes")}
        seen = set()
        for tp, records in batch.items():
            kind = tp.topic.removeprefix(f"{prefix}.")
            for record in records:
                schemas[kind].validate(json.loads(record.value))
                seen.add(kind)
        assert seen == {"result-events", "changes"}
    finally:
        if example is not None and example.returncode is None:
            example.terminate()
            await example.wait()
        up.kill()


async def first_event(bootstrap: str, topic: str) -> None:
    consumer = clientconfig.consumer(bootstrap, auto_offset_reset="earliest")
    consumer.subscribe([topic])
    await consumer.start()
    try:
        async with asyncio.timeout(60):
            while not await consumer.getmany(timeout_ms=1000):
                pass
    finally:
        await consumer.stop()


def test_example_is_runnable() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "print_new_failures.py"),
                          "--help"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and "--data-dir" in out.stdout and "--bootstrap" in out.stdout
