"""The committer's changes handed to the change log's readers in its process:
taken when the record holds what the committer sent, parsed otherwise, and
kept no longer than the slowest reader needs them."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import Connection
from pipeline.kafka.published import Entry, Published
from pipeline.materialize.consumer import Materializer
from pipeline.model.messages import Change, change_headers
from pipeline.serving.changelog import ChangeLog
from pipeline.settings import Settings
from tests.helpers import NothingMaterialized


def change(rv: int, name: str = "r") -> Change:
    obj = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
           "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
           "results": [{"policy": "p", "result": "fail"}]}
    return Change("MODIFIED", obj, rv, request_id=f"req-{rv}", previous=rv - 1)


def publish(published: Published, *offsets: int, name: str = "r") -> list[Change]:
    """One transaction's changes at ``offsets`` (each change's version is its offset)."""
    changes = [change(offset, name) for offset in offsets]
    published.add([Entry(offset, c.encode(), c)
                   for offset, c in zip(offsets, changes, strict=True)])
    return changes


def record(offset: int, c: Change, raw: bytes | None = None) -> ConsumerRecord:
    value = c.encode() if raw is None else raw
    return ConsumerRecord("changes", 0, offset, 1_700_000_000_000, 0, b"k", value, None, 1,
                          len(value), [(k, v) for k, v in change_headers(c)])


def test_the_committers_change_is_taken_for_the_same_bytes() -> None:
    published = Published()
    reader = published.reader()
    [c] = publish(published, 40)
    assert reader.change(record(40, c)) is c


def test_other_bytes_at_the_offset_are_parsed() -> None:
    published = Published()
    reader = published.reader()
    [mine], theirs = publish(published, 40), change(40, name="other")
    got = reader.change(record(40, theirs))
    assert got == theirs and got is not theirs
    assert reader.change(record(41, mine)) == mine  # nothing published there


def test_kept_until_every_reader_has_passed() -> None:
    published = Published()
    fast, slow = published.reader(), published.reader()
    changes = dict(zip(range(10, 14), publish(published, 10, 11, 12, 13), strict=True))
    for offset, c in changes.items():
        assert fast.change(record(offset, c)) is c
    publish(published, 14)
    assert published.kept() == 5  # the slow reader has read none
    assert slow.change(record(12, changes[12])) is changes[12]
    publish(published, 15)
    assert published.kept() == 3  # 13, 14 and 15: both readers are past 12
    assert slow.change(record(11, changes[11])) == changes[11]  # gone: parsed


def test_at_most_so_many_are_kept() -> None:
    published = Published(most=3)
    published.reader()  # never reads
    for offset in range(10):
        publish(published, offset)
    assert published.kept() == 3


def test_an_offset_seen_before_starts_afresh() -> None:
    published = Published()
    reader = published.reader()
    publish(published, *range(5))
    [again] = publish(published, 2, name="again")  # a recreated log
    assert published.kept() == 1
    assert reader.change(record(2, again)) is again



def test_the_frontends_cache_and_the_materializer_take_them() -> None:
    published = Published()
    settings = Settings()
    cache = ChangeLog(settings, store=NothingMaterialized(), bootstrap="", published=published)
    materializer = Materializer(settings, store=ChangeWrites(Connection(settings)), bootstrap="",
                                published=published)
    [c] = publish(published, 5)
    assert cache._changes.change(record(5, c)) is c
    assert materializer._changes.change(record(5, c)) is c
