"""Read-only SQL over the project's ClickHouse tables, for analysts and the
``trends`` command when ClickHouse is embedded in the running system."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from apiserver.errors import BadRequest, Unavailable
from pipeline.store import QueryError, ReportStore, StoreError

PATH = "/analytics/v1/query"


def _default(value: Any) -> Any:
    return str(value)


def endpoint(store: ReportStore) -> Any:
    async def query(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as err:
            raise BadRequest(f"the request body is not valid JSON: {err}") from err
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            raise BadRequest('the body must be {"query": "SELECT ...", "parameters": {...}}')
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            raise BadRequest("parameters must be an object")
        try:
            columns, rows = await store.analytics(body["query"], params)
        except QueryError as err:
            raise BadRequest(f"the query failed: {err}") from err
        except StoreError as err:
            raise Unavailable(f"storage is unavailable: {err}", retry_after=1) from err
        return Response(orjson.dumps({"columns": columns, "rows": rows}, default=_default,
                                     option=orjson.OPT_PASSTHROUGH_DATETIME),
                        media_type="application/json")
    return query
