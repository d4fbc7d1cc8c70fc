"""The system's Prometheus metrics (prometheus_client), one registry per
process, every one set by the part it measures: the frontend's requests and
watches, its change-log cache, the write path from request to commit and from
commit to ClickHouse, the worker's consumer lag, ClickHouse query times, the
committer's batches, authorization decisions, and where the memory is. Served on ``/metrics`` by the
frontend and on the probe port of ``serve`` and ``worker``."""

from __future__ import annotations

import asyncio
import sys
import time
from functools import lru_cache
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)

#: seconds, from well under a millisecond (cache hits) to a slow LIST
LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUESTS = Counter(
    "apiserver_request_total", "Requests answered by the frontend, by verb, API group,"
    " resource and HTTP code (as the kube-apiserver counts them).",
    ["verb", "group", "resource", "code"], registry=REGISTRY)
REQUEST_SECONDS = Histogram(
    "apiserver_request_duration_seconds", "Time to answer a request (to its last byte for"
    " lists; watches are not timed), by verb, API group and resource.",
    ["verb", "group", "resource"], buckets=LATENCY, registry=REGISTRY)
OPEN_WATCHES = Gauge(
    "reports_open_watches", "Watches being served, by resource.", ["resource"],
    registry=REGISTRY)
CACHE_EVENTS = Gauge(
    "reports_watch_cache_events", "Change-log events the frontend's cache holds"
    " (REPORTS_WATCH_CACHE_SIZE at most).", registry=REGISTRY)
CACHE_AGE = Gauge(
    "reports_watch_cache_age_seconds", "Age of the oldest event in the frontend's cache:"
    " how far back a watch can resume.", registry=REGISTRY)
OBJECT_CACHE_OBJECTS = Gauge(
    "reports_object_cache_objects", "Objects the frontend keeps compressed for the GETs"
    " of keys its watch cache no longer holds.", registry=REGISTRY)
OBJECT_CACHE_BYTES = Gauge(
    "reports_object_cache_bytes", "Bytes the object cache holds, as its budget"
    " (REPORTS_OBJECT_CACHE_MIB) counts them.", registry=REGISTRY)
OBJECT_CACHE_READS = Counter(
    "reports_object_cache_reads_total", "GETs of keys the watch cache does not hold, by"
    " whether the object cache had them (hit) or ClickHouse was read (miss).", ["result"],
    registry=REGISTRY)
for _result in ("hit", "miss"):
    OBJECT_CACHE_READS.labels(_result)  # both counted from 0
WRITE_COMMIT_SECONDS = Histogram(
    "reports_write_commit_seconds", "From a write's request to its committed change, as"
    " the frontend sees it.", ["op"], buckets=LATENCY, registry=REGISTRY)
COMMIT_TO_CLICKHOUSE_SECONDS = Histogram(
    "reports_commit_to_clickhouse_seconds", "From a change's commit (its record's time)"
    " to its rows in ClickHouse.", buckets=LATENCY, registry=REGISTRY)
#: finer where a watch's target lies (a quarter of a second)
DISPATCH = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0)
WATCH_DISPATCH_SECONDS = Histogram(
    "reports_watch_dispatch_seconds", "From a change's commit (its change-log record's"
    " time) until its event is handed to every watch that sees it: Kubernetes' watch"
    " latency SLI, one sample per change some watch sees. A write's own time before its"
    " commit is not in it.",
    buckets=DISPATCH, registry=REGISTRY)
CONSUMER_LAG = Gauge(
    "reports_consumer_lag_records", "Records between an agent's position and the end of"
    " the topic it reads.", ["agent"], registry=REGISTRY)
CLICKHOUSE_SECONDS = Histogram(
    "reports_clickhouse_query_seconds", "ClickHouse calls, by operation (read, write,"
    " analytics).", ["operation"], buckets=LATENCY, registry=REGISTRY)
COMMITTER_BATCH = Histogram(
    "reports_committer_batch_requests", "Write requests the committer decides in one"
    " transaction.", buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=REGISTRY)
COMMITTER_TRANSACTION_SECONDS = Histogram(
    "reports_committer_transaction_seconds", "One batch of the committer, by step: decide"
    " (versions and preconditions, in memory) and publish (its Kafka transaction: changes,"
    " replies and the requests offset, committed).", ["step"], buckets=LATENCY,
    registry=REGISTRY)
COMMITTER_LOOKUPS = Counter(
    "reports_committer_lookups_total", "Versions of keys the committer had let go of, by"
    " where it found them: log (the frontend's caches of the change log, in its process)"
    " or clickhouse.", ["source"], registry=REGISTRY)
for _source in ("log", "clickhouse"):
    COMMITTER_LOOKUPS.labels(_source)  # both counted from 0
