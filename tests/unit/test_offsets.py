"""The offset a consumer commits never passes a record its agent has not
acknowledged, whatever Faust drops and reads again."""

from __future__ import annotations

from pipeline.kafka.offsets import Handed


def handed(offsets: range | list[int], committed: int | None = None) -> Handed:
    h = Handed()
    for o in offsets:
        h.hand(o, committed)
    return h


def test_nothing_acknowledged_commits_nothing() -> None:
    assert Handed().commit_point([], None) is None
    assert handed([0, 2]).commit_point([], None) == 0


def test_markers_between_records_do_not_hold_the_commit() -> None:
    # single-record transactions: every other offset is a marker
    h = handed([0, 2, 4, 6])
    assert h.commit_point([0, 2, 4, 6], None) == 7
    assert h.out == 0


def test_the_commit_stops_at_the_first_record_still_out() -> None:
    h = handed([10, 12, 14, 16])
    assert h.commit_point([10, 14, 16], 10) == 12
    assert h.commit_point([12], 12) == 17


def test_records_dropped_from_the_queue_hold_the_commit_until_read_again() -> None:
    """225 was committed; 232..300 were read, the agent took 232, and Faust
    cleared its queue; 300, read before the clear, is acknowledged first."""
    h = handed(range(232, 302, 2), committed=225)
    assert h.commit_point([232, 300], 225) == 234
    # read again from 225 after the clear: all of them come back
    for o in range(226, 302, 2):
        h.hand(o, 234)
    assert h.commit_point(list(range(234, 300, 2)), 234) == 300  # its second copy
    assert h.commit_point([300], 300) == 301
    assert h.out == 0


def test_a_record_handed_again_after_its_commit_does_not_hold_it() -> None:
    h = handed([5, 7])
    assert h.commit_point([5, 7], None) == 8
    h.hand(7, 8)   # a duplicate the consumer read before a seek back: not out
    h.hand(9, 8)
    assert h.out == 1
    assert h.commit_point([9], 8) == 10


def test_an_acknowledged_duplicate_below_the_commit_is_dropped() -> None:
    h = handed([5, 7, 9])
    assert h.commit_point([7], None) == 5
    assert h.commit_point([5, 9], 5) == 10
    # a record handed when 5 was still out, acknowledged twice: never holds
    h.hand(6, 5)
    assert h.commit_point([11], 10) == 12
