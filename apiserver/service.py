"""Reading and writing reports: ClickHouse state overlaid with the change log's
tail for reads, the committer (through Kafka) for writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from apiserver.changelog import ChangeLog
from apiserver.errors import NotFound, Unavailable
from apiserver.writes import Writer
from pipeline.resources import ResourceType
from pipeline.store import ReportStore, StoreError

JSON = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ReportService:
    def __init__(self, *, store: ReportStore, changelog: ChangeLog, writer: Writer):
        self._store = store
        self._changelog = changelog
        self._writer = writer

    async def _read(self, coro: Any) -> Any:
        try:
            return await coro
        except StoreError as err:
            raise Unavailable(f"storage is unavailable: {err}", retry_after=1) from err

    async def get(self, rtype: ResourceType, namespace: str, name: str) -> JSON:
        await self._changelog.sync()
        stored = await self._read(self._store.get(rtype.id, namespace, name))
        change = self._changelog.latest((rtype.id, namespace, name))
        if change is not None and (stored is None or change.resource_version >=
                                   stored.resource_version):
            if change.type != "DELETED":
                return change.obj
        elif stored is not None:
            return orjson.loads(stored.raw)
        raise NotFound(f'{rtype.plural}.{rtype.group} "{name}" not found',
                       details={"name": name, "group": rtype.group, "kind": rtype.plural})

    async def list(self, rtype: ResourceType, namespace: str | None) -> tuple[int, list[JSON]]:
        """(resourceVersion of the list, objects ordered by namespace and name)."""
        await self._changelog.sync()
        list_rv = self._changelog.resource_version
        rows = await self._read(self._store.list(rtype.id, namespace))
        overlay = dict(self._changelog.newest(rtype.id, namespace))
        items: dict[tuple[str, str], tuple[int, JSON | None, str | None]] = {}
        for row in rows:
            items[(row.namespace, row.name)] = (row.resource_version, None, row.raw)
        for (_, ns, name), change in overlay.items():
            have = items.get((ns, name))
            if have is None or change.resource_version >= have[0]:
                items[(ns, name)] = (change.resource_version,
                                     None if change.type == "DELETED" else change.obj, None)
        out = []
        for key in sorted(items):
            _, obj, raw = items[key]
            if obj is not None:
                out.append(obj)
            elif raw is not None:
                out.append(orjson.loads(raw))
        return list_rv, out

    async def _write(self, **kwargs: Any) -> JSON:
        reply = await self._writer.submit(now=now_rfc3339(), **kwargs)
        await self._changelog.wait_for(reply.resource_version)
        assert reply.obj is not None
        return reply.obj

    async def create(self, rtype: ResourceType, namespace: str, obj: JSON) -> JSON:
        return await self._write(op="create", resource=rtype.id, namespace=namespace,
                                 name=obj["metadata"]["name"], obj=obj)

    async def update(self, rtype: ResourceType, namespace: str, name: str, obj: JSON) -> JSON:
        return await self._write(op="update", resource=rtype.id, namespace=namespace,
                                 name=name, obj=obj)

    async def delete(self, rtype: ResourceType, namespace: str, name: str,
                     preconditions: JSON) -> JSON:
        return await self._write(op="delete", resource=rtype.id, namespace=namespace,
                                 name=name, preconditions=preconditions)
