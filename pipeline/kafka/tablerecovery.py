"""Kafka adapter: the end of the aggregation agent's table recovery when
Kafka deleted the records it had left to read.

Faust recovers a table by reading its changelog partition up to the last
offset it had when the recovery began, and the agent is ready once every
partition is read that far. Faust learns how far it has read from the
records it applies, so if Kafka deletes every record up to that offset
first, none arrives to say so: the consumer goes on from the log's new start,
past the offset Faust waits for, and the recovery never ends. The activity
table's changelog is deleted by time (``pipeline.model.topics``): after an
agent has been down for a few windows, its last segment can expire while it
reads the log back, and the agent did not get ready again. Faust checks for
this itself only in its exactly-once mode, which the agent does not use
(its own acknowledgements are exact; ``pipeline.kafka.offsets``).

A partition whose log starts past the offset Faust waits for, twice in a
row with nothing read in between and nothing waiting to be applied, is
taken as read to that offset. What was deleted is lost to the table as it
would have been had the agent read it earlier: the expired windows of the
activity table (the contributions table is compacted, and compaction always
keeps a partition's last record)."""

from __future__ import annotations

import logging
from typing import Any

import faust
from aiokafka.errors import KafkaError
from faust.types import TP, AppT

from pipeline.kafka import internals

log = logging.getLogger(__name__)

#: How often the recovery under way is looked at (Faust itself looks every
#: five seconds for a recovery with no record arriving).
CHECK_SECONDS = 5.0


class RecoveryPastDeletedRecords(faust.Service):  # type: ignore[misc]
    """A service of the app (``app.add_dependency``): started with it, before
    its tables recover, and looking for as long as it runs (a rebalance
    starts a recovery again)."""

    def __init__(self, app: AppT, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app

    @faust.Service.task
    async def _watch(self) -> None:
        seen: dict[TP, int | None] = {}  # partitions past their log's start, last check
        while not self.should_stop:
            await self.sleep(CHECK_SECONDS)
            seen = await self.check(seen)

    async def check(self, seen: dict[TP, int | None]) -> dict[TP, int | None]:
        behind = internals.recovery_behind(self.app)
        if not behind or internals.changelog_records_waiting(self.app):
            return {}
        try:
            starts = await self.app.consumer.earliest_offsets(*behind)
        except KafkaError as err:
            log.warning("the start of the tables' changelogs is not known: %r", err)
            return {}
        gone: dict[TP, int | None] = {}
        for tp, last in behind.items():
            start = starts.get(tp)
            if start is None or start <= last:
                continue  # records are left to read up to it
            read = internals.recovery_offset(self.app, tp)
            if tp in seen and seen[tp] == read:
                log.warning("Kafka deleted the records of %s up to %d (the log starts at %d)"
                            " before the table's recovery read them, from %s: they are"
                            " taken as read", tp, last, start, read)
                internals.mark_recovery_read(self.app, tp, last)
            else:
                gone[tp] = read
        return gone
