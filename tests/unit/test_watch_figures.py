"""The watch phase's figures: a tail told apart from a few bad seconds."""

from __future__ import annotations

from bench.figures import by_second
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
