"""Reading and writing reports: stored state overlaid with the change log's
tail for reads, the committer for writes; each through a port
(``apiserver.storage.ports``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from apiserver.contract import failures, paging, patching, validation
from apiserver.contract.errors import BadRequest, Conflict, Gone, NotFound, Timeout
from apiserver.contract.selectors import FieldSelector, LabelSelector
from apiserver.storage.ports import ChangeFeed, ObjectReader, WriteSubmitter
from pipeline.model.cache import Cached, Event, Subscription
from pipeline.model.messages import WriteRequest
from pipeline.model.objects import now_rfc3339
from pipeline.model.resources import ResourceType
from pipeline.model.storage import (
    Expired,
    Refused,
    StoredObject,
    StoreError,
    Unavailable,
    json_bytes,
)
from pipeline.observe import metrics

log = logging.getLogger(__name__)

JSON = dict[str, Any]
#: what a write answers: the object, or its change as the change log holds it
Written = JSON | Cached


def as_json(written: Written) -> JSON:
    return written.obj if isinstance(written, Cached) else written
PAGE = 500
#: Pages read ahead for the requests that will continue their lists, at
#: most, and how long one waits for its request (seconds).
READ_AHEAD = 8
READ_AHEAD_SECONDS = 10.0
#: Attempts of a patch whose object other writers keep changing (kube-apiserver
#: retries such a patch until it applies).
PATCH_RETRIES = 64


@dataclass(frozen=True)
class ListQuery:
    rtype: ResourceType
    namespace: str | None
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    def digest(self) -> str:
        return paging.query_digest(self.rtype.id, self.namespace or "", repr(self.labels),
                                   repr(self.fields))

    def matches(self, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)


@dataclass
class Item:
    """One object of a list: the raw JSON from ClickHouse or a decoded object
    from the change log; each form is made from the other only when asked."""

    namespace: str
    name: str
    resource_version: int
    raw: str | bytes | None = None
    obj: JSON | None = None

    def object(self) -> JSON:
        if self.obj is None:
            assert self.raw is not None
            self.obj = orjson.loads(self.raw)
        return self.obj

    def json(self) -> bytes:
        if self.raw is None:
            return orjson.dumps(self.obj)
        return json_bytes(self.raw)


@dataclass
class ListResult:
    resource_version: int
    items: AsyncIterator[Item]
    #: Set once ``items`` is exhausted, when there is a further page.
    continue_token: str = field(default="")


def _abandon(reading: asyncio.Future[Any]) -> None:
    """A read no one will take: cancelled, or its failure taken so that
    asyncio does not report it as never retrieved."""
    if not reading.done():
        reading.cancel()
    elif not reading.cancelled():
        reading.exception()


def _stored(row: StoredObject) -> Item:
    return Item(row.namespace, row.name, row.resource_version, raw=row.raw)


#: a batch of a list read from the store: (the query's digest, the key it
#: starts after, its size)
BatchKey = tuple[str, tuple[str, str] | None, int]


@dataclass
class _ReadAhead:
    """A batch read before its request came, with the resourceVersion up to
    which the store held every change when the read began."""

    reading: asyncio.Future[list[StoredObject]]
    stored: int
    #: drops the read when no request has taken it in time
    expiry: asyncio.TimerHandle

    def drop(self) -> None:
        """No request takes it: its timer goes, and with it the last
        reference to the read (a timer keeps its callback until cancelled)."""
        self.expiry.cancel()
        _abandon(self.reading)


class ReportService:
    def __init__(self, *, store: ObjectReader, changelog: ChangeFeed, writer: WriteSubmitter):
        self._store = store
        self._changes = changelog
        self._writer = writer
        #: the first batch of the pages clients will ask for next, oldest first
        self._ahead: dict[BatchKey, _ReadAhead] = {}

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion this frontend has read."""
        return self._changes.resource_version

    async def sync(self) -> None:
        """Until every change committed before the call can be read here."""
        await self._changes.sync()

    # -- reads ------------------------------------------------------------
    async def _sync(self, resource_version: str | None, match: str | None, *,
                    settle: bool = True) -> int:
        """Bring the cache to the freshness a read asks for; returns the
        resourceVersion the read is served at."""
        if match not in (None, "", "NotOlderThan", "Exact"):
            raise BadRequest(f'resourceVersionMatch "{match}" is not supported: use'
                             ' NotOlderThan or Exact')
        if match and not resource_version:
            raise BadRequest("resourceVersionMatch is forbidden unless resourceVersion is"
                             " provided")
        if not resource_version:
            await self._changes.sync(settle=settle)
            return self._changes.resource_version
        wanted = parse_resource_version(resource_version)
        if match == "Exact" and wanted == 0:
            raise BadRequest('resourceVersionMatch "Exact" is forbidden for resourceVersion'
                             ' "0"')
        if wanted:
            await self.wait_for(wanted)
        if settle:
            await self._changes.settled()
        current = self._changes.resource_version
        if match == "Exact" and wanted != current:
            raise Gone(f"resourceVersion {wanted} is not the current one ({current}); only the"
                       " current state can be listed exactly")
        return current

    async def _guard(self, coro: Any) -> Any:
        try:
            return await coro
        except StoreError as err:
            raise failures.api_error(err) from err

    async def get(self, rtype: ResourceType, namespace: str, name: str, *,
                  resource_version: str | None = None) -> JSON:
        await self._sync(resource_version, None, settle=False)
        # The cache holds every change after its floor: a key it holds is at
        # its latest version there, and ClickHouse is not asked.
        change = self._changes.latest((rtype.id, namespace, name))
        if change is not None:
            if change.type == "DELETED":
                raise not_found(rtype, name)
            return change.obj
        stored = await self._guard(self._changes.below(
            (rtype.id, namespace, name), lambda: self._store.get(rtype.id, namespace, name)))
        if stored is None:
            raise not_found(rtype, name)
        obj: JSON = orjson.loads(stored.raw)
        return obj

    async def list_objects(self, query: ListQuery, *, limit: int = 0, continue_token: str = "",
                   resource_version: str | None = None, match: str | None = None) -> ListResult:
        after: tuple[str, str] | None = None
        snapshot: dict[tuple[str, str], Item | None] = {}
        if continue_token:
            if resource_version:
                raise BadRequest("specifying resource version is not allowed when using"
                                 " continue")
            token = paging.decode(continue_token, query.digest())
            after = token.after
            if token.resource_version < 0:  # continuing inconsistently, after a 410
                list_rv = await self._sync(None, None)
            else:
                # served as of the token's version, which the cache has: no
                # round trip to the log's end (a batch that ClickHouse has
                # newer than the cache waits for it in _back_to)
                await self._changes.settled()
                list_rv = token.resource_version
                try:
                    snapshot = await self._as_of(query, list_rv, after)
                except Expired:
                    raise _expired_continue(query, after) from None
        else:
            list_rv = await self._sync(resource_version, match)
        result = ListResult(list_rv, _empty())
        result.items = self._page(query, after, limit, result, snapshot)
        return result

    async def _as_of(self, query: ListQuery, rv: int, after: tuple[str, str] | None,
                     upto: tuple[str, str] | None = None) -> dict[tuple[str, str], Item | None]:
        """The objects past ``after`` (up to ``upto``) that changed since
        ``rv``, as they were at ``rv`` (None: not there, or not matching): with
        the rest as they are now, the list as of ``rv``. Expired when that
        state is gone (the cache no longer reaches back to ``rv``, or
        ClickHouse merged an old version away)."""
        first = self._changes.first_changes(query.rtype.id, query.namespace, rv, after, upto)
        out: dict[tuple[str, str], Item | None] = {}
        wanted = []
        for key, event in first.items():
            before = event.previous
            if event.previous_rv == 0:
                out[key] = None
            elif before is not None and before.resource_version == event.previous_rv:
                out[key] = (Item(key[0], key[1], before.resource_version, raw=before.raw)
                            if query.matches(before.head) else None)
            else:
                wanted.append((key[0], key[1], event.previous_rv))
        found = await self._guard(self._store.versions(query.rtype.id, wanted))
        for ns, name, _ in wanted:
            row = found.get((ns, name))
            if row is None:
                raise Expired(f"version {rv} of {ns}/{name} was merged away")
            item = _stored(row)
            out[(ns, name)] = item if query.matches(item.object()) else None
        return out

    async def _page(self, query: ListQuery, after: tuple[str, str] | None, limit: int,
                    result: ListResult, snapshot: dict[tuple[str, str], Item | None]
                    ) -> AsyncIterator[Item]:
        count = 0
        last: tuple[str, str] | None = None
        # A page needs the item past its limit to know whether to continue: a
        # batch of PAGE + 1 keeps a page of up to PAGE items to one query.
        batch = min(limit, PAGE) + 1 if limit else PAGE
        items = self.iterate(query, after, batch=batch, as_of=result.resource_version,
                             ahead=not limit or limit > PAGE)
        async with aclosing(items):
            async for item in (_with_snapshot(items, snapshot) if snapshot else items):
                if limit and count == limit:
                    assert last is not None
                    result.continue_token = paging.encode(paging.Continue(
                        result.resource_version, last, query.digest()))
                    # the next page's first batch is read while this one is
                    # sent and its client asks for the next
                    self._read_ahead(query, last, batch)
                    return
                count += 1
                last = (item.namespace, item.name)
                yield item

    async def iterate(self, query: ListQuery, after: tuple[str, str] | None = None, *,
                      batch: int = PAGE, as_of: int | None = None, ahead: bool = False
                      ) -> AsyncGenerator[Item, None]:
        """Current objects matching ``query`` in (namespace, name) order: each
        batch from ClickHouse overlaid with the cache's changes in its range
        (taken per batch, so a page costs its size, not the cache's). With
        ``as_of``, as they were at that resourceVersion: a list streamed while
        writes go on holds no item newer than its own resourceVersion. With
        ``ahead``, for a reader who wants more than one batch, the next batch
        is read from ClickHouse while this one is sent."""
        def read(after: tuple[str, str] | None) -> asyncio.Future[list[StoredObject]]:
            return self._taken_ahead(query, after, batch) or self._read(query, after, batch)
        cursor = after
        reading = read(cursor)
        try:
            while True:
                rows = await reading
                exhausted = len(rows) < batch
                upper = None if exhausted else (rows[-1].namespace, rows[-1].name)
                if ahead and upper is not None:
                    reading = read(upper)
                merged: dict[tuple[str, str], Item | Cached] = {
                    (r.namespace, r.name): _stored(r) for r in rows}
                for (_, ns, name), change in self._changes.newest(
                        query.rtype.id, query.namespace, cursor, upper):
                    key = (ns, name)
                    have = merged.get(key)
                    if have is None or change.resource_version >= have.resource_version:
                        merged[key] = change
                if as_of is not None:
                    await self._back_to(query, as_of, cursor, upper, merged)
                for key in sorted(merged):
                    entry = merged[key]
                    if isinstance(entry, Item):
                        yield entry
                    elif entry.type != "DELETED" and query.matches(entry.head):
                        yield Item(key[0], key[1], entry.resource_version, raw=entry.raw)
                if exhausted:
                    return
                if not ahead:
                    reading = read(upper)
                cursor = upper
        finally:
            _abandon(reading)

    def _read(self, query: ListQuery, after: tuple[str, str] | None, batch: int
              ) -> asyncio.Future[list[StoredObject]]:
        """The store's ``batch`` current objects matching ``query`` past
        ``after``, read from now on."""
        params: dict[str, Any] = {}
        conditions = query.labels.sql(params) + query.fields.sql(params)

        async def page() -> list[StoredObject]:
            rows: list[StoredObject] = await self._guard(self._store.list_page(
                query.rtype.id, namespace=query.namespace, conditions=conditions,
                params=params, after=after, limit=batch))
            return rows
        return asyncio.ensure_future(page())

    def _read_ahead(self, query: ListQuery, after: tuple[str, str], batch: int) -> None:
        """Begin reading the batch a request continuing ``query`` after
        ``after`` will want first; dropped unasked after READ_AHEAD_SECONDS,
        or when READ_AHEAD newer ones are waiting."""
        key: BatchKey = (query.digest(), after, batch)
        if key in self._ahead:
            return
        while len(self._ahead) >= READ_AHEAD:
            self._ahead.pop(next(iter(self._ahead))).drop()
        expiry = asyncio.get_running_loop().call_later(
            READ_AHEAD_SECONDS, lambda: self._ahead.pop(key).drop())
        self._ahead[key] = _ReadAhead(self._read(query, after, batch), self._changes.stored,
                                      expiry)

    def _taken_ahead(self, query: ListQuery, after: tuple[str, str] | None, batch: int
                     ) -> asyncio.Future[list[StoredObject]] | None:
        """The batch read ahead for this request, if one was and it is still
        whole: every change the store may not have had when it was read is
        still in the cache, which is overlaid on it as on any batch."""
        ahead = self._ahead.pop((query.digest(), after, batch), None)
        if ahead is None:
            return None
        if not self._changes.holds_after(ahead.stored):
            ahead.drop()
            return None
        ahead.expiry.cancel()
        return ahead.reading

    async def _back_to(self, query: ListQuery, rv: int, after: tuple[str, str] | None,
                       upto: tuple[str, str] | None,
                       merged: dict[tuple[str, str], Item | Cached]) -> None:
        """Turns ``merged``, a batch of a list past ``after`` up to ``upto``,
        back to how it was at ``rv``, where anything in it is newer (changed,
        created or deleted since the list began)."""
        newest = max((e.resource_version for e in merged.values()), default=0)
        if newest <= rv:
            return
        if newest > self._changes.resource_version:  # ClickHouse ahead of the cache
            await self._changes.wait_for(newest)
        try:
            then = await self._as_of(query, rv, after, upto)
        except Expired:
            # The list has streamed for longer than the cache holds changes:
            # this batch is served as it is now, as a watch from ``rv``
            # replays it (a paged list gets 410 instead, at its next page).
            log.info("a list as of %d outlived the cache's history: a batch is served"
                     " as it is now", rv)
            return
        for key, item in then.items():
            if item is None:
                merged.pop(key, None)
            else:
                merged[key] = item

    # -- writes -----------------------------------------------------------
    async def _write(self, request: WriteRequest) -> Written:
        """Submit ``request``, taken now; answers once this frontend has read
        its change (read-your-writes)."""
        await self._changes.admit()
        with metrics.labelled(metrics.WRITE_COMMIT_SECONDS, request.op).time():
            reply = await self._writer.submit(replace(request, now=now_rfc3339()))
        if reply.obj is not None and request.dry_run:
            return reply.obj
        replied = time.perf_counter()
        try:
            if reply.obj is None:
                return await self._changes.committed(
                    (request.resource, request.namespace, request.name),
                    reply.resource_version)
            await self._changes.wait_for(reply.resource_version)
            return reply.obj
        finally:
            metrics.stage("visible").observe(
                time.perf_counter() - replied)

    async def create(self, rtype: ResourceType, namespace: str, obj: JSON, *,
                     dry_run: bool = False, manager: str = "", applied: bool = False
                     ) -> Written:
        return await self._write(WriteRequest(
            op="create", resource=rtype.id, namespace=namespace, name=obj["metadata"]["name"],
            obj=obj, dry_run=dry_run, manager=manager, applied=applied))

    async def update(self, rtype: ResourceType, namespace: str, name: str, obj: JSON, *,
                     dry_run: bool = False, manager: str = "", applied: bool = False
                     ) -> Written:
        return await self._write(WriteRequest(
            op="update", resource=rtype.id, namespace=namespace, name=name, obj=obj,
            dry_run=dry_run, manager=manager, applied=applied))

    async def patch(self, rtype: ResourceType, namespace: str, name: str, *,
                    content_type: str, patch: Any, manager: str = "",
                    force: bool = False, dry_run: bool = False) -> tuple[Written, bool]:
        """Apply a patch to the current object, retrying on conflicts with other
        writers. Returns (object, created)."""
        for _ in range(PATCH_RETRIES):
            try:
                current: JSON | None = await self.get(rtype, namespace, name)
            except NotFound:
                if content_type != patching.APPLY:
                    raise
                current = None
            if current is None:
                obj = patching.apply(None, patch, manager=manager,
                                     api_version=rtype.api_version, force=force)
                obj = validation.check_object(rtype, obj, namespace=namespace or None,
                                              name=name)
                return await self.create(rtype, namespace, obj, dry_run=dry_run,
                                         manager=manager, applied=True), True
            if content_type == patching.MERGE:
                obj = patching.merge_patch(current, patch)
            elif content_type == patching.JSON_PATCH:
                obj = patching.json_patch(current, patch)
            else:
                obj = patching.apply(current, patch, manager=manager,
                                     api_version=rtype.api_version, force=force)
            obj = validation.check_object(rtype, obj, namespace=namespace or None, name=name)
            # As kube-apiserver: the patched object keeps the current
            # resourceVersion unless the patch set another, which is then a
            # precondition (409 when stale). Without one the patch is applied
            # to the latest object again whenever another writer came first.
            latest = current["metadata"]["resourceVersion"]
            given = (obj.get("metadata") or {}).get("resourceVersion")
            precondition = bool(given) and given != latest and content_type != patching.APPLY
            if not precondition:
                obj["metadata"]["resourceVersion"] = latest
            try:
                return await self.update(rtype, namespace, name, obj, dry_run=dry_run,
                                         manager=manager,
                                         applied=content_type == patching.APPLY), False
            except Refused as err:
                if err.code != 409 or precondition:
                    raise
        raise Conflict(f'{rtype.plural}.{rtype.group} "{name}": too many concurrent writers;'
                       " try again")

    async def delete(self, rtype: ResourceType, namespace: str, name: str,
                     preconditions: JSON, *, dry_run: bool = False, finalizer: str = "") -> Written:
        return await self._write(WriteRequest(
            op="delete", resource=rtype.id, namespace=namespace, name=name,
            preconditions=preconditions, dry_run=dry_run, finalizer=finalizer))

    async def delete_collection(self, query: ListQuery, *, dry_run: bool = False,
                                finalizer: str = "") -> tuple[int, list[JSON]]:
        listed = await self.list_objects(query)
        targets = [item async for item in listed.items]
        deleted = []
        for item in targets:
            try:
                deleted.append(as_json(await self.delete(
                    query.rtype, item.namespace, item.name, {}, dry_run=dry_run,
                    finalizer=finalizer)))
            except Refused as err:
                if err.code != 404:
                    raise
        return self._changes.resource_version, deleted

    async def wait_for(self, wanted: int) -> None:
        """Wait (3 s at most, as kube-apiserver's cache does) until the cache
        holds resourceVersion ``wanted``; a version it does not reach by then
        is "too large" (504 with the ResourceVersionTooLarge cause, on which
        client-go's reflectors list afresh: a version from another store,
        e.g. the etcd the reports were migrated from, is one)."""
        try:
            await self._changes.wait_for(wanted, timeout=3)
        except Unavailable as err:
            raise Timeout(f"Too large resource version: {wanted}, current:"
                          f" {self._changes.resource_version}", retry_after=1,
                          causes=[{"reason": "ResourceVersionTooLarge",
                                   "message": "Too large resource version"}]) from err

    # -- watch ------------------------------------------------------------
    def subscribe(self, since: int, query: ListQuery) -> tuple[list[Event], Subscription]:
        try:
            return self._changes.subscribe(since, (query.rtype.id, query.namespace))
        except Expired as err:
            raise Gone(str(err)) from err

    def unsubscribe(self, subscription: Subscription) -> None:
        self._changes.unsubscribe(subscription)


