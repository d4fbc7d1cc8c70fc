"""The frontend's change-log cache answers a writer with exactly the change
its write committed, even when later changes of the same object came since."""

from __future__ import annotations

import pytest

from apiserver.changelog import Cached, ChangeLog, Event
from apiserver.errors import Unavailable
from pipeline.model.messages import Change, Committed
from pipeline.settings import Settings


def _cache(size: int = 10) -> ChangeLog:
    return ChangeLog(Settings(watch_cache_size=size), store=None,  # type: ignore[arg-type]
                     bootstrap="")


def _event(name: str, rv: int, etype: str = "MODIFIED") -> Event:
    obj = {"apiVersion": "v1", "kind": "X", "metadata": {"name": name, "namespace": "ns",
                                                         "resourceVersion": str(rv)}}
    return Event(("polr", "ns", name), Cached.of(Change(etype, obj, rv)))  # type: ignore[arg-type]


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


def _committed(name: str, rv: int, offset: int) -> Committed:
    obj = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
           "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}
    change = Change("ADDED", obj, rv)
    return Committed(offset, 1.0, change, change.encode())


async def test_a_committed_transaction_is_cached_before_the_tail_reads_it() -> None:
    log = _cache()
    log._rv = 5
    watch, sub = log.subscribe(5)
    assert watch == []
    await log.committed_here([_committed("a", 6, 10), _committed("b", 7, 11)])
    await log.wait_for(7, timeout=0)  # no fetch needed
    assert (await log.committed(("policyreports.wgpolicyk8s.io", "ns", "b"), 7)
            ).resource_version == 7
    seen = [sub.queue.get_nowait() for _ in range(2)]
    assert [e.change.resource_version for e in seen if e is not None] == [6, 7]
    # the tail passes over these records when it reads them
    assert log._taken_below == 12


async def test_a_transaction_after_a_gap_waits_for_the_tail() -> None:
    """Taken in after changes the cache has not read, it would stand before
    them: the tail reads them all in order instead."""
    log = _cache()
    log._rv = 5
    await log.committed_here([_committed("a", 7, 10)])
    assert log.resource_version == 5 and log._taken_below == 0
    with pytest.raises(Unavailable):
        await log.wait_for(7, timeout=0)
