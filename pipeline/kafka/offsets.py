"""Which offset of a partition a consumer may commit, given the records it has
handed to its agent and those the agent has acknowledged (no I/O).

A record handed over may still be lost before the agent takes it: Faust clears
its streams' queues whenever it resumes the flow of records. So an offset is
committable only when no record below it is still out; the consumer reads again
from the committed offset after such a clear, and hands the lost records over
once more. Offsets never handed over are transaction markers or aborted records:
the consumer reads a partition in order.
"""

from __future__ import annotations

from collections.abc import Collection


class Handed:
    """The records of one partition handed to an agent and not yet
    acknowledged."""

    __slots__ = ("_out", "_high")

    def __init__(self) -> None:
        self._out: set[int] = set()
        self._high = -1

    def hand(self, offset: int, committed: int | None) -> None:
        """A record goes to the agent (a second time, after a clear, too); one
        below the committed offset was processed already."""
        if committed is None or offset >= committed:
            self._out.add(offset)

    @property
    def out(self) -> int:
        return len(self._out)

    def commit_point(self, acked: Collection[int], committed: int | None) -> int | None:
        """The offset to commit once ``acked`` are acknowledged: the lowest
        still out, else the one after the highest acknowledged (None before
        anything is)."""
        if acked:
            self._high = max(self._high, max(acked))
            self._out.difference_update(acked)
        if committed is not None:  # handed again after it was acknowledged
            self._out.difference_update([o for o in self._out if o < committed])
        if self._out:
            return min(self._out)
        return self._high + 1 if self._high >= 0 else None
