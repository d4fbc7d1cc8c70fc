"""The aggregating agent's work: applying committed changes to per-report
contributions (a Faust table), keeping exact counts per namespace and policy,
counting activity in tumbling windows (a windowed Faust table), and turning
the results into public events and ClickHouse trend rows.

Exactness: a report's contribution carries the resourceVersion it was applied
at, so a change delivered twice, or replayed after a crash, is applied once.
A deleted report leaves no entry, so the table holds the reports that exist
(pods come and go all day): a replay runs forward from the agent's committed
offset, so an earlier version of a deleted report it applies again is deleted
again before it ends. Counts are never stored on their own; they are the sum
of the contributions, recomputed when the agent starts. When the contributions table is empty while
ClickHouse holds reports (its changelog topic was lost, or the pipeline is
started on existing data), the table is rebuilt from ClickHouse's latest state
first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from pipeline.aggregate import counts as aggregate
from pipeline.clickhouse.reads import StoredObject
from pipeline.model import objects, resources
from pipeline.model.messages import Change
from pipeline.model.versions import EMPTY_RESOURCE_VERSION
from pipeline.runtime.tasks import Turns

log = logging.getLogger(__name__)
JSON = dict[str, Any]
Publish = Callable[[str, bytes, bytes], Awaitable[Awaitable[Any]]]
METRICS = ("written", "new_failures", "resolved_failures")
#: the contributions table's entry for the resourceVersion of the last change
#: applied (no report's key: those name a resource, namespace and name)
LAST_APPLIED = "last-applied"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def window_start(ts: float, size: int) -> int:
    return int(ts // size) * size


class AggregateStore(Protocol):
    """What the agent asks of ClickHouse (``AggregateWrites`` has it; a process of
    the agent's own reaches it through its parent)."""

    async def watermark(self) -> int: ...

    async def versions_before(self, resource: str, before: int, *,
                              after: tuple[str, str] | None = None, limit: int = 1000
                              ) -> list[tuple[StoredObject, bool]]: ...

    async def write_policy_counts(self, rows: Sequence[Sequence[Any]]) -> None: ...

    async def write_policy_windows(self, rows: Sequence[Sequence[Any]]) -> None: ...

    async def write_policy_totals_windows(self, rows: Sequence[Sequence[Any]]) -> None: ...


@dataclass(frozen=True)
class Topics:
    result_events: str
    summaries: str


class Aggregator:
    def __init__(self, *, store: AggregateStore, contributions: MutableMapping[str, Any],
                 activity: Any, publish: Publish, topics: Topics, cluster: str,
                 window_seconds: int):
        self._store = store
        self._contributions = contributions
        self._activity = activity  # a Faust windowed table (WindowWrapper)
        self._publish = publish
        self._topics = topics
        self._cluster = cluster
        self._window = window_seconds
        self._totals: dict[aggregate.CountKey, int] | None = None
        self._sent: list[Awaitable[Any]] = []
        #: one batch or refresh at a time: a batch lets the event loop run
        #: other work as it goes, and a refresh must not see it half applied
        self._applying = asyncio.Lock()

    async def _send(self, topic: str, key: bytes, value: bytes) -> None:
        self._sent.append(await self._publish(topic, key, value))

    async def _delivered(self) -> None:
        """Wait for every published record's acknowledgement (at-least-once)."""
        sent, self._sent = self._sent, []
        for ack in sent:
            await ack

    @property
    def totals(self) -> dict[aggregate.CountKey, int]:
        return dict(self._totals or {})

    async def _ready(self, first_rv: int) -> None:
        """Sum the counts from the contributions table. When the table is empty
        (a first start, or its changelog topic was lost), it is first
        filled from what ClickHouse holds of versions older than the first
        change in hand; the log supplies the rest."""
        if self._totals is not None:
            return
        if not len(self._contributions):
            await self._materialized(first_rv - 1)
            await self._rebuild(before=first_rv)
        totals: dict[aggregate.CountKey, int] = {}
        # The counts are as of the last change applied: rows written before a
        # crash may be older (their batch's table records were kept, the rows
        # lost) or as new, never newer; the materializer's watermark may be
        # either, and rows of a later change must replace these.
        applied_rv = 0
        empty = []
        for key, value in self._contributions.items():
            if key == LAST_APPLIED:
                applied_rv = max(applied_rv, int(value["rv"]))
                continue
            applied = aggregate.Applied.from_json(value)
            aggregate.add_into(totals, applied.counts())
            applied_rv = max(applied_rv, applied.resource_version)
            if not applied.statuses:
                empty.append(key)
        for key in empty:  # deleted reports (earlier versions kept them)
            del self._contributions[key]
        self._totals = totals
        per_policy = aggregate.by_policy(totals)
        await self._emit_counts(per_policy.keys(), per_policy, applied_rv, datetime.now(UTC))
        await self._delivered()

    async def _materialized(self, rv: int) -> None:
        """Until ClickHouse holds every change up to ``rv`` (the materializer
        reads the log on its own, and may be behind this agent). No change has
        a version up to an empty store's: those it holds from the start."""
        if rv <= EMPTY_RESOURCE_VERSION:
            return
        while await self._store.watermark() < rv:
            await asyncio.sleep(0.1)

    async def _rebuild(self, *, before: int) -> None:
        count = 0
        for rtype in resources.RESOURCES:
            if not aggregate.counted(rtype):
                continue
            after: tuple[str, str] | None = None
            while True:
                page = await self._store.versions_before(rtype.id, before, after=after)
                for row, deleted in page:
                    if deleted:  # a deleted report contributes nothing
                        continue
                    applied = aggregate.contribution(orjson.loads(row.raw), row.resource_version)
                    if applied is not None:
                        key = objects.object_key(rtype, row.namespace, row.name)
                        self._contributions[key] = applied.to_json()
                        count += 1
                if len(page) < 1000:
                    break
                after = (page[-1][0].namespace, page[-1][0].name)
        if count:
            log.info("rebuilt %d report contributions from ClickHouse", count)

    async def refresh(self) -> None:
        """Publish every current count again, so the summaries topic, whose
        records are deleted after its retention, always holds them."""
        async with self._applying:
            if self._totals is None:
                return
            per_policy = aggregate.by_policy(self._totals)
            await self._emit_counts(per_policy.keys(), per_policy,
                                    await self._store.watermark(), datetime.now(UTC))
            await self._delivered()

    async def process(self, batch: Iterable[tuple[Change, float]]) -> None:
        """Apply a batch of (change, commit timestamp) in log order."""
        batch = list(batch)
        if not batch:
            return
        async with self._applying:
            await self._process(batch)

    async def _process(self, batch: list[tuple[Change, float]]) -> None:
        await self._ready(batch[0][0].resource_version)
        assert self._totals is not None
        # Window increments are summed over the batch and applied once per key:
        # every table update is a changelog record.
        increments: dict[tuple[int, str], int] = {}
        # The windows the batch's changes fall in (a batch read from a backlog
        # spans many), each with the counts as of its last change.
        windows: dict[int, Window] = {}
        window: Window | None = None
        last_rv = 0
        # each key is written once a batch: every table write is a changelog
        # record, and a report often changes twice in a second (None: deleted)
        updated: dict[str, dict[str, Any] | str | None] = {}
        turns = Turns()  # a second's changes at once would hold the event loop
        for change, ts in batch:
            await turns.take()
            key = objects.object_key(*objects.identity(change.obj))
            previous = updated[key] if key in updated else self._contributions.get(key)
            outcome = aggregate.apply_change(
                aggregate.Applied.from_json(previous) if previous else None,
                resource_version=change.resource_version, obj=change.obj,
                deleted=change.type == "DELETED")
            if outcome is None:
                continue
            start = window_start(ts, self._window)
            if window is None or window.start != start:
                if window is not None:  # as of its last change, before this one
                    window.close(self._totals)
                window = windows.setdefault(start, Window(start))
            last_rv = change.resource_version
            updated[key] = outcome.applied.to_json() if outcome.applied else None
            aggregate.add_into(self._totals, outcome.delta)
            window.ts, window.rv = ts, last_rv
            for (ns, policy), act in outcome.activity.items():
                for metric, n in zip(METRICS, (act.written, act.new_failures,
                                               act.resolved_failures), strict=True):
                    if n:
                        slot = (start, f"{ns}\x1f{policy}\x1f{metric}")
                        increments[slot] = increments.get(slot, 0) + n
                window.touched.add((ns, policy))
            window.touched.update((ns, policy) for ns, policy, _status in outcome.delta)
            at = iso(ts) if outcome.transitions else ""  # one time for its transitions
            for t in outcome.transitions:
                await self._send(self._topics.result_events, self._event_key(t),
                                    self._event(t, change, at))
        if window is not None:
            window.close(self._totals)
        # A batch's table writes and rows (hundreds of each) take turns too.
        for key, value in updated.items():
            await turns.take()
            if value is not None:
                self._contributions[key] = value
            elif key in self._contributions:
                del self._contributions[key]
        if last_rv:
            self._contributions[LAST_APPLIED] = {"rv": last_rv}
        # Each activity count's increment and the value it leaves are one step,
        # and the window rows carry that value, whatever Faust's expiry timer
        # (which drops a backlog's old windows) does between two steps.
        left: dict[tuple[int, str], int] = {}
        for (start, name), n in increments.items():
            await turns.take()
            activity = self._activity.relative_to(windows[start].ts)
            activity[name] += n
            left[(start, name)] = int(activity[name].value())
        touched = {key for w in windows.values() for key in w.touched}
        if touched:
            now = datetime.now(UTC)
            per_policy = aggregate.by_policy(self._totals)
            await self._emit_windows(windows.values(), left, now, turns)
            await self._emit_counts(touched, per_policy, last_rv, now, turns)
        await self._delivered()

    def _event_key(self, t: aggregate.Transition) -> bytes:
        return "/".join((self._cluster, t.namespace, t.policy, t.rule, t.resource)).encode()

    def _event(self, t: aggregate.Transition, change: Change, at: str) -> bytes:
        meta = objects.metadata(change.obj)
        kind, namespace, name = (t.resource.split("/", 2) + ["", ""])[:3]
        return orjson.dumps({
            "cluster": self._cluster, "namespace": t.namespace,
            "report": {"apiVersion": change.obj.get("apiVersion"),
                       "kind": change.obj.get("kind"), "name": meta.get("name", ""),
                       "uid": meta.get("uid", "")},
            "resource": {"kind": kind, "namespace": namespace, "name": name},
            "policy": t.policy, "rule": t.rule, "previous": t.previous, "current": t.current,
            **{k: t.details[k] for k in ("severity", "category", "source", "message")
               if k in t.details},
            "resourceVersion": str(change.resource_version), "time": at})

    async def _emit_counts(self, keys: Iterable[tuple[str, str]],
                           per_policy: dict[tuple[str, str], dict[str, int]], rv: int,
                           now: datetime, turns: Turns | None = None) -> None:
        turns = turns or Turns()
        rows = []
        at = iso(now.timestamp())  # once, not for each of hundreds of records
        for ns, policy in keys:
            await turns.take()
            counts = per_policy.get((ns, policy), dict.fromkeys(aggregate.STATUSES, 0))
            rows.append([self._cluster, ns, policy, *(counts[s] for s in aggregate.STATUSES),
                         rv, now])
            await self._send(self._topics.summaries,
                                "/".join((self._cluster, ns, policy)).encode(),
                                orjson.dumps({"kind": "current", "cluster": self._cluster,
                                              "namespace": ns, "policy": policy,
                                              "counts": counts, "resourceVersion": str(rv),
                                              "time": at}))
        if rows:
            await self._store.write_policy_counts(rows)

    async def _emit_windows(self, windows: Iterable[Window], left: dict[tuple[int, str], int],
                            now: datetime, turns: Turns) -> None:
        """Each window's rows and records: its activity counts are the values
        ``left`` by this batch's increments, the others as the table has them."""
        rows = []
        totals = []
        records = []
        at = iso(now.timestamp())  # once, not for each of hundreds of records
        for window in windows:
            activity = self._activity.relative_to(window.ts)
            end = window.start + self._window
            start_iso, end_iso = iso(window.start), iso(end)
            for (ns, policy), counts in window.levels.items():
                await turns.take()
                names = [f"{ns}\x1f{policy}\x1f{m}" for m in METRICS]
                values = [left[(window.start, n)] if (window.start, n) in left
                          else int(activity[n].value()) for n in names]
                rows.append([self._cluster, ns, policy,
                             datetime.fromtimestamp(window.start, UTC),
                             datetime.fromtimestamp(end, UTC), *values,
                             *(counts[s] for s in aggregate.STATUSES), window.rv, now])
                records.append((
                    "/".join((self._cluster, ns, policy, start_iso)).encode(),
                    orjson.dumps({"kind": "window", "cluster": self._cluster,
                                  "namespace": ns, "policy": policy,
                                  "window": {"start": start_iso, "end": end_iso},
                                  "resultsWritten": values[0], "newFailures": values[1],
                                  "resolvedFailures": values[2], "counts": counts,
                                  "resourceVersion": str(window.rv),
                                  "time": at})))
            # the same window for the whole cluster: one row per policy touched
            # (its key's namespace is "*", which no namespace is called)
            for policy, counts in window.cluster_levels.items():
                totals.append([self._cluster, policy, datetime.fromtimestamp(window.start, UTC),
                               datetime.fromtimestamp(end, UTC),
                               *(counts[s] for s in aggregate.STATUSES), window.rv, now])
                records.append((
                    "/".join((self._cluster, "*", policy, start_iso)).encode(),
                    orjson.dumps({"kind": "totals", "cluster": self._cluster,
                                  "policy": policy,
                                  "window": {"start": start_iso, "end": end_iso},
                                  "counts": counts, "resourceVersion": str(window.rv),
                                  "time": at})))
        for key, value in records:
            await self._send(self._topics.summaries, key, value)
        if rows:
            await self._store.write_policy_windows(rows)
        if totals:
            await self._store.write_policy_totals_windows(totals)


@dataclass
class Window:
    """One tumbling window a batch's changes fall in: the (namespace, policy)
    pairs its changes touched, and once closed, their counts (and each
    touched policy's across namespaces) as of its last change."""

    start: int
    ts: float = 0.0
    rv: int = 0
    touched: set[tuple[str, str]] = field(default_factory=set)
    levels: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    cluster_levels: dict[str, dict[str, int]] = field(default_factory=dict)

    def close(self, totals: dict[aggregate.CountKey, int]) -> None:
        for ns, policy in self.touched:
            self.levels[(ns, policy)] = {s: totals.get((ns, policy, s), 0)
                                         for s in aggregate.STATUSES}
        policies = {policy for _, policy in self.touched}
        across = aggregate.across_namespaces(
            {k: n for k, n in totals.items() if k[1] in policies})
        for policy in policies:
            self.cluster_levels[policy] = across.get(policy, dict.fromkeys(aggregate.STATUSES, 0))
