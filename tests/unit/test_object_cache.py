"""The frontend's object cache (``pipeline.model.objectcache``): what it
keeps, what reads of ClickHouse may add, its budget and its dictionary."""

from __future__ import annotations

import random
import time

import orjson

from bench.workload import resources
from pipeline.model import objectcache
from pipeline.model.objectcache import ObjectCache
from reportsamples.reports import policy_report

R = "policyreports.wgpolicyk8s.io/v1alpha2"


def _reports(count: int) -> list[tuple[tuple[str, str, str], bytes]]:
    rng = random.Random(7)
    now = int(time.time())
    out = []
    for i, pod in enumerate(resources(count, 20, prefix="ns", rng=rng)):
        obj = policy_report(pod, now)
        obj["metadata"]["resourceVersion"] = str(1000 + i)
        out.append(((R, pod.namespace, pod.uid), orjson.dumps(obj)))
    return out


def test_a_kept_object_reads_back_as_it_was() -> None:
    cache = ObjectCache(1 << 20)
    (key, raw), = _reports(1)
    assert cache.get(key) is None
    cache.keep(key, 5, raw)
    assert cache.get(key) == (5, raw)
    cache.keep(key, 9, raw + b" ")
    assert cache.get(key) == (9, raw + b" ")
    cache.drop(key, 10)
    assert cache.get(key) is None and len(cache) == 0 and cache.size == 0


def test_an_offer_never_replaces_a_newer_version() -> None:
    cache = ObjectCache(1 << 20)
    (key, raw), = _reports(1)
    cache.keep(key, 7, raw)
    with cache.reading():
        cache.offer(key, 6, b"older")
    assert cache.get(key) == (7, raw)
    with cache.reading():
        cache.offer(key, 8, b"newer")
    assert cache.get(key) == (8, b"newer")


def test_what_was_let_go_while_reading_is_not_brought_back() -> None:
    """A deletion (or an eviction) that went below the floor while
    ClickHouse was read: the row read may be the version before it."""
    cache = ObjectCache(1 << 20)
    (key, raw), = _reports(1)
    cache.keep(key, 3, raw)
    with cache.reading():
        cache.drop(key, 4)
        cache.offer(key, 3, raw)
    assert cache.get(key) is None
    with cache.reading():  # a later reading knows nothing of the deletion
        cache.offer(key, 5, raw)
    assert cache.get(key) == (5, raw)


def test_the_budget_lets_the_oldest_go() -> None:
    reports = _reports(50)
    cache = ObjectCache(20_000)
    for i, (key, raw) in enumerate(reports):
        cache.keep(key, i + 1, raw)
    assert cache.size <= 20_000 and 0 < len(cache) < 50 and cache.evicted == 50 - len(cache)
    assert cache.get(reports[-1][0]) == (50, reports[-1][1])
    assert cache.get(reports[0][0]) is None and cache.spent
    with cache.reading():  # a read's object is taken, an older one let go
        cache.offer(reports[0][0], 1, reports[0][1])
    assert cache.get(reports[0][0]) == (1, reports[0][1]) and cache.size <= 20_000
    assert cache.get(reports[-1][0]) is not None


def test_a_trained_dictionary_keeps_a_report_in_a_few_hundred_bytes() -> None:
    reports = _reports(objectcache.SAMPLES + 500)
    cache = ObjectCache(1 << 30)
    for i, (key, raw) in enumerate(reports[:objectcache.SAMPLES]):
        cache.keep(key, i + 1, raw)
    samples = cache.samples()
    assert samples is not None and len(samples) == objectcache.SAMPLES
    assert cache.samples() is None  # one training at a time
    plain = cache.size
    cache.use(ObjectCache.trained(samples))
    for i, (key, raw) in enumerate(reports[objectcache.SAMPLES:]):
        cache.keep(key, i + 1, raw)
    per_report = (cache.size - plain) / 500
    raw_size = sum(len(r) for _, r in reports) / len(reports)
    assert per_report < raw_size / 10, (per_report, raw_size)
    # both kinds read back
    assert cache.get(reports[0][0]) == (1, reports[0][1])
    assert cache.get(reports[-1][0]) == (500, reports[-1][1])
