"""The frontend's change-log cache answers a writer with exactly the change
its write committed, even when later changes of the same object came since."""

from __future__ import annotations

import pytest

from pipeline.model.cache import Cached, Event
from pipeline.model.messages import Change, EventType
from pipeline.model.storage import Unavailable
from pipeline.serving.changelog import ChangeLog
from pipeline.settings import Settings
from tests.helpers import NothingMaterialized


def _cache(size: int = 10) -> ChangeLog:
    return ChangeLog(Settings(watch_cache_size=size), store=NothingMaterialized(),
                     bootstrap="")


def _event(name: str, rv: int, etype: EventType = "MODIFIED") -> Event:
    obj = {"apiVersion": "v1", "kind": "X", "metadata": {"name": name, "namespace": "ns",
                                                         "resourceVersion": str(rv)}}
    return Event(("polr", "ns", name), Cached.of(Change(etype, obj, rv)))


async def test_committed_finds_the_version_written_not_the_latest() -> None:
    log = _cache()
    for rv, name in enumerate(["a", "b", "a", "c", "a"], start=1):
        log._append(_event(name, rv))
    assert (await log.committed(("polr", "ns", "a"), 5)).resource_version == 5
    older = await log.committed(("polr", "ns", "a"), 3)
    assert older.resource_version == 3 and b'"resourceVersion":"3"' in older.raw
    assert (await log.committed(("polr", "ns", "c"), 4)).resource_version == 4


async def test_committed_change_no_longer_cached_is_unavailable_not_wrong() -> None:
    log = _cache(size=2)
    for rv in range(1, 5):
        log._append(_event("a", rv))
    with pytest.raises(Unavailable):
        await log.committed(("polr", "ns", "a"), 1)
    with pytest.raises(Unavailable):  # another object's version
        await log.committed(("polr", "ns", "b"), 3)


def test_a_watch_starts_with_the_events_of_its_scope_after_its_version_in_order() -> None:
    log = _cache(size=10)
    for rv, name in enumerate(["a", "b", "a", "c", "a", "b"], start=1):
        log._append(_event(name, rv))
    backlog, sub = log.subscribe(3, ("polr", "ns"))
    assert [(e.key[2], e.change.resource_version) for e in backlog] == [
        ("c", 4), ("a", 5), ("b", 6)]
    assert log.subscribe(6, ("polr", "ns"))[0] == []  # nothing after the newest
    assert log.subscribe(0, ("polr", "other"))[0] == []  # another namespace's
    assert [e.change.resource_version for e in log.subscribe(0, ("polr", None))[0]] == [
        1, 2, 3, 4, 5, 6]
    log.unsubscribe(sub)
