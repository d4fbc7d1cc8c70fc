"""The committer's state: the current version of every key it may be asked
about, and the next resourceVersion. Decisions themselves are ``commit.decide``.

State comes from ClickHouse (materialized) plus the change log's tail that
ClickHouse may not have yet; after that it follows its own decisions. The
committer also holds the set of every live key, so a create of a new key (most
of the write traffic) is decided without asking ClickHouse anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from pipeline.clickhouse.recovery import CommitterQueries
from pipeline.commit.decision import (
    Decision,
    current_after,
    decide,
    dry,
)
from pipeline.model import objects
from pipeline.model.messages import Change, WriteRequest
from pipeline.model.versions import EMPTY_RESOURCE_VERSION, Current, Progress
from pipeline.observe import metrics

log = logging.getLogger(__name__)

Key = tuple[str, str, str]
#: Most keys whose state is read ahead and held for a batch (a report's JSON
#: each, a few KB): what writers hand over within a batch or two, and some.
READ_AHEAD_MOST = 4096
#: Every committed change of the log after a position (ClickHouse's progress;
#: None: from the log's beginning).
TailReader = Callable[[Progress | None], Awaitable[list[Change]]]
#: Another reader of the change log in this process (the frontend's caches):
#: the key's latest committed version if that reader has read every change
#: up to the resourceVersion given and holds the key; None when it cannot say.
KnownVersion = Callable[[Key, int], Current | None]


def _key(req: WriteRequest) -> Key:
    return (req.resource, req.namespace, req.name)


class IncompleteLog(RuntimeError):
    """A recovery's read of ClickHouse and the change log ended before a
    version this committer saw committed (the log not yet showing all of
    its commits, or the two read out of step). Deciding from it would give
    that version out again; the committer tries again instead."""


class Committer:
    def __init__(self, store: CommitterQueries, read_tail: TailReader, *, topic: str,
                 max_keys: int = 5000):
        self._store = store
        self._read_tail = read_tail
        #: the change log, whose position in ClickHouse the tail starts after
        self._topic = topic
        self._state: dict[Key, Current] = {}
        #: every live key, as its ``objects.key_id`` (a million keys' tuples
        #: of strings took about 260 MB, their numbers 80), in a dict: the
        #: garbage collector walks every member of a set (a million numbers:
        #: about 130 ms of each full collection) and never a dict of numbers
        self._live: dict[int, None] = {}
        self._next_rv = 0
        #: the newest resourceVersion this committer saw committed (its
        #: transaction's commit returned): every recovery must reach it
        self._confirmed = 0
        self._max_keys = max_keys
        self._ready = False
        self._trimmed = 0.0
        #: keys' versions read ahead from ClickHouse (``prefetch``): each the
        #: key's latest, as no decision has changed the key since it was asked
        self._prefetched: dict[Key, Current] = {}
        #: keys to read ahead, and those being read
        self._asked: set[Key] = set()
        self._reading: set[Key] = set()
        #: keys being read that a decision changed meanwhile: their read is stale
        self._spoiled: set[Key] = set()
        #: recoveries and invalidations so far: a read begun before one is dropped
        self._generation = 0
        self._reader: asyncio.Task[None] | None = None
        #: set when a round of reading ahead ends
        self._read = asyncio.Event()
        #: the change log's other reader in this process, if any (``know``)
        self._known: KnownVersion | None = None
        #: every key let go of (not in the state) has its latest change at or
        #: below this: the position recovered from, then each trim's watermark
        self._let_go_upto = 0

    def know(self, known: KnownVersion) -> None:
        """Take keys' versions from ``known`` (a few microseconds) before
        asking ClickHouse (milliseconds, inside the batch): once it has read
        the log up to ``_let_go_upto`` it holds the latest of every key let
        go of, as this committer made every change since its recovery."""
        self._known = known

    def _knows(self, key: Key) -> Current | None:
        return self._known(key, self._let_go_upto) if self._known is not None else None

    @property
    def next_resource_version(self) -> int:
        return self._next_rv

    def invalidate(self) -> None:
        """Forget everything: another owner may have written meanwhile."""
        self._ready = False
        self._trimmed = 0.0
        self._forget_reads()

    def _forget_reads(self) -> None:
        self._generation += 1
        self._prefetched.clear()
        self._asked.clear()
        self._spoiled.clear()
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        self._reading = set()
        self._wake_deciders()

    def _wake_deciders(self) -> None:
        self._read.set()
        self._read = asyncio.Event()

    async def recover(self) -> None:
        # Where ClickHouse's copy of the log ends (its highest version),
        # asked first: the materializer may write more meanwhile, which the
        # live keys then hold and the tail (read from this position) replays
        # in order. Asked after them, a batch written in between would be in
        # neither, and its versions given out again.
        position = await self._store.progress(self._topic)
        materialized = position.resource_version if position else 0
        self._live = await self._store.live_keys()
        tail = await self._read_tail(position)
        self._forget_reads()
        self._state = {}
        for change in tail:
            self._follow(objects.identity(change.obj), change)
        self._let_go_upto = materialized
        self._next_rv = max([EMPTY_RESOURCE_VERSION, materialized,
                             *(c.resource_version for c in tail)]) + 1
        if self._next_rv <= self._confirmed:
            raise IncompleteLog(
                f"the change log read ends at resourceVersion {self._next_rv - 1}"
                f" (ClickHouse holds up to {materialized}, then {len(tail)} changes), before"
                f" {self._confirmed}, which this committer saw committed")
        self._ready = True
        log.info("committer recovered: %d live objects, %d changes in the log tail,"
                 " next resourceVersion %d", len(self._live), len(tail), self._next_rv)

    def confirm(self, decisions: Sequence[Decision]) -> None:
        """``decisions``' transaction is committed."""
        for d in decisions:
            if d.change is not None:
                self._confirmed = max(self._confirmed, d.change.resource_version)

    def _follow(self, key: Key, change: Change) -> None:
        """The key's state, and whether it is live, after a committed change."""
        self._state[key] = current_after(change)
        if self._prefetched or self._asked or self._reading:
            self._prefetched.pop(key, None)
            self._asked.discard(key)
            if key in self._reading:
                self._spoiled.add(key)
        if change.type == "DELETED":
            self._live.pop(objects.key_id(key), None)
        else:
            self._live[objects.key_id(key)] = None

    def prefetch(self, requests: Sequence[WriteRequest]) -> None:
        """Start reading from ClickHouse the state of the keys of ``requests``
        (not decided yet) that this committer has let go of, unless
        ``READ_AHEAD_MOST`` are held already. Keys asked while a read is under
        way go together in the next."""
        if not self._ready or len(self._prefetched) + len(self._asked) >= READ_AHEAD_MOST:
            return
        for key in map(_key, requests):
            if (key not in self._state and key not in self._prefetched
                    and key not in self._reading and objects.key_id(key) in self._live
                    and self._knows(key) is None):
                self._asked.add(key)
        if self._asked and (self._reader is None or self._reader.done()):
            self._reader = asyncio.create_task(self._read_ahead(self._generation),
                                               name="committer read-ahead")

    async def _read_ahead(self, generation: int) -> None:
        try:
            while self._asked and generation == self._generation:
                self._reading, self._asked = self._asked, set()
                try:
                    found = await self._store.current(self._reading)
                except Exception as err:  # the batch asks again itself, and fails there
                    log.debug("reading the committer's state ahead failed: %s", err)
                    found = {}
                if generation != self._generation:
                    return
                for key, current in found.items():
                    if key not in self._spoiled and key not in self._state:
                        self._prefetched[key] = current
                # the next round's keys are taken before a decider wakes
                self._spoiled.clear()
                self._wake_deciders()
        finally:
            if generation == self._generation:
                self._reading = set()
                self._wake_deciders()

    async def _take_read(self, missing: set[Key]) -> set[Key]:
        """Of ``missing`` (keys let go of), move into the state those read
        ahead, first waiting for the reads of them under way. What is left
        is still to be read."""
        while True:
            for key in [k for k in missing if k in self._state]:
                missing.discard(key)
            for key in [k for k in missing if k in self._prefetched]:
                self._state[key] = self._prefetched.pop(key)
                missing.discard(key)
            if not any(k in self._reading or k in self._asked for k in missing):
                return missing
            await self._read.wait()

    async def decide_batch(self, requests: Sequence[WriteRequest]) -> list[Decision]:
        if not self._ready:
            await self.recover()
        # Not `set - dict.keys()`: that walks every cached key.
        missing = {k for k in map(_key, requests)
                   if k not in self._state and objects.key_id(k) in self._live}
        if missing and self._known is not None:
            known = {k: v for k in missing if (v := self._knows(k)) is not None}
            self._state.update(known)
            missing.difference_update(known)
            metrics.COMMITTER_LOOKUPS.labels("log").inc(len(known))
        if missing:
            metrics.COMMITTER_LOOKUPS.labels("clickhouse").inc(len(missing))
            missing = await self._take_read(missing)
        if missing:
            self._state.update(await self._store.current(missing))
        decisions = []
        for req in requests:
            decision = decide(req, self._state.get(_key(req)), self._next_rv)
            if req.dry_run:
                decision = dry(decision)
            elif decision.change is not None:
                self._follow(_key(req), decision.change)
                self._next_rv += 1
            decisions.append(decision)
        return decisions

    async def trim(self) -> None:
        """Drop state ClickHouse already holds, once there is much of it: every
        deletion, and of the objects that exist all but the ``max_keys`` written
        last (the ones writers keep coming back to: a Pod's report is updated
        again and again, while admission's reports are created and deleted).
        What stays is bounded by ``max_keys`` plus the materializer's lag. At
        most once a second: while the materializer lags, every batch would ask."""
        if len(self._state) <= self._max_keys:
            return
        now = time.monotonic()
        if now - self._trimmed < 1.0:
            return
        self._trimmed = now
        watermark = await self._store.watermark()
        self._let_go_upto = max(self._let_go_upto, watermark)
        self._state = kept(self._state, watermark, self._max_keys)
        if len(self._prefetched) > READ_AHEAD_MOST // 2:  # read for writes never decided
            self._prefetched.clear()


def kept(state: dict[Key, Current], watermark: int, most: int) -> dict[Key, Current]:
    """What the committer keeps of ``state`` once ClickHouse holds every
    version up to ``watermark``: every later version, and the ``most``
    newest of the earlier versions of objects that exist. Pure."""
    fresh = {k: v for k, v in state.items() if v.resource_version > watermark}
    held = sorted(((v.resource_version, k) for k, v in state.items()
                   if v.resource_version <= watermark and not v.deleted), reverse=True)
    fresh.update((k, state[k]) for _, k in held[:most])
    return fresh
