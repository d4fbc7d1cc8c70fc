"""A change log the worker reads as a backlog (days of changes, as after an
outage, or the demo's history): ClickHouse keeps each change's commit time,
and the trend tables get a row for every window the changes fall in, with the
counts as of that window's last change (a recount of the reports, not the
aggregate arithmetic)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from launcher import demo
from pipeline.aggregate.agent import window_start
from pipeline.aggregate.counts import contribution
from pipeline.kafka import changelog, topicadmin

pytestmark = pytest.mark.integration
# days old, well inside the results history's retention
END = datetime.now(UTC) - timedelta(hours=1)


def statuses(obj: dict | None) -> dict[tuple[str, str, str], str]:  # type: ignore[type-arg]
    """A report's results by (policy, rule, resource), as the agent keys them."""
    applied = contribution(obj, 0) if obj else None
    return dict(applied.statuses) if applied else {}


def recount(live: dict[tuple[str, str], dict]) -> Counter[tuple[str, str]]:  # type: ignore[type-arg]
    fails: Counter[tuple[str, str]] = Counter()
    for obj in live.values():
        for r in obj["results"]:
            if r["result"] == "fail":
                fails[(obj["metadata"]["namespace"], r["policy"])] += 1
    return fails


async def test_a_backlog_keeps_its_times_and_every_window(start, make_settings,  # type: ignore[no-untyped-def]
                                                          kafka: str) -> None:
    settings = make_settings()
    window = settings.window_seconds
    history = demo.changes(4, end=END, seed=5)
    await topicadmin.ensure_topics(settings, kafka)
    await changelog.append_history(settings, kafka, history)
    running = await start(settings)
    store, progress = running.system.analytics, running.system.progress
    last_rv = history[-1][0].resource_version

    deadline = time.monotonic() + 120
    while True:
        _, [(rv,)] = await store.analytics("SELECT max(resource_version) FROM policy_windows")
        if int(rv or 0) >= last_rv and await progress.watermark() >= last_rv:
            break
        assert time.monotonic() < deadline, f"applied up to {rv} of {last_rv}"
        await asyncio.sleep(0.5)

    # each change's results carry its commit time, not the materializer's
    _, rows = await store.analytics(
        "SELECT resource_version, any(committed) FROM results GROUP BY resource_version")
    committed = {int(rv): round(when.replace(tzinfo=UTC).timestamp() * 1000)
                 for rv, when in rows}
    for change, ts in history:
        if change.type != "DELETED":  # the record's timestamp, in milliseconds
            assert committed[change.resource_version] == int(ts * 1000)

    # the fail count of every window row is the recount after the window's last change;
    # its activity, the results written and the results newly failing in the window
    expected: dict[tuple[int, str, str], int] = {}
    activity: Counter[tuple[int, str, str, str]] = Counter()
    live: dict[tuple[str, str], dict] = {}  # type: ignore[type-arg]
    touched: set[tuple[str, str]] = set()
    for i, (change, ts) in enumerate(history):
        meta = change.obj["metadata"]
        key = (meta["namespace"], meta["name"])
        before = live.get(key)
        for obj in (before, None if change.type == "DELETED" else change.obj):
            touched |= {(meta["namespace"], r["policy"]) for r in (obj or {}).get("results", [])}
        start_of = window_start(ts, window)
        was = statuses(before)
        now = {} if change.type == "DELETED" else statuses(change.obj)
        for (policy, rule, resource), status in now.items():
            activity[(start_of, meta["namespace"], policy, "written")] += 1
            if status == "fail" and was.get((policy, rule, resource)) != "fail":
                activity[(start_of, meta["namespace"], policy, "new_failures")] += 1
        if change.type == "DELETED":
            live.pop(key, None)
        else:
            live[key] = change.obj
        if i + 1 == len(history) or window_start(history[i + 1][1], window) != start_of:
            fails = recount(live)
            for ns, policy in touched:
                expected[(start_of, ns, policy)] = fails[(ns, policy)]
            touched = set()
    _, rows = await store.analytics(
        "SELECT toUnixTimestamp(window_start), namespace, policy, fail, results_written,"
        " new_failures FROM policy_windows FINAL")
    written = {(int(s), ns, policy): int(fail) for s, ns, policy, fail, _, _ in rows}
    assert len({start for start, _, _ in expected}) > 50  # days of windows, not one
    assert written == expected
    for s, ns, policy, _, results_written, new_failures in rows:
        assert results_written == activity[(int(s), ns, policy, "written")]
        assert new_failures == activity[(int(s), ns, policy, "new_failures")]
    assert sum(activity.values()) > 0
