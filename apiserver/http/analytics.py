"""Read-only SQL over the project's ClickHouse tables, for analysts and the
``trends`` command when ClickHouse is embedded in the running system. Each
query is bounded (REPORTS_ANALYTICS_*: time, rows, memory, threads), runs on
threads of its own, and is stopped when its client goes away."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from apiserver.contract import failures
from apiserver.contract.errors import BadRequest
from apiserver.storage.ports import AnalyticsQueries
from pipeline.model.storage import StorageError

PATH = "/analytics/v1/query"
#: how often a running query checks that its client is still there
POLL_SECONDS = 0.25


def _default(value: Any) -> Any:
    return str(value)


async def query(request: Request) -> Response:
    """Run the body's query on the analytics store; its columns and rows."""
    store: AnalyticsQueries = request.app.state.analytics
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"the request body is not valid JSON: {err}") from err
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        raise BadRequest('the body must be {"query": "SELECT ...", "parameters": {...}}')
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest("parameters must be an object")
    tag = str(uuid.uuid4())
    running = asyncio.ensure_future(store.analytics(body["query"], params, tag=tag))
    try:
        # a client that goes away takes its query with it
        while not (await asyncio.wait({running}, timeout=POLL_SECONDS))[0]:
            if await request.is_disconnected():
                await store.cancel_analytics(tag)
                break
        columns, rows = await running
    except StorageError as err:
        raise failures.api_error(err) from err
    finally:
        if not running.done():
            await store.cancel_analytics(tag)
    return Response(orjson.dumps({"columns": columns, "rows": rows}, default=_default,
                                 option=orjson.OPT_PASSTHROUGH_DATETIME),
                    media_type="application/json")
