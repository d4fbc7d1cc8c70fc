"""The watch phase's figures: a tail told apart from a few bad seconds."""

from __future__ import annotations

from bench.figures import by_second, histogram_percentile
from bench.standardrun import WatchLags


def test_by_second_takes_each_whole_second_on_its_own() -> None:
    timed = [(0.1, 0.01), (0.9, 0.03), (1.0, 0.5), (1.5, 0.02), (3.2, 0.04)]
    assert by_second(timed, 99) == [0.03, 0.5, 0.04]
    assert by_second(timed, 50) == [0.01, 0.02, 0.04]
    assert by_second([], 99) == []


def test_the_note_names_the_worst_second_and_how_many_were_over() -> None:
    timed = [(s + 0.5, 0.6 if s in (3, 7) else 0.02) for s in range(10)]
    watched = WatchLags(timed, 0, [])
    assert watched.seconds_note() == (
        "p99 by second: worst 600 ms, 2 of 10 seconds over 250 ms")
    assert watched.lags == [lag for _, lag in timed]
    assert WatchLags([], 0, []).seconds_note() == (
        "p99 by second: worst 0 ms, 0 of 0 seconds over 250 ms")


def _page(counts: dict[str, int], name: str = "reports_watch_dispatch_seconds") -> str:
    lines = ["# TYPE reports_watch_dispatch_seconds histogram"]
    lines += [f'{name}_bucket{{le="{le}"}} {n}.0' for le, n in counts.items()]
    lines.append(f"{name}_count {counts['+Inf']}.0")
    return "\n".join(lines) + "\n"


def test_a_histograms_percentile_between_two_pages_is_its_buckets_bound() -> None:
    name = "reports_watch_dispatch_seconds"
    before = _page({"0.01": 90, "0.1": 100, "0.25": 100, "+Inf": 100})
    # since: 98 under 10 ms, one more under 100 ms, one more under 250 ms
    after = _page({"0.01": 188, "0.1": 199, "0.25": 200, "+Inf": 200})
    assert histogram_percentile(before, after, name, 50) == 0.01
    assert histogram_percentile(before, after, name, 99) == 0.1
    assert histogram_percentile(before, after, name, 100) == 0.25
    # past the last bound: "at most" infinity
    late = _page({"0.01": 90, "0.1": 100, "0.25": 100, "+Inf": 110})
    assert histogram_percentile(before, late, name, 99) == float("inf")
    # nothing counted between them, or no such histogram (etcd's kube-apiserver)
    assert histogram_percentile(before, before, name, 99) is None
    assert histogram_percentile("", "", name, 99) is None
    assert histogram_percentile(before, after, "reports_other_seconds", 99) is None
