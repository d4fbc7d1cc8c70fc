"""Watch streams: initial state, then the change log's events for one watcher,
filtered by its namespace and selectors, with bookmarks and timeouts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from apiserver.contract import failures
from apiserver.contract.errors import ApiError
from apiserver.storage.service import ListQuery, ReportService, parse_resource_version
from pipeline.model.cache import Cached, Event
from pipeline.model.storage import StorageError

log = logging.getLogger(__name__)
JSON = dict[str, Any]
#: Encodes one watch event: its type and object (parsed, or as the cache keeps it).
Render = Callable[[str, "JSON | Cached"], bytes]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class WatchOptions:
    resource_version: str | None = None
    send_initial_events: bool | None = None
    bookmarks: bool = False
    timeout: float = 1800.0
    bookmark_interval: float = 5.0


def transition(query: ListQuery, event: Event) -> tuple[str, Cached] | None:
    """The event this watcher sees for ``event``: objects moving into the
    selection are ADDED, out of it DELETED, as the kube-apiserver's cache does."""
    rtype = query.rtype
    key = event.key
    if key[0] != rtype.id or (query.namespace is not None and key[1] != query.namespace):
        return None
    change = event.change
    if change.type == "DELETED":
        return ("DELETED", change) if query.matches(change.head) else None
    now = query.matches(change.head)
    prev: Cached | None = event.previous
    before = prev is not None and prev.type != "DELETED" and query.matches(prev.head)
    if change.type == "ADDED" or prev is None or prev.type == "DELETED":
        if now:
            return (change.type if prev is None else "ADDED", change)
        return None
    if now and before:
        return ("MODIFIED", change)
    if now:
        return ("ADDED", change)
    if before:
        return ("DELETED", change)
    return None


def bookmark(query: ListQuery, rv: int, *, initial_end: bool = False) -> JSON:
    meta: JSON = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return {"kind": query.rtype.kind, "apiVersion": query.rtype.api_version, "metadata": meta}


async def stream(service: ReportService, query: ListQuery, options: WatchOptions,
                 render: Render) -> AsyncIterator[bytes]:
    """Encoded watch events until the timeout, the client leaving, or the
    watcher falling too far behind (then the client starts again)."""
    try:
        async with asyncio.timeout(options.timeout):
            async for chunk in _events(service, query, options, render):
                yield chunk
    except TimeoutError:
        return
    except ApiError as err:
        yield render("ERROR", err.status())
    except StorageError as err:
        yield render("ERROR", failures.api_error(err).status())


async def _events(service: ReportService, query: ListQuery, options: WatchOptions,
                  render: Render) -> AsyncIterator[bytes]:
    rv_text = options.resource_version
    initial = options.send_initial_events
    if initial is None:
        initial = rv_text in (None, "", "0")
    seen: dict[tuple[str, str], int] = {}
    if rv_text and rv_text != "0":
        since = parse_resource_version(rv_text)
        await service.wait_for(since)
    else:
        since = None
    if initial or since is None:
        if rv_text in (None, ""):
            await service.sync()
        since = service.resource_version
    backlog, sub = service.subscribe(since, query)
    try:
        if initial:
            listed = await service.list_objects(query, resource_version="0")
            async for item in listed.items:
                seen[(item.namespace, item.name)] = item.resource_version
                yield render("ADDED", item.object())
            if options.bookmarks and options.send_initial_events:
                yield render("BOOKMARK", bookmark(query, since, initial_end=True))
        last = since
        for past in backlog:
            out = _visible(query, past, seen)
            last = past.change.resource_version
            if out is not None:
                yield render(*out)
        event: Event | None
        while True:
            try:
                async with asyncio.timeout(options.bookmark_interval):
                    event = await sub.queue.get()
            except TimeoutError:
                if sub.overflowed:
                    return
                if options.bookmarks:
                    yield render("BOOKMARK", bookmark(query, max(
                        last, service.resource_version)))
                continue
            # Everything already queued goes out in one chunk: one write to the
            # connection however many events a busy moment brought.
            chunks = []
            while event is not None:
                last = event.change.resource_version
                out = _visible(query, event, seen)
                if out is not None:
                    chunks.append(render(*out))
                if sub.queue.empty():
                    break
                event = sub.queue.get_nowait()
            if chunks:
                yield b"".join(chunks)
            if event is None:  # the server is stopping
                return
            if sub.overflowed and sub.queue.empty():
                return
    finally:
        service.unsubscribe(sub)


def _visible(query: ListQuery, event: Event, seen: dict[tuple[str, str], int]
             ) -> tuple[str, Cached] | None:
    key = (event.key[1], event.key[2])
    if seen.get(key, 0) >= event.change.resource_version:
        return None
    return transition(query, event)
