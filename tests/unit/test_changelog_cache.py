"""The frontend's change-log cache answers a writer with exactly the change
its write committed, even when later changes of the same object came since."""

from __future__ import annotations

import pytest

from apiserver.changelog import Cached, ChangeLog, Event
from apiserver.errors import Unavailable
from pipeline.kafka.published import Entry, Published
from pipeline.model.messages import Change
from pipeline.settings import Settings

#: the resource of the cached changes, as the log's keys name it
R = "policyreports.wgpolicyk8s.io"


def _cache(size: int = 10, published: Published | None = None) -> ChangeLog:
    return ChangeLog(Settings(watch_cache_size=size), store=None,  # type: ignore[arg-type]
                     bootstrap="", published=published)


def _change(name: str, rv: int, etype: str = "MODIFIED") -> Change:
    obj = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
           "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}
    return Change(etype, obj, rv)  # type: ignore[arg-type]


def _event(name: str, rv: int, etype: str = "MODIFIED") -> Event:
    return Event((R, "ns", name), Cached.of(_change(name, rv, etype)))


def _entries(offset: int, *changes: Change) -> list[Entry]:
    return [Entry(offset + i, c.encode(), c, 1.0) for i, c in enumerate(changes)]


async def test_committed_finds_the_version_written_not_the_latest() -> None:
    log = _cache()
    for rv, name in enumerate(["a", "b", "a", "c", "a"], start=1):
        log._append(_event(name, rv))
    assert (await log.committed((R, "ns", "a"), 5)).resource_version == 5
    older = await log.committed((R, "ns", "a"), 3)
    assert older.resource_version == 3 and b'"resourceVersion":"3"' in older.raw
    assert (await log.committed((R, "ns", "c"), 4)).resource_version == 4


async def test_committed_change_no_longer_cached_is_unavailable_not_wrong() -> None:
    log = _cache(size=2)
    for rv in range(1, 5):
        log._append(_event("a", rv))
    with pytest.raises(Unavailable):
        await log.committed((R, "ns", "a"), 1)
    with pytest.raises(Unavailable):  # another object's version
        await log.committed((R, "ns", "b"), 3)


async def test_the_committers_changes_are_cached_once_committed() -> None:
    published = Published()
    log = _cache(published=published)
    for rv in (1, 2):
        log._append(_event("a", rv))
    _, sub = log.subscribe(2)
    published.add(_entries(40, _change("b", 3, "ADDED"), _change("a", 4)))
    assert log.resource_version == 4
    written = await log.committed((R, "ns", "b"), 3)
    assert written.resource_version == 3 and written.type == "ADDED"
    assert [sub.queue.get_nowait().change.resource_version for _ in range(2)] == [3, 4]
    assert log._covered == 43  # past the transaction's commit marker, after offset 41


async def test_changes_that_do_not_follow_the_cache_are_left_to_the_tail() -> None:
    published = Published()
    log = _cache(published=published)
    log._append(_event("a", 1))
    published.add(_entries(40, _change("a", 3)))  # the tail has not brought 2 yet
    assert log.resource_version == 1 and log._covered == 0
    with pytest.raises(Unavailable):
        await log.wait_for(3, timeout=0.05)