COMMITTER_RECOVERY_SECONDS = Gauge(
    "reports_committer_recovery_seconds", "How long the committer's last recovery took:"
    " ClickHouse's live keys and the change log's tail read, before it decides writes.",
    registry=REGISTRY)
WRITE_STAGE_SECONDS = Histogram(
    "reports_write_stage_seconds", "Where a write's time goes, by stage, one sample per"
    " write: produce (the frontend publishing the request), queue (from the request's send"
    " until the committer takes it: mostly the transaction in flight, then the next one's"
    " AddPartitionsToTxn, which it joins), decide and transaction (the"
    " committer's batch that carried it), commit (from the request's publication to its"
    " reply at the frontend: queue, decide, transaction and the reply's delivery), visible"
    " (from the reply until the frontend's change-log cache holds the change).", ["stage"],
    buckets=LATENCY, registry=REGISTRY)
AUTHORIZATIONS = Counter(
    "reports_authorization_decisions_total", "Authorization decisions, by outcome (allowed,"
    " denied, error) and source (local: system:masters or no authorizer configured; cache;"
    " authorizer: a SubjectAccessReview).", ["decision", "source"], registry=REGISTRY)
CLICKHOUSE_MEMORY = Gauge(
    "reports_clickhouse_memory_bytes", "Memory ClickHouse tracks as in use (its"
    " MemoryTracking metric: with the embedded chDB, its share of this process), sampled"
    " with the materializer's lag.", registry=REGISTRY)
PYTHON_BLOCKS = Gauge(
    "reports_python_allocated_blocks", "Memory blocks the Python interpreter holds"
    " (sys.getallocatedblocks): the growth of its own heap, apart from native libraries'.",
    registry=REGISTRY)
PYTHON_BLOCKS.set_function(sys.getallocatedblocks)
KAFKA_RETRIES = Counter(
    "reports_kafka_retries_total", "Kafka requests a client sent again after a retriable"
    " error, by error: NotEnoughReplicas (a transactional produce the broker could not"
    " verify yet, KIP-890, or too few replicas in sync), NotLeaderForPartition (a leader"
    " moved), ...; and connections to a broker that failed (ConnectionFailed). Counted here"
    " instead of a log line each.", ["error"], registry=REGISTRY)
MALLOC_TRIM_SECONDS = Histogram(
    "reports_malloc_trim_seconds", "How long each return of freed memory to the system"
    " (glibc's malloc_trim, on a thread; REPORTS_MALLOC_TRIM_SECONDS apart) took: the"
    " allocator's arenas are locked meanwhile.", buckets=LATENCY, registry=REGISTRY)
EVENT_LOOP_LAG = Histogram(
    "reports_event_loop_lag_seconds", "How late the process's event loop runs a timer"
    " (sampled every 0.25 s): the wait any request, record or agent step has before its"
    " turn.", buckets=LATENCY, registry=REGISTRY)


@lru_cache(maxsize=4096)
def labelled(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, looked up once: the hot paths ask for the
    same few series on every request, and each lookup takes a lock."""
    return metric.labels(*values)


def stage(name: str) -> Any:
    """The ``WRITE_STAGE_SECONDS`` series of one stage of a write."""
    return labelled(WRITE_STAGE_SECONDS, name)


async def watch_event_loop(period: float = 0.25) -> None:
    """Sample the event loop's lag into ``EVENT_LOOP_LAG`` until cancelled."""
    while True:
        due = time.perf_counter() + period
        await asyncio.sleep(period)
        EVENT_LOOP_LAG.observe(max(0.0, time.perf_counter() - due))


def exposition(*more: CollectorRegistry) -> tuple[bytes, str]:
    """The metrics page (the process's registry and ``more``) and its content type."""
    return b"".join(generate_latest(r) for r in (REGISTRY, *more)), CONTENT_TYPE_LATEST
#: the fleet's own metrics, on its page only (``up`` has no fleet)
FLEET_REGISTRY = CollectorRegistry(auto_describe=True)
FLEET_RECORDS = Counter(
    "reports_fleet_records_total", "Records the fleet took from a cluster's topics, by"
    " topic (changes, summaries).", ["cluster", "topic"], registry=FLEET_REGISTRY)
FLEET_LAG_SECONDS = Histogram(
    "reports_fleet_lag_seconds", "From a change's commit in its cluster to its batch in"
    " the fleet store.", ["cluster"], buckets=LATENCY, registry=FLEET_REGISTRY)
FLEET_WRITE_SECONDS = Histogram(
    "reports_fleet_write_seconds", "How long one write of the fleet's batches (every"
    " follower's, one insert per table, then their positions) took.", buckets=LATENCY,
    registry=FLEET_REGISTRY)
FLEET_STALE = Gauge(
    "reports_fleet_source_stale", "1 while a cluster the fleet follows is unreachable or"
    " needs a resync.", ["cluster"], registry=FLEET_REGISTRY)
