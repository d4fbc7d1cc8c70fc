"""``reports-pipeline demo``: a fresh data directory given weeks of history,
then the whole system on it as ``up`` runs it.

The history (reportsamples.history: Kyverno's PolicyReports of a few teams' Pods,
failures appearing and being fixed) is decided by the committer's own
``decide`` and appended to the embedded broker's change log as the committer
would have committed it, each change stamped with its time in the past. When
``up`` starts, everything downstream runs as it always does: the committer
recovers from the log, the materializer writes the changes to ClickHouse
with their commit times, the aggregate agent counts them into its windows
(by those times) and publishes the public topics. Writing through the API
instead would stamp every change with today's time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from launcher.broker.singlenode import KafkaBroker
from pipeline.commit.decision import current_after, decide
from pipeline.kafka import changelog, topicadmin
from pipeline.model.messages import Change, WriteRequest
from pipeline.model.resources import by_id
from pipeline.model.versions import EMPTY_RESOURCE_VERSION, Current
from pipeline.settings import Settings
from reportsamples.history import history

REPORT = by_id("policyreports.wgpolicyk8s.io")


class DemoError(RuntimeError):
    """The demo cannot be written where it was asked to."""


@dataclass(frozen=True)
class Written:
    changes: int
    reports: int
    failing: int
    first: datetime
    last: datetime


def changes(days: int, *, end: datetime, seed: int) -> list[tuple[Change, float]]:
    """The history's writes as the committer decides them, with their times."""
    current: dict[tuple[str, str], Current] = {}
    rv = EMPTY_RESOURCE_VERSION + 1
    out = []
    for w in history(days=days, end=end, seed=seed):
        req = WriteRequest(id=str(uuid.uuid4()), op=w.op, resource=REPORT.id,  # type: ignore[arg-type]
                           namespace=w.namespace, name=w.name, reply_to="",
                           now=w.when.strftime("%Y-%m-%dT%H:%M:%SZ"), obj=w.obj)
        decision = decide(req, current.get((w.namespace, w.name)), rv)
        if decision.change is None:  # e.g. a scan of a Pod replaced meanwhile
            continue
        current[(w.namespace, w.name)] = current_after(decision.change)
        out.append((decision.change, w.when.timestamp()))
        rv += 1
    return out


def summary(history: list[tuple[Change, float]]) -> Written:
    live = {}
    for change, _ in history:
        key = (change.obj["metadata"]["namespace"], change.obj["metadata"]["name"])
        live[key] = None if change.type == "DELETED" else change.obj
    reports = [obj for obj in live.values() if obj is not None]
    failing = sum(r["summary"]["fail"] for r in reports)
    return Written(len(history), len(reports), failing,
                   datetime.fromtimestamp(history[0][1], UTC),
                   datetime.fromtimestamp(history[-1][1], UTC))


async def write(settings: Settings, data_dir: Path, *, days: int, seed: int,
                progress: Callable[[str], None]) -> Written:
    """Give the fresh ``data_dir`` (embedded broker and ClickHouse) ``days``
    days of history up to now."""
    if settings.kafka_bootstrap or settings.clickhouse_url:
        raise DemoError("the demo fills the embedded broker and ClickHouse of a data"
                        " directory: unset KAFKA_BOOTSTRAP and CLICKHOUSE_URL")
    if (data_dir / "clickhouse").exists():
        raise DemoError(f"{data_dir} already holds reports; give the demo a new --data-dir"
                        " (or run `reports-pipeline up` on this one)")
    data_dir.mkdir(parents=True, exist_ok=True)
    made = changes(days, end=datetime.now(UTC), seed=seed)
    broker = KafkaBroker(data_dir / "kafka", heap=settings.kafka_heap,
                         cache=Path(settings.kafka_cache) if settings.kafka_cache else None,
                         progress=progress)
    await broker.start()
    try:
        await topicadmin.ensure_topics(settings, broker.bootstrap)
        if await changelog.log_length(settings, broker.bootstrap):
            raise DemoError(f"the change log under {data_dir} is not empty; give the demo a"
                            " new --data-dir")
        progress(f"writing {len(made)} changes of {days} days to the change log")
        await changelog.append_history(settings, broker.bootstrap, made)
    finally:
        await broker.stop()
    return summary(made)
