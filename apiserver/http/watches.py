"""Watches as responses: the query parameters of a watch, and its events
rendered one JSON line each in the representation the client asked for."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from apiserver.contract import tables
from apiserver.contract.errors import BadRequest
from apiserver.http.objects import represent
from apiserver.http.params import query_flag
from apiserver.storage import watching
from apiserver.storage.service import ListQuery, ReportService
from pipeline.model.cache import Cached
from pipeline.model.resources import ResourceType

JSON = dict[str, Any]


def watch_response(request: Request, service: ReportService, query: ListQuery,
                   kind: str) -> Response:
    params = request.query_params
    timeout = params.get("timeoutSeconds")
    try:
        seconds = float(timeout) if timeout else 1800.0
    except ValueError:
        raise BadRequest(f'invalid timeoutSeconds "{timeout}"') from None
    initial = params.get("sendInitialEvents")
    options = watching.WatchOptions(
        resource_version=params.get("resourceVersion"),
        send_initial_events=None if initial is None else initial.lower() == "true",
        bookmarks=query_flag(request, "allowWatchBookmarks"), timeout=seconds)
    render = event_renderer(query.rtype, kind)
    return StreamingResponse(watching.stream(service, query, options, render),
                             media_type="application/json")


def event_renderer(rtype: ResourceType, kind: str) -> watching.Render:
    """Renders a watch's events: a Table's columns are defined by the first."""
    first = [True]

    def render(etype: str, obj: JSON | Cached) -> bytes:
        if isinstance(obj, Cached):
            if kind not in ("table", "metadata"):  # the object as it is, not re-encoded
                return b'{"type":"%s","object":%s}\n' % (etype.encode(), obj.raw)
            obj = obj.head if kind == "metadata" else obj.obj
        if etype in ("ERROR", "BOOKMARK"):
            body = obj if etype == "ERROR" or kind != "metadata" else tables.partial_metadata(obj)
        else:
            body = represent(rtype, kind, obj)
            if kind == "table":
                if not first[0]:
                    body["columnDefinitions"] = []
                first[0] = False
        return orjson.dumps({"type": etype, "object": body}) + b"\n"
    return render