#: kube-apiserver's words for a continuation whose snapshot is gone
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You"
    " can start a new list without the continue parameter, or use the continue token in"
    " this response to retrieve the remainder of the results. Continuing with the"
    " provided token results in an inconsistent list - objects that were created,"
    " modified, or deleted between the time the first chunk was returned and now may show"
    " up in the list.")


def _expired_continue(query: ListQuery, after: tuple[str, str] | None) -> Gone:
    token = paging.encode(paging.Continue(-1, after, query.digest())) if after else ""
    return Gone(INCONSISTENT_CONTINUE, continue_token=token)


async def _with_snapshot(items: AsyncIterator[Item], snapshot: dict[tuple[str, str], Item | None]
                 ) -> AsyncIterator[Item]:
    """``items`` (now, in key order) with the keys of ``snapshot`` as it has
    them instead."""
    then = sorted(((k, item) for k, item in snapshot.items() if item is not None),
                  key=lambda pair: pair[0])
    i = 0
    async for item in items:
        key = (item.namespace, item.name)
        while i < len(then) and then[i][0] < key:
            yield then[i][1]
            i += 1
        if key not in snapshot:
            yield item
    for _, item in then[i:]:
        yield item


async def _empty() -> AsyncIterator[Item]:
    for _ in ():
        yield _


def parse_resource_version(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise BadRequest(f'invalid resource version "{text}": it must be a non-negative'
                         " integer")
    return value


def not_found(rtype: ResourceType, name: str) -> NotFound:
    return NotFound(f'{rtype.plural}.{rtype.group} "{name}" not found',
                    details={"name": name, "group": rtype.group, "kind": rtype.plural})
