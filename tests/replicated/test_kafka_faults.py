"""Kafka as users run it: ``up`` with KAFKA_BOOTSTRAP at a three-node KRaft
cluster with production defaults (three replicas, two in sync, transaction
verification and Eligible Leader Replicas on), under the benchmark's
Kyverno-shaped load of 16 writers and four open watches, while one broker
fault happens per test. Each checks what ``bench.faults`` checks: no
acknowledged write lost (change log and ClickHouse), resourceVersions
strictly increasing and never reused, no request applied twice, every watch
gapless or ended with 410 and relisted, only 429 or 503 with Retry-After,
and writes resuming by themselves. The outage figures are the benchmark's
(``reports-pipeline bench --kafka-brokers 3``), not asserted here."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
import pytest_asyncio
from aiokafka.admin import AIOKafkaAdminClient

from bench import faults
from bench.upprocess import RunningSystem
from launcher.broker.cluster import KafkaCluster
from pipeline.commit.service import COMMITTER_RETRY_BACKOFF_MS
from pipeline.kafka import topicadmin
from pipeline.settings import Settings
from tests.e2e.conftest import BIN

pytestmark = pytest.mark.replicated


class Replicated:
    def __init__(self, cluster: KafkaCluster, system: RunningSystem, settings: Settings):
        self.cluster = cluster
        self.system = system
        self.settings = settings


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replicated(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replicated]:
    root: Path = tmp_path_factory.mktemp("replicated")
    cluster = KafkaCluster(root / "kafka", controllers=3)
    await cluster.start()
    try:
        env = {"KAFKA_BOOTSTRAP": cluster.bootstrap, "REPORTS_TOPIC_PREFIX": "faults"}
        system = RunningSystem(root / "system", env=env)
        await system.start()
        try:
            yield Replicated(cluster, system, Settings.from_env(env))
        finally:
            await system.stop()
    finally:
        await cluster.stop()


@pytest.mark.asyncio(loop_scope="module")
async def test_every_topic_has_three_replicas_two_in_sync(replicated: Replicated) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=replicated.cluster.bootstrap)
    await admin.start()
    try:
        # `up` is ready before the aggregation agent has made its tables'
        # topics (it does not wait for their recovery): await them
        deadline = time.monotonic() + 120
        while True:
            ours = [t for t in await admin.list_topics()
                    if t.startswith(("faults.", "faults-")) or t == "__consumer_offsets"]
            if any(t.endswith("-changelog") for t in ours) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        described = await admin.describe_topics(ours)
        configs = await topicadmin.topic_configs(admin, ours)
    finally:
        await admin.close()
    # the change log, requests, replies, the public topics and Faust's tables
    assert {"faults.changes", "faults.requests", "faults.replies", "faults.result-events",
            "faults.summaries"} <= set(ours)
    assert any(t.endswith("-changelog") for t in ours), ours
    for topic in described:
        assert {len(p["replicas"]) for p in topic["partitions"]} == {3}, topic["topic"]
    for name, values in configs.items():
        assert values["min.insync.replicas"] == "2", name


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("fault", list(faults.FAULTS))
async def test_a_broker_fault_loses_nothing_acknowledged(replicated: Replicated,
                                                         fault: str) -> None:
    said = len(replicated.system.output)
    outcome = await faults.phase(fault, replicated.cluster, replicated.system.kubeconfig,
                                 replicated.settings, clients=16, before=5, after=5,
                                 progress=lambda message: None)
    assert outcome.acks, "nothing was written"
    assert outcome.problems == [], f"{outcome.detail}: {outcome.problems}"
    # writes went on before the fault and after it: a write outage, not an end
    assert any(a.at < outcome.injected for a in outcome.acks)
    assert any(a.at > outcome.recovered for a in outcome.acks)
    if fault == "pause":
        # the stopped broker, once Kafka fenced it, was dropped by `up`'s
        # clients rather than after each request to it had timed out
        assert any("Kafka has fenced broker" in line
                   for line in replicated.system.output[said:]), outcome.detail


@pytest.mark.timeout(900)
def test_the_bench_breaks_a_three_node_clusters_brokers(tmp_path: Path) -> None:
    """``bench --kafka-brokers 3``: its own cluster and `up`, the transaction
    verification measure, writes on the embedded broker against the cluster,
    one fault's figures, and nothing left running."""
    output = tmp_path / "faults.json"
    done = subprocess.run(
        [str(BIN / "reports-pipeline"), "bench", "--kafka-brokers", "3", "--faults",
         "changes-leader", "--fault-seconds", "3", "--data-dir", str(tmp_path / "data"),
         "--output", str(output)], capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = {f["name"]: f for f in json.loads(output.read_text())["figures"]}
    for name in ("longest write outage", "Kafka's own failover in it",
                 "the system's share of it", "write p99 around it", "client-visible errors",
                 "failed checks", "Kafka retries in up"):
        assert f"fault changes-leader: {name}" in figures, name
    # the cost of replication, both sides measured in this run
    for name in ("writes/s, embedded broker", "writes/s, 3 brokers",
                 "write p99, embedded broker", "write p99, 3 brokers",
                 "committer's requests per transaction, embedded broker",
                 "committer's requests per transaction, 3 brokers",
                 "committer's transaction, embedded broker", "committer's transaction, 3 brokers"):
        assert figures[f"replication: {name}"]["value"] > 0, name
    assert "replication: writes/s, 3 brokers / embedded" in figures
    assert figures["fault changes-leader: failed checks"]["value"] == 0
    for backoff in (100, COMMITTER_RETRY_BACKOFF_MS):
        assert f"verification retries, backoff {backoff} ms" in figures
    assert "fault changes-leader: longest write outage" in done.stdout
    left = [p for p in psutil.process_iter(["cmdline"])
            if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert left == [], left
