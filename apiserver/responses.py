"""JSON responses, and errors as Kubernetes ``Status`` responses: what the
HTTP handlers answer and the access middleware refuses with."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from apiserver.contract.errors import ApiError


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def error_response(err: ApiError) -> Response:
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
    return json_response(err.status(), err.code, headers)
