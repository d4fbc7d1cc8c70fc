"""Lists as responses: YAML in one piece, JSON (objects, a Table or partial
metadata) streamed as the items arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import yaml
from starlette.responses import Response, StreamingResponse

from apiserver.contract import tables
from apiserver.storage.service import Item, ListResult
from pipeline.model.resources import ResourceType

JSON = dict[str, Any]


async def items_of(objects: list[JSON]) -> AsyncIterator[Item]:
    """Objects already at hand as the items of a ``ListResult``."""
    for obj in objects:
        meta = obj.get("metadata") or {}
        yield Item(meta.get("namespace", ""), meta.get("name", ""), 0, obj=obj)


async def list_response(rtype: ResourceType, kind: str, result: ListResult) -> Response:
    if kind == "yaml":
        items = [item.object() async for item in result.items]
        body = {"apiVersion": rtype.api_version, "kind": rtype.list_kind,
                "metadata": _list_meta(result), "items": items}
        return Response(yaml.safe_dump(body, sort_keys=False), media_type="application/yaml")
    return StreamingResponse(_list_chunks(rtype, kind, result), media_type="application/json")


def _list_meta(result: ListResult) -> JSON:
    meta: JSON = {"resourceVersion": str(result.resource_version)}
    if result.continue_token:
        meta["continue"] = result.continue_token
    return meta


async def _list_chunks(rtype: ResourceType, kind: str, result: ListResult
                       ) -> AsyncIterator[bytes]:
    """A list as JSON, written as its items arrive: memory stays flat however
    long the list. ``metadata`` comes last, once the continue token is known."""
    if kind == "table":
        yield (b'{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":'
               + orjson.dumps(tables.COLUMNS) + b',"rows":[')
    elif kind == "metadata":
        yield b'{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","items":['
    else:
        yield orjson.dumps({"apiVersion": rtype.api_version, "kind": rtype.list_kind})[:-1] \
            + b',"items":['
    first = True
    batch: list[bytes] = []
    now = tables.now()
    async for item in result.items:
        if kind == "table":
            chunk = orjson.dumps(tables.row(rtype, item.object(), now))
        elif kind == "metadata":
            chunk = orjson.dumps(tables.partial_metadata(item.object()))
        else:
            chunk = item.json()
        batch.append(chunk if first else b"," + chunk)
        first = False
        if len(batch) >= 100:
            yield b"".join(batch)
            batch = []
    batch.append(b'],"metadata":' + orjson.dumps(_list_meta(result)) + b"}")
    yield b"".join(batch)
